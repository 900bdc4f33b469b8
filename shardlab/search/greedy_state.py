"""Greedy placement state: memory used and accumulated weight per device, for the heuristics'
one-pass placements (each step O(ngpu) numpy work), and the look-ahead their fallback uses.

The plain pass places each block on the device the heuristic prefers among those where it fits;
on a memory-tight task that can strand a later block. :class:`LookAhead` is the fallback: it
takes, among the fitting devices in the heuristic's preference order, the first that leaves the
remaining blocks packable:

* **Roomy** (O(G) per step). With R bytes left after the block, m the largest block left, K the
  most row blocks of any table left and slack_g = (free_g - m)+ bytes once the block is placed:
  if R < sum(slack) - (K - 1) * max(slack) (or nothing is left), any fitting choices complete. A
  block stuck later would find every device but its siblings' (at most K - 1) with less than m
  bytes free, so each of those would have taken more than its slack: more bytes than remain.
  From then on the preferred device is taken unchecked.
* **Witness** (O(1)). A packing of the remaining blocks is kept: first best-fit decreasing of all
  blocks (:func:`pack`), else the first valid packing the caller offers. Its own device is always
  allowed, and so is a device with room for the block plus what the witness puts there later (the
  witness stays valid with the block moved there).
* **Packing** (O(R log G) each, at most :data:`PACK_TRIES` per step). For a preferred device the
  cheap tests refuse, best-fit decreasing of the remaining blocks; on success it is the new
  witness.

With a witness the fallback never strands a block; without one (no packing known at the start)
it takes the preferred device wherever no test passes, until a packing succeeds. Cost: nothing
while the one pass succeeds; in the fallback O(G log G) per block plus at most
:data:`PACK_TRIES` packings of O(R log G) while tight.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Iterable, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.errors import InfeasibleError
from shardlab.tables import Table, Task

#: Packings (best-fit decreasing) tried per step of the fallback, on the devices preferred before
#: the first one the cheap tests allow; beyond them that one is taken.
PACK_TRIES = 8


class DeviceState:
    """Memory used (bytes, int64 array) and accumulated weight (float64 array) per device
    during a greedy placement; each step is O(ngpu) numpy work, not Python loops."""

    def __init__(self, task: Task):
        self.task = task
        self.mem = np.zeros(task.ngpu, dtype=np.int64)
        self.weight = np.zeros(task.ngpu, dtype=np.float64)
        self._cap = task.mem_cap_bytes

    def fits(self, device: int, table: Table) -> bool:
        """Whether ``table`` fits on ``device`` under the cap."""
        return int(self.mem[device]) + self.task.table_bytes(table) <= self._cap

    def _fit_mask(self, table: Table, need: int | None = None, exclude: Sequence[int] = ()) -> np.ndarray:
        """Boolean mask of the devices where ``table`` (or ``need`` bytes of it) fits, devices in
        ``exclude`` left out; raises :class:`InfeasibleError` naming the table (and how many GB
        short) when there is none."""
        need = self.task.table_bytes(table) if need is None else need
        mask = self.mem <= self._cap - need
        mask[list(exclude)] = False
        if not mask.any():
            free = self._cap - int(np.delete(self.mem, list(exclude)).min(initial=self._cap))
            raise InfeasibleError(
                f"task '{self.task.name}': table '{table.name}' fits no device: it needs "
                f"{need / C.GB:.3f} GB, the emptiest device has {free / C.GB:.3f} GB free "
                f"({(need - free) / C.GB:.3f} GB short)", table.name, (need - free) / C.GB)
        return mask

    def feasible_devices(self, table: Table, need: int | None = None, exclude: Sequence[int] = ()) -> list[int]:
        """Devices where ``table`` (``need`` bytes of it: a row block) fits, not in ``exclude``
        (ascending ids); raises :class:`InfeasibleError` when there is none."""
        return np.flatnonzero(self._fit_mask(table, need, exclude)).tolist()

    def lightest_feasible(self, table: Table, need: int | None = None, exclude: Sequence[int] = ()) -> int:
        """The feasible device (as :meth:`feasible_devices`) with the smallest weight (ties: less
        memory, then the lower id)."""
        mask = self._fit_mask(table, need, exclude)
        w = np.where(mask, self.weight, np.inf)
        tied = mask & (w == w.min())
        m = np.where(tied, self.mem, np.iinfo(np.int64).max)
        return int(np.argmin(m))

    def by_weight(self, table: Table, need: int | None = None, exclude: Sequence[int] = ()) -> list[int]:
        """All feasible devices (as :meth:`feasible_devices`), lightest first in the order of
        :meth:`lightest_feasible` (weight, then memory, then id); O(G log G)."""
        ids = np.flatnonzero(self._fit_mask(table, need, exclude))
        return ids[np.lexsort((ids, self.mem[ids], self.weight[ids]))].tolist()

    def place(self, device: int, table: Table, weight: float = 0.0, need: int | None = None) -> None:
        """Account ``table`` (``need`` bytes of it, default all) and its ``weight`` on ``device``."""
        self.mem[device] += self.task.table_bytes(table) if need is None else need
        self.weight[device] += weight


def pack(free: Sequence[int], sizes: Sequence[int], groups: Sequence[int | None] | None = None,
         taken: Sequence[int] = (), taken_group: int | None = None) -> list[int] | None:
    """Best-fit decreasing: a device for each of ``sizes`` (bytes) given ``free`` bytes per
    device, largest first (ties: list order), each on the fitting device with the least room
    (ties: the lower id); None if one fits nowhere. Blocks of one group (``groups``: a table's
    row blocks; None = alone) go to distinct devices, those of ``taken_group`` also off
    ``taken``. O(R log R + R log G) plus list shifts, for R blocks on G devices."""
    rooms = sorted((int(f), d) for d, f in enumerate(free))
    used: dict[int, set[int]] = {} if taken_group is None else {taken_group: set(taken)}
    out = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        s, g = int(sizes[i]), None if groups is None else groups[i]
        banned = used.setdefault(g, set()) if g is not None else ()
        j = bisect_left(rooms, (s, -1))
        while j < len(rooms) and rooms[j][1] in banned:
            j += 1
        if j == len(rooms):
            return None
        f, d = rooms.pop(j)
        insort(rooms, (f - s, d))
        out[i] = d
        if g is not None:
            used[g].add(d)
    return out


class LookAhead:
    """The fallback's choices (module docstring) for blocks placed in a fixed order: ``sizes``
    (bytes) and ``groups`` (the table of each block; a table's blocks consecutive) on ``ngpu``
    devices of ``cap`` bytes. Call :meth:`choose` once per block, in order."""

    def __init__(self, cap: int, ngpu: int, sizes: Sequence[int], groups: Sequence[int],
                 witnesses: Iterable[Sequence[int]] = ()):
        """``witnesses``: further packings (a device per block) to start from where best-fit
        decreasing of all blocks fails, taken lazily; the first valid one is kept."""
        self.cap, self.sizes, self.groups = int(cap), [int(s) for s in sizes], list(groups)
        n = len(self.sizes)
        count = {g: self.groups.count(g) for g in set(self.groups)}
        self.multi = [g if count[g] > 1 else None for g in self.groups]
        tail = np.array(self.sizes[::-1], dtype=np.float64)
        k_tail = np.array([count[g] for g in self.groups[::-1]], dtype=np.int64)
        self.rest_sum = np.append(np.cumsum(tail)[::-1], 0.0)[1:]                 # (n,) bytes after step t
        self.rest_max = np.append(np.maximum.accumulate(tail)[::-1], 0.0)[1:]     # (n,) largest after t
        self.rest_k = np.append(np.maximum.accumulate(k_tail)[::-1], 1)[1:]       # (n,) most blocks after t
        self.by_size = sorted(range(n), key=lambda k: -self.sizes[k])
        self.device: list[int] = []
        self.relaxed = False
        self.load = np.zeros(ngpu, dtype=np.int64)                               # witness bytes still to come
        self.witness = pack([self.cap] * ngpu, self.sizes, self.multi)
        for other in witnesses if self.witness is None else ():
            if self._valid(other):
                self.witness = list(other)
                break
        if self.witness is not None:
            np.add.at(self.load, self.witness, self.sizes)

    def _valid(self, devices: Sequence[int]) -> bool:
        """Whether ``devices`` (one per block) keeps every device under the cap and each table's
        blocks on distinct devices."""
        if len(devices) != len(self.sizes):
            return False
        load = np.zeros_like(self.load)
        np.add.at(load, list(devices), self.sizes)
        pairs = [(g, d) for g, d in zip(self.multi, devices) if g is not None]
        return bool((load <= self.cap).all()) and len(set(pairs)) == len(pairs)

    def _rest_packing(self, t: int, free: np.ndarray, d: int) -> list[int] | None:
        """Best-fit decreasing of the blocks after step ``t`` once block ``t`` is on ``d``."""
        room = free.copy()
        room[d] -= self.sizes[t]
        rest = [k for k in self.by_size if k > t]
        g = self.multi[t]
        taken = [] if g is None else [x for k, x in enumerate(self.device) if self.multi[k] == g] + [d]
        packing = pack(room, [self.sizes[k] for k in rest], [self.multi[k] for k in rest],
                       taken, g)
        if packing is None:
            return None
        out = [0] * (len(self.sizes) - t - 1)
        for k, x in zip(rest, packing):
            out[k - t - 1] = x
        return out

    def choose(self, mem: np.ndarray, preferred: Sequence[int]) -> int:
        """The device for the next block: the first of ``preferred`` (fitting devices, in the
        heuristic's order) that leaves the rest packable, given ``mem`` (G,) bytes used; the
        first of ``preferred`` when none is known to."""
        t = len(self.device)
        s = self.sizes[t]
        if self.witness is not None:
            self.load[self.witness[t]] -= s
        if self.relaxed or t == len(self.sizes) - 1:
            return self._take(preferred[0])
        free = self.cap - mem.astype(np.int64)
        cand = np.asarray(preferred, dtype=np.int64)
        m = self.rest_max[t]
        slack = np.clip(free - m, 0, None)
        after = slack.sum() - slack[cand] + np.clip(free[cand] - s - m, 0, None)
        ok = self.rest_sum[t] < after - (self.rest_k[t] - 1) * slack.max()
        roomy = ok.copy()
        if self.witness is not None:
            later, k = [], t + 1                     # the witness's devices for this table's later blocks
            while k < len(self.sizes) and self.multi[t] is not None and self.groups[k] == self.groups[t]:
                later.append(self.witness[k])
                k += 1
            ok |= cand == self.witness[t]
            ok |= (free[cand] - s >= self.load[cand]) & ~np.isin(cand, later)
        first = int(np.argmax(ok)) if ok.any() else len(cand)
        for j in range(min(first, PACK_TRIES)):
            packing = self._rest_packing(t, free, int(cand[j]))
            if packing is not None:
                self.witness = self.device + [int(cand[j])] + packing
                self.load[:] = 0
                np.add.at(self.load, packing, self.sizes[t + 1:])
                return self._take(int(cand[j]))
        if first == len(cand):
            return self._take(int(cand[0]))
        self.relaxed = bool(roomy[first])
        return self._take(int(cand[first]))

    def _take(self, d: int) -> int:
        """Record ``d`` as the current block's device and return it."""
        self.device.append(d)
        return d
