"""Row blocks in NeuroShard's search.

A table that fits no device whole (weights + optimizer state over the cap) is cut into ``k``
equal row blocks (:func:`~shardlab.search.row_split.equal_row_ranges`), each a sub-table whose
features (pooling factor, reuse bins) the data layer measures on the parent's lookups in its
range (:func:`~shardlab.data.lookups.row_block_table`), so the cost model sees each block's own
load; the blocks are pinned to consecutive devices ``first .. first + k - 1`` as TorchRec lays
them out:

- **row-wise** (``first`` = 0): ``k`` from the fewest blocks that fit up to G (powers of two
  between, and G itself: "over all devices"); TorchRec pads the shards to every rank;
- **table-row-wise** within host group h >= 1 (``first`` = h x ``host_size``, ``k`` <= host
  size): the table's rows stay inside one host (TorchRec pads to that host's ranks). Host 0's
  table-row-wise layout is row-wise's, so it is not listed twice.

The search picks one choice per oversized table by the model-simulated cost of the table-wise
plan around them (every other table placed by NeuroShard's greedy grid): every combination of
the tables' choices when there are at most ``max_combos`` (all costed in one batched call; ties
to the first combination, fewest blocks first), else coordinate descent: start from row-wise
over all G devices (every device holds 1/G of every such table), try each table's other
choices with the rest fixed, keep the best improvement, repeat until none (at most ``rounds``). Column splits are then
searched as before over the whole tables; row blocks are not split further.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.rowwise_comm import WithRowWise
from shardlab.data.lookups import placed_row_block, row_block_lookups, row_block_table
from shardlab.plan import Placement, Plan
from shardlab.schedule import batch_rows, owner_counts
from shardlab.search.feasibility import heuristic_plan
from shardlab.search.greedy_state import pack
from shardlab.search.row_split import equal_row_ranges, fewest_row_blocks
from shardlab.tables import Task


@dataclass(frozen=True)
class RowChoice:
    """``k`` row blocks on devices ``first .. first + k - 1``."""

    k: int
    first: int

    @property
    def sharding_type(self) -> str:
        """TorchRec's name for the layout."""
        return "row_wise" if self.first == 0 else "table_row_wise"


def oversized(task: Task) -> list[int]:
    """Indices of the task's tables that fit no device whole."""
    return [i for i, t in enumerate(task.tables) if task.table_bytes(t) > task.mem_cap_bytes]


def row_choices(task: Task, index: int, host_size: int = C.DEFAULT_HOST_SIZE) -> list[RowChoice]:
    """The layouts tried for table ``index`` (module docstring), by blocks, row-wise first. :class:`~shardlab.errors.InfeasibleError` naming the table when no split fits."""
    g = task.ngpu
    kmin = fewest_row_blocks(task, task.tables[index])
    ks = sorted({kmin, g} | {2 ** j for j in range(1, g.bit_length() + 1) if kmin <= 2 ** j <= g})
    out = [RowChoice(k, 0) for k in ks]
    h = max(1, min(host_size, g))
    out += [RowChoice(k, host * h) for host in range(1, g // h) for k in ks if k <= h]
    return out


class RowBlocks:
    """Row blocks of a task's tables, each made once (a block's features are measured on one
    batch of the task's batch size: :func:`~shardlab.data.lookups.row_block_table`)."""

    def __init__(self, task: Task, block_type: Callable[..., Any]):
        self.task = task
        self.block_type = block_type
        self._made: dict[tuple[int, int, int], Any] = {}

    def blocks(self, index: int, choice: RowChoice) -> tuple[Any, ...]:
        """Table ``index`` as ``choice``'s pinned blocks (``block_type(table, parent,
        col_offset, row_offset, device)``)."""
        t = self.task.tables[index]
        out = []
        for j, (off, n) in enumerate(equal_row_ranges(t.rows, choice.k)):
            key = (index, off, n)
            if key not in self._made:
                self._made[key] = row_block_table(t, off, n, self.task.batch_size)
            out.append(self.block_type(self._made[key], t.name, 0, off, choice.first + j))
        return tuple(out)

    def state(self, whole: Sequence[Any], choice: dict[int, RowChoice]) -> tuple[Any, ...]:
        """The search's blocks: ``whole`` (one per table, task order) with each chosen table
        replaced by its row blocks."""
        out: list[Any] = []
        for i, b in enumerate(whole):
            out.extend(self.blocks(i, choice[i]) if i in choice else (b,))
        return tuple(out)


def choose_rows(task: Task, whole: Sequence[Any],
                cost_many: Callable[[list[tuple[Any, ...]], list[dict[int, RowChoice]]], list[float]],
                block_type: Callable[..., Any], host_size: int = C.DEFAULT_HOST_SIZE,
                rounds: int = 3, max_combos: int = 256, rows: RowBlocks | None = None,
                only: Sequence[int] | None = None) -> tuple[tuple[Any, ...], dict[int, RowChoice], int]:
    """Coordinate descent over the oversized tables' layouts (module docstring): (the chosen
    state's blocks, the choice per table index, states costed). ``cost_many(states, choices)``:
    the simulated plan cost of each state (ms; inf when infeasible), all of a round's trials at
    once, with the layout choice each state was built from. ``rows``: the blocks made so far
    (shared with the caller), else new."""
    big = oversized(task)
    options = {i: row_choices(task, i, host_size) for i in big}
    rows = RowBlocks(task, block_type) if rows is None else rows
    if math.prod(len(o) for o in options.values()) <= max_combos:
        combos = [dict(zip(big, c)) for c in itertools.product(*(options[i] for i in big))]
        states = [rows.state(whole, c) for c in combos]
        costs = cost_many(states, combos)
        # ties (all infeasible, say) to the combination whose row blocks crowd one device least
        k = min(range(len(combos)), key=lambda j: (costs[j], _crowding(task, states[j]), j))
        return rows.state(whole, combos[k]), combos[k], len(combos)
    choice = {i: RowChoice(task.ngpu, 0) for i in big}
    best = cost_many([rows.state(whole, choice)], [choice])[0]
    evaluated = 1
    for _ in range(rounds):
        trials = [{**choice, i: c} for i in big for c in options[i] if c != choice[i]]
        if not trials:
            break
        costs = cost_many([rows.state(whole, t) for t in trials], trials)
        evaluated += len(trials)
        k = min(range(len(trials)), key=lambda j: (costs[j], j))
        if not costs[k] < best - 1e-9:
            break
        best, choice = costs[k], trials[k]
    return rows.state(whole, choice), choice, evaluated


def _crowding(task: Task, blocks: Sequence[Any]) -> int:
    """The most bytes of pinned blocks on one device."""
    per = [0] * task.ngpu
    for b in blocks:
        if b.device >= 0:
            per[b.device] += task.hbm_bytes(b.table, b.table.rows, b.cols)
    return max(per)


def row_metadata(task: Task, choice: dict[int, RowChoice]) -> dict[str, Any]:
    """Plan metadata of the chosen layouts: TorchRec's sharding type per row-split table (read
    by the export), the choice itself, and where each such table's lookups came from (its own,
    or fitted to its reuse bins: :func:`~shardlab.data.lookups.row_block_lookups`)."""
    return {"torchrec_sharding_types": {task.tables[i].name: c.sharding_type for i, c in choice.items()},
            "row_wise": {task.tables[i].name: {"blocks": c.k, "first_device": c.first,
                                               "sharding_type": c.sharding_type} for i, c in choice.items()},
            **row_block_lookups(task, [task.tables[i] for i in choice])}


@dataclass(frozen=True)
class PinnedRows:
    """A task's oversized tables cut into row blocks pinned to devices, as the RL sharders play
    it: ``episode`` is a task whose tables are the pinned blocks first (block j on device
    ``pins[j]``; ``blocks[j]`` = (its table's index in the original task, row_offset, rows)),
    then every other table in task order; ``witness`` gives every episode table (pins first) a
    device where all fit together, so the feasibility look-ahead stays exact."""

    episode: Task
    pins: tuple[int, ...]
    blocks: tuple[tuple[int, int, int], ...]
    witness: tuple[int, ...]
    metadata: dict[str, Any]

    def plan(self, task: Task, devices: Sequence[int], method: str, seed: int = 0) -> Plan:
        """The plan of ``task`` from a device per episode table (pinned blocks first)."""
        pinned = {i for i, _, _ in self.blocks}
        rest = [t for i, t in enumerate(task.tables) if i not in pinned]
        placements = [Placement(task.tables[i].name, 0, task.tables[i].dim, off, n, d)
                      for (i, off, n), d in zip(self.blocks, devices)]
        placements += [Placement(t.name, 0, t.dim, 0, t.rows, int(d)) for t, d in zip(rest, devices[len(self.blocks):])]
        return Plan(task.name, method, task.ngpu, tuple(placements), seed, metadata=self.metadata)


def _pinned(task: Task, blocks: list[tuple[int, int, int, int]], rest_devices: Sequence[int] | None,
            metadata: dict[str, Any]) -> PinnedRows | None:
    """``blocks`` (table index, row_offset, rows, device) pinned; the other tables' witness is
    ``rest_devices`` or, None, a best-fit-decreasing packing of the room left (None: no room)."""
    pinned = {b[0] for b in blocks}
    rest = [t for i, t in enumerate(task.tables) if i not in pinned]
    if rest_devices is None:
        used = [0.0] * task.ngpu
        for i, _, n, d in blocks:
            used[d] += task.hbm_bytes(task.tables[i], n, task.tables[i].dim)
        if max(used) > task.mem_cap_bytes:
            return None
        rest_devices = pack([task.mem_cap_bytes - u for u in used], [task.table_bytes(t) for t in rest])
        if rest_devices is None:
            return None
    tables = tuple(placed_row_block(task.tables[i], off, n, task.batch_size) for i, off, n, _ in blocks)
    pins = tuple(d for *_, d in blocks)
    return PinnedRows(replace(task, tables=tables + tuple(rest)), pins, tuple((i, off, n) for i, off, n, _ in blocks),
                      pins + tuple(int(d) for d in rest_devices), metadata)


def pinned_layouts(task: Task, host_size: int = C.DEFAULT_HOST_SIZE, max_layouts: int = 16) -> list[PinnedRows]:
    """The row layouts an RL sharder decides between for ``task``'s oversized tables: TorchRec's
    layouts (:func:`row_choices`: every combination when there are at most ``max_layouts``, else
    each table row-wise over the fewest devices, and each over all G), those whose other tables
    still pack; and the layout of the first heuristic plan (``feasibility.WITNESS_SHARDERS``),
    which always completes. No layout at all: the heuristics' one-line InfeasibleError."""
    big = oversized(task)
    options = {i: row_choices(task, i, host_size) for i in big}
    if math.prod(len(o) for o in options.values()) <= max_layouts:
        combos = [dict(zip(big, c)) for c in itertools.product(*(options[i] for i in big))]
    else:
        combos = [{i: options[i][0] for i in big}, {i: RowChoice(task.ngpu, 0) for i in big}]
    out = []
    for combo in combos:
        blocks = [(i, off, n, c.first + j) for i, c in combo.items()
                  for j, (off, n) in enumerate(equal_row_ranges(task.tables[i].rows, c.k))]
        got = _pinned(task, blocks, None, row_metadata(task, combo))
        if got is not None:
            out.append(got)
    plan = heuristic_plan(task, out == [])
    if plan is not None:
        index = {t.name: i for i, t in enumerate(task.tables)}
        blocks = [(index[p.table], p.row_offset, p.rows, p.device) for p in plan.placements if index[p.table] in big]
        whole = {p.table: p.device for p in plan.placements if index[p.table] not in big}
        if all(x.pins != tuple(b[3] for b in blocks) or [b[:3] for b in x.blocks] != [b[:3] for b in blocks]
               for x in out):
            layout = {task.tables[i].name: {"blocks": sum(b[0] == i for b in blocks),
                                            "devices": [b[3] for b in blocks if b[0] == i], "from": plan.method}
                      for i in big}
            meta = {"row_wise": layout, **row_block_lookups(task, [task.tables[i] for i in big])}
            out.append(_pinned(task, blocks, [whole[t.name] for i, t in enumerate(task.tables) if i not in big], meta))
    return out


def row_pattern(rows: RowBlocks, choice: Mapping[int, RowChoice], batch_size: int) -> tuple[np.ndarray, dict]:
    """The all-to-all offset (G,) and the row-wise pattern (``{"dim", "index_counts"}``) of one
    choice of row layouts, at ``batch_size`` samples per step, counted as the model evaluator
    counts a finished plan: a table split over every device (row-wise, k = G) leaves the
    all-to-all (its columns come off every device's dim sum and are reduce-scattered forward,
    all-gathered backward); every row-split table's blocks receive their rows' lookups from
    every rank's batch slice (``index_counts[r][o]`` += round(block pooling x slice rows of r)).
    Batch slices and index counts are :mod:`shardlab.schedule`'s, as the profilers count them."""
    task = rows.task
    g = task.ngpu
    offset = np.zeros(g)
    counts = np.zeros((g, g), dtype=np.int64)
    slices = batch_rows(batch_size, g)
    dim = 0
    for i, c in choice.items():
        t = task.tables[i]
        if c.k == g and g > 1:
            offset += t.dim
            dim += t.dim
        counts += np.array(owner_counts(g, slices, [(b.device, b.table.pooling_factor) for b in rows.blocks(i, c)]))
    return offset, {"dim": int(dim), "index_counts": counts.tolist() if counts.any() else []}


def row_aware_comm(base: Any, rowwise_model: Any, rows: RowBlocks, choice: Mapping[int, RowChoice]) -> WithRowWise:
    """The comm model of search states with ``choice``'s row layouts: ``base`` with the pattern's
    all-to-all offset and the row-wise model's increment (:func:`row_pattern`)."""
    offset, pattern = row_pattern(rows, choice, int(rowwise_model.setting("batch_size")))
    return WithRowWise(base, rowwise_model.increment(rows.task.ngpu, pattern), offset)


def row_start(task: Task, whole: tuple[Any, ...], place_many: Callable[[list[tuple[Any, ...]], list[Any]], list[Any]],
              comm: Any, rowwise_model: Any, block_type: Callable[..., Any], host_size: int = C.DEFAULT_HOST_SIZE,
              only: Sequence[int] | None = None) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
    """A model-driven search's starting state where tables fit no device: the layouts of the
    ``only`` tables chosen by :func:`choose_rows` with each state placed by ``place_many(states,
    comms)`` (placements with ``[1].cost_ms``, or None), costed with ``comm`` plus the row-wise
    collectives of ``rowwise_model`` (None: none charged apart). Returns the state's blocks, the
    plan metadata of the layouts (:func:`row_metadata`) and the comm model of the chosen layouts."""
    rows = RowBlocks(task, block_type)

    def comm_of(choice: dict) -> Any:
        return comm if rowwise_model is None else row_aware_comm(comm, rowwise_model, rows, choice)

    def cost_many(states: list[tuple[Any, ...]], choices: list[dict]) -> list[float]:
        return [float("inf") if got is None else got[1].cost_ms
                for got in place_many(states, [comm_of(c) for c in choices])]

    blocks, choice, _ = choose_rows(task, whole, cost_many, block_type, host_size, rows=rows, only=only)
    return blocks, row_metadata(task, choice), comm_of(choice)
