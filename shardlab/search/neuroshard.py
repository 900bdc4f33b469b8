"""NeuroShard's search (ALGORITHMS.md section 4): no hardware in the loop, only a cost model.

Table-wise, greedy grid: for each dim-balance cap s in ``caps`` (11 values in [1.0, 1.5]),
blocks are sorted by predicted single-block compute cost (descending) and each goes to the
feasible device (memory fits and dim sum + dim <= s x mean dim sum per device; if no device
meets the cap, any device where it fits) whose predicted fused compute cost after adding it is
lowest (ties: less memory, lower id). The cap whose simulated plan cost is lowest wins.

Column-wise, beam search: from each beam state (a set of column splits), the candidates are
the union of the top-``top_n`` blocks by size and by predicted single cost whose halves stay
multiples of 4; each is halved, the table-wise search re-run and the plan simulated; the best
``beam_width`` states are kept for up to ``max_splits`` rounds; the best plan seen is returned.

Shard costs: models that are an :class:`~shardlab.costmodel.base.IncrementalComputeModel`
(``embed``/``predict_sums``; every shipped one: per-table encodings are summed, so adding a
table to a device adds a row) are evaluated incrementally; other models
through ``predict`` with a cache keyed by shard content (the multiset of (table, columns)).

Bounds: column-wise search refuses ``ngpu > constants.MAX_NEUROSHARD_GPUS`` at once (one line);
table-wise (``neuroshard_tw``) answers up to ``constants.MAX_SEARCH_GPUS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from shardlab.costmodel.base import IncrementalComputeModel, Simulated, simulate_many
from shardlab.costmodel.bundle import CostModelBundle, load_bundle
from shardlab.errors import InfeasibleError
from shardlab.plan import Placement, Plan
from shardlab import constants as C
from shardlab.search.base import check_search_gpus, register_sharder
from shardlab.tables import Table, Task

#: The seed's 11 dim-balance caps.
DEFAULT_CAPS = tuple(float(x) for x in np.linspace(1.0, 1.5, 11))


@dataclass(frozen=True)
class Block:
    """A column block of a table: ``cols`` columns from ``col_offset``, as a sub-table."""

    table: Table
    parent: str
    col_offset: int

    @property
    def cols(self) -> int:
        """Width of the block."""
        return self.table.dim


def whole_blocks(task: Task) -> tuple[Block, ...]:
    """One block per table (no splits)."""
    return tuple(Block(t, t.name, 0) for t in task.tables)


def split_block(blocks: tuple[Block, ...], i: int) -> tuple[Block, ...]:
    """``blocks`` with block i halved (two blocks of cols/2)."""
    b = blocks[i]
    half = b.cols // 2
    parts = tuple(Block(b.table.with_dim(half, name=f"{b.parent}[{off}:{off + half}]"), b.parent, off)
                  for off in (b.col_offset, b.col_offset + half))
    return blocks[:i] + parts + blocks[i + 1:]


class ShardCoster:
    """Predicted fused compute (fw, bw ms) of device shards, incremental where the model allows."""

    def __init__(self, model: Any):
        self.model = model
        self.incremental = isinstance(model, IncrementalComputeModel)
        self._emb: dict[Table, np.ndarray] = {}
        self._cache: dict[tuple, np.ndarray] = {}

    def embed(self, blocks: Sequence[Block]) -> np.ndarray:
        """(n, d) encodings of the blocks (cached per sub-table)."""
        new = [b.table for b in blocks if b.table not in self._emb]
        if new:
            for t, row in zip(new, self.model.embed(new)):
                self._emb[t] = row
        return np.stack([self._emb[b.table] for b in blocks])

    def shards(self, shards: Sequence[Sequence[Table]]) -> np.ndarray:
        """(n, 2) fw/bw ms through ``predict``, cached by shard content."""
        keys = [tuple(sorted((t.name, t.dim) for t in s)) for s in shards]
        todo = [i for i, k in enumerate(keys) if k not in self._cache]
        if todo:
            for i, row in zip(todo, self.model.predict([shards[i] for i in todo])):
                self._cache[keys[i]] = np.asarray(row, dtype=float)
        return np.stack([self._cache[k] for k in keys]) if keys else np.zeros((0, 2))


@dataclass
class NeuroShardSharder:
    """NeuroShard (module docstring) over a cost-model bundle (name of a shipped one or a path)."""

    name: str = "neuroshard"
    model: str | CostModelBundle = "neuroshard"
    column_wise: bool = True
    caps: tuple[float, ...] = DEFAULT_CAPS
    beam_width: int = 3
    max_splits: int = 10
    top_n: int = 10
    profile: str = "cpu"
    _bundle: CostModelBundle | None = field(default=None, repr=False)

    def bundle(self) -> CostModelBundle:
        """The cost model (loaded once)."""
        if self._bundle is None:
            self._bundle = self.model if isinstance(self.model, CostModelBundle) else load_bundle(self.model, self.profile)
        return self._bundle

    def table_wise(self, task: Task, blocks: tuple[Block, ...], coster: ShardCoster, comm: Any
                   ) -> tuple[list[int], Simulated] | None:
        """Best greedy assignment over the caps: (device of each block, simulated cost), or None
        when no cap gives a memory-feasible assignment."""
        g = task.ngpu
        mem_need = np.array([task.block_bytes(b.table.rows, b.cols) for b in blocks], dtype=np.int64)
        dims = np.array([b.cols for b in blocks])
        if coster.incremental:
            emb = coster.embed(blocks)
            single = coster.model.predict_sums(emb, np.ones(len(blocks))).sum(axis=1)
        else:
            emb = None
            single = coster.shards([[b.table] for b in blocks]).sum(axis=1)
        order = sorted(range(len(blocks)), key=lambda i: (-single[i], i))
        mean_dim = dims.sum() / g
        best: tuple[list[int], Simulated] | None = None
        dim_caps = np.array(self.caps) * mean_dim
        if emb is not None:
            results = self._greedy_caps(task, order, emb, mem_need, dims, dim_caps, coster.model)
        else:
            results = [self._greedy(task, blocks, order, mem_need, dims, c, coster) for c in dim_caps]
        done = [got for got in results if got is not None]
        if not done:
            return None
        dev = np.array([got[0] for got in done])
        dsums = np.stack([np.bincount(row, weights=dims, minlength=g) for row in dev]).astype(int)
        sims = simulate_many(np.stack([got[1] for got in done]), dsums, comm)
        for (devices, _), sim in zip(done, sims):
            if best is None or sim.cost_ms < best[1].cost_ms - 1e-12:
                best = (devices, sim)
        return best

    @staticmethod
    def _greedy_caps(task: Task, order: list[int], emb: np.ndarray, mem_need: np.ndarray, dims: np.ndarray,
                     dim_caps: np.ndarray, model: Any) -> list[tuple[list[int], np.ndarray] | None]:
        """The greedy placement for every cap at once (caps are a batch dimension: one model
        call per block for all caps and devices). Ties: less memory, then the lower device."""
        c, g = len(dim_caps), task.ngpu
        mem = np.zeros((c, g), dtype=np.int64)
        dsum = np.zeros((c, g))
        counts = np.zeros((c, g))
        cost = np.zeros((c, g, 2))
        sums = np.zeros((c, g, emb.shape[1]))
        alive = np.ones(c, dtype=bool)
        devices = np.zeros((c, len(mem_need)), dtype=int)
        rows = np.arange(c)
        for i in order:
            fits = mem + mem_need[i] <= task.mem_cap_bytes
            ok = fits & (dsum + dims[i] <= dim_caps[:, None] + 1e-9)
            ok = np.where(ok.any(axis=1, keepdims=True), ok, fits)
            alive &= ok.any(axis=1)
            pred = model.predict_sums((sums + emb[i]).reshape(c * g, -1), (counts + 1).reshape(-1)).reshape(c, g, 2)
            total = np.where(ok, np.round(pred.sum(axis=2), 9), np.inf)
            # lexicographic (total, memory, device) per cap: memory breaks exact ties of total
            best_total = total.min(axis=1, keepdims=True)
            tied_mem = np.where(total == best_total, mem, np.iinfo(np.int64).max)
            d = np.argmin(tied_mem, axis=1)
            devices[:, i] = d
            mem[rows, d] += mem_need[i]
            dsum[rows, d] += dims[i]
            counts[rows, d] += 1
            cost[rows, d] = pred[rows, d]
            sums[rows, d] += emb[i]
        return [(devices[k].tolist(), cost[k]) if alive[k] else None for k in range(c)]

    def _greedy(self, task: Task, blocks: tuple[Block, ...], order: list[int], mem_need: np.ndarray,
                dims: np.ndarray, dim_cap: float, coster: ShardCoster) -> tuple[list[int], np.ndarray] | None:
        """One cap's greedy placement through ``predict`` (models without incremental sums)."""
        g = task.ngpu
        mem = np.zeros(g, dtype=np.int64)
        dsum = np.zeros(g)
        cost = np.zeros((g, 2))
        members: list[list[Table]] = [[] for _ in range(g)]
        devices = [0] * len(blocks)
        for i in order:
            fits = mem + mem_need[i] <= task.mem_cap_bytes
            ok = fits & (dsum + dims[i] <= dim_cap + 1e-9)
            if not ok.any():
                ok = fits
            if not ok.any():
                return None
            cand = np.flatnonzero(ok)
            pred = coster.shards([members[d] + [blocks[i].table] for d in cand])
            total = pred.sum(axis=1)
            j = min(range(len(cand)), key=lambda k: (round(float(total[k]), 9), mem[cand[k]], cand[k]))
            d = int(cand[j])
            devices[i] = d
            mem[d] += mem_need[i]
            dsum[d] += dims[i]
            cost[d] = pred[j]
            members[d].append(blocks[i].table)
        return devices, cost

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Search a plan (deterministic: the seed is recorded, nothing here is random)."""
        best, best_blocks, _ = self._search(task)
        return self._plan(task, best_blocks, best[0], seed)

    def candidates(self, task: Task, seed: int = 0, k: int = 3) -> list[Plan]:
        """The ``k`` best distinct plans this search evaluated under its cost model (the
        table-wise plan and every beam state), by simulated cost ascending; the first is
        :meth:`shard`'s plan up to ties."""
        _, _, evaluated = self._search(task)
        out: dict[tuple, Plan] = {}
        for _, blocks, devices in sorted(evaluated, key=lambda e: e[0]):
            plan = self._plan(task, blocks, devices, seed)
            out.setdefault(tuple(sorted((p.table, p.col_offset, p.cols, p.device) for p in plan.placements)), plan)
            if len(out) == k:
                break
        return list(out.values())

    def _search(self, task: Task) -> tuple[tuple[list[int], Simulated], tuple[Block, ...],
                                           list[tuple[float, tuple[Block, ...], list[int]]]]:
        """(best (devices, simulated), its blocks, every evaluated (cost ms, blocks, devices))."""
        if self.column_wise:
            check_search_gpus(task, C.MAX_NEUROSHARD_GPUS, "column-wise neuroshard")
        task.check_feasible(column_wise=self.column_wise)
        coster = ShardCoster(self.bundle().compute)
        comm = self.bundle().comm_for(task.ngpu)[0]
        blocks = whole_blocks(task)
        best = self.table_wise(task, blocks, coster, comm)
        best_blocks = blocks
        evaluated = [] if best is None else [(best[1].cost_ms, blocks, best[0])]
        if self.column_wise:
            beam = [(best[1].cost_ms if best else float("inf"), blocks)]
            seen = {self._key(blocks)}
            for _ in range(self.max_splits):
                scored = []
                for _, state in beam:
                    for i in self._candidates(state, coster):
                        nxt = split_block(state, i)
                        key = self._key(nxt)
                        if key in seen:
                            continue
                        seen.add(key)
                        got = self.table_wise(task, nxt, coster, comm)
                        if got is not None:
                            scored.append((got[1].cost_ms, nxt, got))
                            evaluated.append((got[1].cost_ms, nxt, got[0]))
                if not scored:
                    break
                scored.sort(key=lambda x: x[0])
                beam = [(c, st) for c, st, _ in scored[: self.beam_width]]
                if best is None or scored[0][0] < best[1].cost_ms - 1e-12:
                    best, best_blocks = scored[0][2], scored[0][1]
        if best is None:
            raise InfeasibleError(f"task '{task.name}': neuroshard found no memory-feasible plan", "", 0.0)
        return best, best_blocks, evaluated

    @staticmethod
    def _key(blocks: tuple[Block, ...]) -> tuple:
        return tuple(sorted((b.parent, b.col_offset, b.cols) for b in blocks))

    def _candidates(self, blocks: tuple[Block, ...], coster: ShardCoster) -> list[int]:
        ok = [i for i, b in enumerate(blocks) if b.cols % 8 == 0]
        if not ok:
            return []
        by_size = sorted(ok, key=lambda i: (-blocks[i].table.size, i))[: self.top_n]
        if coster.incremental:
            single = coster.model.predict_sums(coster.embed([blocks[i] for i in ok]), np.ones(len(ok))).sum(axis=1)
        else:
            single = coster.shards([[blocks[i].table] for i in ok]).sum(axis=1)
        by_cost = [ok[j] for j in sorted(range(len(ok)), key=lambda j: (-single[j], ok[j]))[: self.top_n]]
        return sorted(set(by_size) | set(by_cost))

    def _plan(self, task: Task, blocks: tuple[Block, ...], devices: list[int], seed: int) -> Plan:
        placements = tuple(Placement(b.parent, b.col_offset, b.cols, 0, b.table.rows, d)
                           for b, d in zip(blocks, devices))
        return Plan(task.name, self.name, task.ngpu, placements, seed)


register_sharder("neuroshard", NeuroShardSharder)
register_sharder("neuroshard_tw", NeuroShardSharder, name="neuroshard_tw", column_wise=False)
#: NeuroShard searching with the model retrained on the broad campaign (``datasets/cpu_broad``).
register_sharder("neuroshard_broad", NeuroShardSharder, name="neuroshard_broad", model="neuroshard_broad")
