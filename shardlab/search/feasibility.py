"""RL placement episodes that cannot paint themselves into a corner.

The seeds' environments mask, at every step, the devices where the current table does not fit.
That alone can strand a table: on a memory-tight task an episode may fill devices so that a
later table fits nowhere, where a heuristic found a plan. :class:`FeasibleMask` adds a look-ahead
that keeps every episode completable:

* **Witness.** Before the first step it takes a packing of all tables from the heuristics
  (``size_greedy``, ``dim_greedy``, ``lookup_greedy``, ``size_lookup_greedy``: the first that
  finds a plan; none = the task's one-line infeasibility error, naming the table and the GB
  short). Each episode keeps a witness: a device for every table still to place that fits
  together with what is already placed. The witness's device for the current table is always
  allowed, so an episode never gets stuck.
* **Other devices** are allowed when placing the table there leaves the rest packable: either
  *roomy* -- the remaining tables' total is below the sum over devices of (free bytes - largest
  remaining table)+, in which case any sequence of fitting choices completes (a table stuck with
  every device fuller than that bound would mean more bytes placed than remain), and the episode
  needs no more look-ahead -- or the device has room for the table plus what the witness puts
  there later (the witness stays valid: its own device for the table only gains room) -- or a
  best-fit-decreasing packing of the rest succeeds, which becomes the witness if the policy takes
  that device.

Cost: the roomy test is O(G) per episode and step; packings run only for devices of episodes that
are tight (memory-bound tasks), each O(R log R + R G) for R tables left.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from shardlab.errors import InfeasibleError
from shardlab.plan import Plan
from shardlab.search.greedy_state import pack
from shardlab.search.heuristics import GreedySharder
from shardlab.tables import Task

#: Heuristics whose plans seed the witness, in the order tried.
WITNESS_SHARDERS = ("size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")


def heuristic_plan(task: Task, required: bool = True) -> Plan | None:
    """The plan of the first heuristic of :data:`WITNESS_SHARDERS` that finds one; when none
    does, the first one's :class:`InfeasibleError` (table and GB short), or None where not
    ``required``."""
    first: InfeasibleError | None = None
    for name in WITNESS_SHARDERS:
        try:
            return GreedySharder(name).shard(task)
        except InfeasibleError as e:
            first = first or e
    if required:
        assert first is not None
        raise first
    return None


def witness_devices(task: Task, order: Sequence[int]) -> np.ndarray:
    """(T,) a device for each step's table (``order[t]`` is its task index) from
    :func:`heuristic_plan` (its one-line error when no heuristic finds a plan)."""
    device = {p.table: p.device for p in heuristic_plan(task).placements}
    return np.array([device[task.tables[i].name] for i in order], dtype=np.int64)


class FeasibleMask:
    """Allowed devices at every step of ``n`` episodes placing ``task``'s tables in ``order``
    (module docstring). Call :meth:`allowed` then :meth:`chose` once per step, in order."""

    def __init__(self, task: Task, order: Sequence[int], n: int, witness: Sequence[int] | None = None):
        """``witness``: a device for every table of ``task`` (task order) where they all fit
        together; default: the heuristics' (:func:`witness_devices`)."""
        self.sizes = np.array([task.table_bytes(task.tables[i]) for i in order], dtype=np.float64)   # (T,)
        self.cap = float(task.mem_cap_bytes)
        tail = self.sizes[::-1]
        self.rest_sum = np.append(np.cumsum(tail)[::-1], 0.0)                       # (T+1,) bytes from step t on
        self.rest_max = np.append(np.maximum.accumulate(tail)[::-1], 0.0)            # (T+1,)
        first = witness_devices(task, order) if witness is None else np.array([witness[i] for i in order])
        self.witness = np.tile(first, (n, 1))                                         # (n, T)
        self.relaxed = np.zeros(n, dtype=bool)
        self._roomy = np.zeros((n, task.ngpu), dtype=bool)
        self._packings: dict[tuple[int, int], list[int]] = {}

    def allowed(self, t: int, mem: np.ndarray) -> np.ndarray:
        """(n, G) True where step ``t``'s table may go, given ``mem`` (n, G) bytes used."""
        s, rest_sum, m = self.sizes[t], self.rest_sum[t + 1], self.rest_max[t + 1]
        free = self.cap - mem                                                         # (n, G)
        fits = free >= s
        slack = np.clip(free - m, 0.0, None)
        after = slack.sum(axis=1, keepdims=True) - slack + np.clip(free - s - m, 0.0, None)
        self._roomy = fits & ((rest_sum < after) | (rest_sum == 0.0))
        ok = fits & (self._roomy | self.relaxed[:, None])
        tight = np.flatnonzero(~self.relaxed)
        ok[tight, self.witness[tight, t]] = True          # a valid witness's device always fits
        if len(tight) and t + 1 < len(self.sizes):         # d keeps the witness of the rest valid when
            rest = self.witness[tight, t + 1:]             # it holds this table and the rest's share on d
            flat = (np.arange(len(tight))[:, None] * mem.shape[1] + rest).ravel()
            load = np.bincount(flat, weights=np.tile(self.sizes[t + 1:], len(tight)),
                               minlength=len(tight) * mem.shape[1]).reshape(len(tight), -1)
            ok[tight] |= fits[tight] & (free[tight] - s >= load)
        self._packings = {}
        for b, d in zip(*np.nonzero(fits & ~ok)):
            rest_free = free[b].copy()
            rest_free[d] -= s
            packing = pack(rest_free, self.sizes[t + 1:])
            if packing is not None:
                ok[b, d] = True
                self._packings[(int(b), int(d))] = packing
        return ok

    def chose(self, t: int, actions: np.ndarray) -> None:
        """Record the devices (n,) taken at step ``t`` and keep every episode's witness valid."""
        for b, d in enumerate(actions.tolist()):
            if self.relaxed[b]:
                continue
            if self._roomy[b, d]:
                self.relaxed[b] = True
            elif (b, d) in self._packings:
                self.witness[b, t + 1:] = self._packings[(b, d)]
