"""A placed state polished by moves under the search's own model and its judges (local search).

The greedy grid places each block once, in order, and never revisits it; the beam re-runs it
for every candidate split. Polishing starts from a placement and improves it in place:

- the *straggler* is the device whose compute plus backward all-to-all ends last (the forward
  all-to-all waits for it, ``shardlab/schedule.py``); each of its movable blocks (not a pinned
  row block) is offered to each of the ``constants.POLISH_TARGETS`` devices that end first
  where it fits in memory (every other device, up to that many GPUs);
- each offer is one candidate plan, scored as the split guard scores a plan
  (``search/split_guard.py``): under each :class:`Scorer` (the search's own model, then each
  judge) its predicted cost, split devices charged the scorer's factor, over the scorer's cost of
  the table-wise plan, and the largest of those ratios is the score (unguarded: one scorer, the
  own model's ms). Only the two devices a move touches are re-costed (summed head rows), and
  every candidate's all-to-all is one batched comm call per scorer (``costmodel/base.py``'s
  :func:`~shardlab.costmodel.base.plan_costs`, or the comm model's closed form ``plan_ms`` where
  it has one, as the analytic topology model does);
- the offer that lowers the score most is made (ties: the lower block index, then the lower
  device), and the straggler of the scorer that binds offers its blocks next, until no offer
  lowers the score by more than ``constants.POLISH_MIN_GAIN_MS`` (ms, relative to the score's
  own ms) or ``max_moves`` moves are made.

So a polished plan is one every judge predicts faster than where it started: what the guard asks
of any plan it takes. **Never worse**: a move is made only where it lowers the score, and the
polished placement is re-costed from scratch at the end; where its own model's cost is then not
lower, the starting placement is returned unchanged.

The column-wise beam's ``"moved"`` costing (``search/column_beam.py``) builds its candidates here
too (:meth:`Polisher.children`): a child that halves block i keeps its parent's placement, block
i leaves its device, and each half goes where the greedy grid's rule would put it (``"after"``:
the device whose predicted compute after adding it is lowest; ``"before"``: the cheapest now;
memory must fit; ties: less memory, then the lower id), re-costing only the devices touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.base import Simulated, plan_costs, simulate_many
from shardlab.search.blocks import Block, ShardCoster, split_block
from shardlab.search.greedy_grid import HeadCoster
from shardlab.search.split_guard import Judge, guarded_costs
from shardlab.search.stages import State, is_split
from shardlab.tables import Task

#: Candidate plans costed per comm call (entries of the (plans, G) arrays): bounds the memory
#: of one step at any G (about 100 MB of float64 arrays at this size).
_CHUNK_ENTRIES = 1 << 21


@dataclass(frozen=True)
class Scorer:
    """One model a polish scores by: its shard ``coster`` and ``comm`` model, the ``factor`` its
    split devices' compute is charged (the judge's split calibration; 1 for none) and ``ref_ms``,
    its cost of the plan the ratios are taken to (the table-wise plan; 1: plain ms)."""

    coster: ShardCoster
    comm: Any
    factor: float = 1.0
    ref_ms: float = 1.0


@dataclass
class Polisher:
    """Polishes placed states (module docstring): at most ``max_moves`` moves each (0: none), each
    scored by ``scorers`` (the first: the search's own model, whose ``coster`` also places the
    ``"moved"`` children); ``rule``: the greedy rule halves are placed by."""

    scorers: Sequence[Scorer]
    max_moves: int = C.POLISH_MAX_MOVES
    rule: str = "after"

    def _arrays(self, task: Task, state: State, scorers: Sequence[Scorer]) -> "_Placement":
        heads = [HeadCoster(sc.coster.model) for sc in scorers]
        rows = [h.rows(sc.coster.embed(state.blocks)) for h, sc in zip(heads, scorers)]
        return _Placement(task, state.blocks, state.devices, rows, heads)

    def children(self, task: Task, parent: State, indices: Sequence[int], moves: int = 0) -> list[State | None]:
        """For each block index of ``indices`` (in ``parent.blocks``), the state that halves it,
        its halves placed from ``parent``'s placement by the own model (module docstring) and
        then polished by at most ``moves`` moves, or None where a half fits no device."""
        if not indices:
            return []
        scorers = self.scorers if moves else self.scorers[:1]
        p = self._arrays(task, parent, scorers)
        made: list[tuple[tuple[Block, ...], _Placement] | None] = []
        for i in indices:
            blocks = split_block(tuple(parent.blocks), i)
            child = p.split_block(i, blocks[i: i + 2], [sc.coster for sc in scorers])
            if not all(child.place(k, self.rule) for k in (i, i + 1)):
                made.append(None)
                continue
            if moves:
                self._run(task, child, moves)
            made.append((blocks, child))
        ok = [m for m in made if m is not None]
        for _, c in ok:
            c.dsum = np.bincount(c.devices, weights=c.dims, minlength=len(c.dsum))
        own = self.scorers[0]
        sims = iter(simulate_many(np.stack([c.ms[0] for _, c in ok]), np.stack([c.dsum for _, c in ok]), own.comm)
                    if ok else [])
        return [None if m is None else State(m[0], m[1].devices.tolist(), next(sims)) for m in made]

    def polish(self, task: Task, state: State) -> tuple[State, int]:
        """``state`` with its blocks moved while that lowers the score, and the number of moves
        made (0: ``state`` itself, unchanged)."""
        if self.max_moves == 0 or task.ngpu < 2 or not state.blocks:
            return state, 0
        p = self._arrays(task, state, self.scorers)
        moves = self._run(task, p, self.max_moves)
        if moves == 0:
            return state, 0
        sim = p.simulate(self.scorers[0].comm)
        if sim.cost_ms >= state.simulated.cost_ms:
            return state, 0
        return State(state.blocks, p.devices.tolist(), sim), moves

    def _run(self, task: Task, p: "_Placement", limit: int) -> int:
        """Moves made on ``p`` in place (module docstring), at most ``limit``."""
        if task.ngpu < 2:
            return 0
        score, binding = self._score(p, p.ms_of, p.dsum[None], p.split_dev[None])
        moves = 0
        while moves < limit:
            got = self._best_move(task, p, int(binding[0]))
            if got is None or got[2] >= score[0] - C.POLISH_MIN_GAIN_MS / self.scorers[0].ref_ms:
                break
            p.move(got[0], got[1])
            score, binding = np.array([got[2]]), np.array([got[3]])
            moves += 1
        return moves

    def _score(self, p: "_Placement", ms_of: Any, dsum: np.ndarray, split_dev: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """(m,) scores of m candidate plans and (m,) the scorer binding each: ``ms_of(j)`` the
        (m, G, 2) compute ms under scorer j, ``dsum`` (m, G) dim sums, ``split_dev`` (m, G)
        whether a device holds a column split."""
        ratios = []
        for j, sc in enumerate(self.scorers):
            ms = ms_of(j)
            if sc.factor != 1.0:
                ms = np.where(split_dev[..., None], ms * sc.factor, ms)
            fast = getattr(sc.comm, "plan_ms", None)        # the comm model's own closed form, if it has one
            ratios.append((fast(ms, dsum) if fast else plan_costs(ms, dsum, sc.comm)) / sc.ref_ms)
        r = np.stack(ratios)
        return r.max(axis=0), r.argmax(axis=0)

    def _best_move(self, task: Task, p: "_Placement", binding: int) -> tuple[int, int, float, int] | None:
        """(block, device, score, binding scorer) of the best move off the binding scorer's
        straggler, or None where none fits."""
        sc = self.scorers[binding]
        ms = p.ms[binding]
        if sc.factor != 1.0:
            ms = np.where(p.split_dev[:, None], ms * sc.factor, ms)
        ready = ms.sum(axis=1) + np.asarray(sc.comm.predict(p.dsum[None], None), dtype=float)[0, :, 1]
        s = int(np.argmax(ready))
        ks = np.flatnonzero((p.devices == s) & p.movable)
        ready[s] = np.inf
        ts = np.sort(np.argsort(ready, kind="stable")[: min(task.ngpu - 1, C.POLISH_TARGETS)])
        fits = p.mem[ts][None, :] + p.need[ks][:, None] <= task.mem_cap_bytes           # (K, T)
        kk, tt = np.nonzero(fits)
        if not len(kk):
            return None
        left, gained = [], []
        for j, h in enumerate(p.heads):
            lj = h.predict(p.sums[j][s] - p.rows[j][ks], np.full(len(ks), p.counts[s] - 1))   # (K, 2)
            lj[p.counts[s] - 1 == 0] = 0.0
            left.append(lj)
            gained.append(h.predict(p.sums[j][ts[tt]] + p.rows[j][ks[kk]], p.counts[ts[tt]] + 1))   # (M, 2)
        blk, dst = ks[kk], ts[tt]
        score, bind = np.empty(len(kk)), np.empty(len(kk), dtype=np.int64)
        step = max(1, _CHUNK_ENTRIES // task.ngpu)
        for lo in range(0, len(kk), step):
            sl = slice(lo, lo + step)
            m = len(score[sl])
            at = np.arange(m)

            def ms_of(j: int, sl: slice = sl, m: int = m, at: np.ndarray = at) -> np.ndarray:
                out = np.repeat(p.ms[j][None], m, axis=0)
                out[:, s] = left[j][kk[sl]]
                out[at, dst[sl]] = gained[j][sl]
                return out

            dsum = np.repeat(p.dsum[None], m, axis=0)
            dsum[:, s] -= p.dims[blk[sl]]
            dsum[at, dst[sl]] += p.dims[blk[sl]]
            split = np.repeat(p.split_count[None], m, axis=0)
            split[:, s] -= p.split[blk[sl]]
            split[at, dst[sl]] += p.split[blk[sl]]
            score[sl], bind[sl] = self._score(p, ms_of, dsum, split > 0)
        j = int(np.argmin(score))                     # the first minimum: lower block, then device
        return int(blk[j]), int(dst[j]), float(score[j]), int(bind[j])


def judge_scorers(task: Task, judges: Sequence[Judge], coster: ShardCoster, comm: Any, table_wise: State
                  ) -> list[Scorer] | None:
    """What a guarded search's polish scores by: each of the split guard's ``judges`` (the own
    one with the search's ``coster`` and ``comm``), its factor, over its guarded cost of the
    ``table_wise`` plan (``search/split_guard.py``); None where a judge's compute model is not
    incremental (such a guard cannot be followed move by move: nothing is polished)."""
    out = []
    for j in judges:
        jc = coster if j.own else ShardCoster(j.bundle.compute)
        if not jc.incremental:
            return None
        ref = float(guarded_costs(j, task, [table_wise])[0])
        out.append(Scorer(jc, comm if j.own else j.bundle.comm_for(task.ngpu)[0], j.factor, max(ref, 1e-12)))
    return out


def polisher_for(task: Task, coster: ShardCoster, comm: Any, judges: Sequence[Judge] | None, table_wise: State | None,
                 max_moves: int, rule: str = "after") -> Polisher:
    """The search's polisher: scored by the own model alone, or, with the split guard's ``judges``
    and a ``table_wise`` plan, as the guard scores (:func:`judge_scorers`; a judge that cannot be
    followed move by move turns polishing off); at most ``max_moves`` moves, halves by ``rule``."""
    own = [Scorer(coster, comm)]
    scorers = own if not (judges and table_wise is not None and max_moves) else \
        judge_scorers(task, judges, coster, comm, table_wise)
    return Polisher(scorers or own, max_moves if scorers else 0, rule)


def polish_cheapest(task: Task, states: Sequence[State], polisher: Polisher, k: int) -> list[State]:
    """The ``k`` cheapest of ``states`` by predicted cost (ties: the order given) and the first
    (the table-wise plan), polished: those a move improved, for the chooser to weigh beside the rest."""
    order = sorted(range(len(states)), key=lambda i: (states[i].simulated.cost_ms, i))[:k]
    out = []
    for i in sorted(set(order) | ({0} if states else set())):
        got, moves = polisher.polish(task, states[i])
        if moves:
            out.append(got)
    return out


def _bytes(task: Task, b: Block) -> int:
    """HBM bytes of block ``b`` on a device of ``task``."""
    return task.hbm_bytes(b.table, b.table.rows, b.cols)


class _Placement:
    """A placement being polished: per block its bytes, dims, device and whether it is a column
    split; per device (G of them) its block count, bytes, dim sum and split count; and per model
    (one per scorer) each block's head row (n, h), each device's summed rows (G, h) and predicted
    fw/bw ms (G, 2), each device's sums kept in block order."""

    def __init__(self, task: Task, blocks: Sequence[Block], devices: Sequence[int], rows: list[np.ndarray],
                 heads: list[HeadCoster]):
        self.heads, self.rows, self.task = heads, rows, task
        self.need = np.array([_bytes(task, b) for b in blocks], dtype=np.int64)
        self.dims = np.array([b.out_dim for b in blocks], dtype=float)
        self.movable = np.array([b.device < 0 for b in blocks])
        self.split = np.array([is_split(b) for b in blocks], dtype=np.int64)
        self.devices = np.array(devices, dtype=np.int64)
        g = task.ngpu
        self.counts = np.bincount(self.devices, minlength=g).astype(float)
        self.mem = np.bincount(self.devices, weights=self.need, minlength=g).astype(np.int64)
        self.dsum = np.bincount(self.devices, weights=self.dims, minlength=g)
        self.split_count = np.bincount(self.devices, weights=self.split, minlength=g).astype(np.int64)
        self.sums = [np.zeros((g, r.shape[1])) for r in rows]
        self.ms = [np.zeros((g, 2)) for _ in rows]
        self._recost(np.arange(g))

    @property
    def split_dev(self) -> np.ndarray:
        """(G,) whether each device holds a column split."""
        return self.split_count > 0

    def ms_of(self, j: int) -> np.ndarray:
        """(1, G, 2) model j's fw/bw ms per device."""
        return self.ms[j][None]

    def _recost(self, devices: np.ndarray) -> None:
        """Sum the rows of each of ``devices`` again (block order) and predict its ms, per model."""
        empty = devices[self.counts[devices] == 0]
        for rows, sums, ms, head in zip(self.rows, self.sums, self.ms, self.heads):
            for d in devices:
                sums[d] = rows[self.devices == d].sum(axis=0)     # unplaced blocks (-1) count nowhere
            ms[devices] = head.predict(sums[devices], self.counts[devices])
            ms[empty] = 0.0

    def move(self, k: int, t: int) -> None:
        """Block ``k`` to device ``t``; both devices re-costed."""
        s = int(self.devices[k])
        self.devices[k] = t
        for d, sign in ((s, -1), (t, 1)):
            self.counts[d] += sign
            self.mem[d] += sign * self.need[k]
            self.dsum[d] += sign * self.dims[k]
            self.split_count[d] += sign * self.split[k]
        self._recost(np.array([s, t]))

    def split_block(self, i: int, halves: Sequence[Block], costers: Sequence[ShardCoster]) -> "_Placement":
        """A copy with block ``i`` replaced by ``halves`` (at i and i + 1), not yet placed
        (device -1): block i's device re-costed without it."""
        c = object.__new__(_Placement)
        c.heads, c.task = self.heads, self.task
        c.rows = [np.concatenate([r[:i], h.rows(co.embed(halves)), r[i + 1:]])
                  for r, h, co in zip(self.rows, self.heads, costers)]
        c.need = np.concatenate([self.need[:i], [_bytes(self.task, h) for h in halves], self.need[i + 1:]])
        c.dims = np.concatenate([self.dims[:i], [h.out_dim for h in halves], self.dims[i + 1:]])
        c.movable = np.concatenate([self.movable[:i], [True, True], self.movable[i + 1:]])
        c.split = np.concatenate([self.split[:i], [1, 1], self.split[i + 1:]])
        c.devices = np.concatenate([self.devices[:i], [-1, -1], self.devices[i + 1:]])
        c.counts, c.mem, c.dsum, c.split_count = (a.copy() for a in (self.counts, self.mem, self.dsum, self.split_count))
        c.sums, c.ms = [a.copy() for a in self.sums], [a.copy() for a in self.ms]
        d = int(self.devices[i])
        c.counts[d] -= 1
        c.mem[d] -= self.need[i]
        c.dsum[d] -= self.dims[i]
        c.split_count[d] -= self.split[i]
        c._recost(np.array([d]))
        return c

    def place(self, k: int, rule: str) -> bool:
        """Unplaced block ``k`` onto the device the greedy ``rule`` picks under the first model
        (module docstring); False where it fits nowhere."""
        fits = self.mem + self.need[k] <= self.task.mem_cap_bytes
        if not fits.any():
            return False
        if rule == "after":
            score = np.round(self.heads[0].predict(self.sums[0] + self.rows[0][k], self.counts + 1).sum(axis=1), 9)
        else:
            score = np.round(self.ms[0].sum(axis=1), 9)
        score[~fits] = np.inf
        tied = np.where(score == score.min(), self.mem, np.iinfo(np.int64).max)
        d = int(np.argmin(tied))
        self.devices[k] = d
        self.counts[d] += 1
        self.mem[d] += self.need[k]
        self.dsum[d] += self.dims[k]
        self.split_count[d] += self.split[k]
        self._recost(np.array([d]))
        return True

    def simulate(self, comm: Any) -> Simulated:
        """The placement's simulation under the first model, every device costed from scratch."""
        self.dsum = np.bincount(self.devices, weights=self.dims, minlength=len(self.dsum))
        self._recost(np.arange(len(self.dsum)))
        return simulate_many(self.ms[0][None], self.dsum[None], comm)[0]
