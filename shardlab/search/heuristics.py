"""The five baseline heuristics of the seed papers (docs/methods.md).

Greedy: give each table a weight, sort tables by weight (descending; ties keep task order),
put each on the feasible device with the smallest accumulated weight (ties: less memory used,
then the lower device id). Weights: size_greedy = rows x dim; dim_greedy = dim;
lookup_greedy = dim x pooling_factor; size_lookup_greedy = dim x pooling_factor x log10(rows).
Random: each table on a device drawn uniformly among those where it still fits.
A table that fits no device whole is split into the fewest equal row blocks that fit
(``search/row_split.py``): each block carries the table's weight over the number of
blocks, the blocks follow one another in the order, and no two go to the same device -- k blocks
on devices 0..k-1 where they fit there (TorchRec's row-wise layout, so the plan exports), else on
the lightest devices that fit (then the plan may not export to TorchRec).
Memory-tight tasks: this one pass can strand a later block (it fits no device although a plan
exists). Only then is the placement redone with a look-ahead
(:class:`~shardlab.search.greedy_state.LookAhead`): blocks in the same order, each on the first
device in the heuristic's usual preference (greedy: lightest first, ties as above, a row block's
device of the 0..k-1 layout first where that layout fits; random: the seeded draw, then the
fitting devices after it by id, wrapping round) that leaves the remaining blocks packable: a
cheap sufficient "roomy" test (O(G)), a kept witness packing, or a best-fit-decreasing packing
of the rest. The first witness is the best-fit-decreasing packing of all blocks, else the one
pass of another greedy that succeeds, else another greedy's look-ahead that succeeds. Wherever
the one pass succeeds its plan is the answer, unchanged; where the look-ahead fails too, the one
pass's error is raised.
All are memory-feasible (or raise :class:`~shardlab.errors.InfeasibleError` naming the table)
and deterministic for a given seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from shardlab.errors import InfeasibleError
from shardlab.plan import Placement, Plan
from shardlab.search.greedy_state import DeviceState, LookAhead
from shardlab.search.registry import register_sharder
from shardlab.search.row_split import row_split
from shardlab.tables import Table, Task

WEIGHTS: dict[str, Callable[[Table], float]] = {
    "size_greedy": lambda t: float(t.rows * t.dim),
    "dim_greedy": lambda t: float(t.dim),
    "lookup_greedy": lambda t: t.dim * t.pooling_factor,
    "size_lookup_greedy": lambda t: t.dim * t.pooling_factor * math.log10(t.rows),
}


def _blocks(task: Task) -> list[list[tuple[int, int, int]]]:
    """Per table: its row ranges with their bytes, (row_offset, rows, bytes)."""
    return [[(off, n, task.hbm_bytes(t, n, t.dim) if len(r) > 1 else task.table_bytes(t)) for off, n in r]
            for t, r in zip(task.tables, row_split(task))]


def _plan(task: Task, homes: list[list[tuple[int, int, int]]], method: str, seed: int) -> Plan:
    """The plan of every table's (row_offset, rows, device) blocks."""
    return Plan(task.name, method, task.ngpu, tuple(Placement(t.name, 0, t.dim, off, n, d)
                                                   for t, blocks in zip(task.tables, homes) for off, n, d in blocks),
                seed)


def _first_devices(state: DeviceState, blocks: list[tuple[int, int, int]]) -> list[int]:
    """Devices 0..k-1 for a table's k > 1 row blocks when each fits there (TorchRec's row-wise
    layout); empty for a whole table or when they do not fit."""
    if len(blocks) < 2:
        return []
    ok = all(int(state.mem[d]) + need <= state.task.mem_cap_bytes for d, (_, _, need) in enumerate(blocks))
    return list(range(len(blocks))) if ok else []


def _first_then(first: list[int], k: int, devices: list[int]) -> list[int]:
    """``devices`` with block ``k``'s own device of the row-wise layout ``first`` moved to the
    front where it is among them."""
    if not first or first[k] not in devices:
        return devices
    return [first[k]] + [d for d in devices if d != first[k]]


Homes = list[list[tuple[int, int, int]]]


def _guard(task: Task, blocks: Homes, order: Sequence[int], witnesses: Iterable[list[int]] = ()) -> LookAhead:
    """A :class:`LookAhead` over the blocks of the tables in ``order``."""
    steps = [(i, need) for i in order for _, _, need in blocks[i]]
    return LookAhead(task.mem_cap_bytes, task.ngpu, [n for _, n in steps], [i for i, _ in steps], witnesses)


def _witnesses(task: Task, blocks: Homes, order: Sequence[int], skip: str) -> Iterator[list[int]]:
    """Packings (a device per block of the tables in ``order``) from the other greedies than
    ``skip``: their one passes that succeed, then their look-aheads (no witness) that succeed."""
    for lookahead in (False, True):
        for name in WEIGHTS:
            if name != skip:
                other = GreedySharder(name)
                try:
                    homes = other.place(task, blocks, _guard(task, blocks, other.order(task)) if lookahead else None)
                except InfeasibleError:
                    continue
                yield [d for i in order for _, _, d in homes[i]]


def _with_fallback(task: Task, blocks: Homes, order: Sequence[int], place: Callable[[LookAhead | None], Homes],
                   skip: str) -> Homes:
    """``place(None)`` (the one pass); where it raises InfeasibleError, ``place`` again with a
    :class:`LookAhead` over the blocks of the tables in ``order`` (its witness: best-fit
    decreasing, else :func:`_witnesses`); where that fails too, the first error (module
    docstring)."""
    try:
        return place(None)
    except InfeasibleError as plain:
        try:
            return place(_guard(task, blocks, order, _witnesses(task, blocks, order, skip)))
        except InfeasibleError:
            raise plain from None


@dataclass
class GreedySharder:
    """Greedy balance of a per-table weight (``WEIGHTS[name]``) across devices; on a tight task
    where that strands a block, the same with a look-ahead (module docstring)."""

    name: str

    def order(self, task: Task) -> list[int]:
        """Table indices by descending weight (ties: task order)."""
        weight = WEIGHTS[self.name]
        return sorted(range(len(task.tables)), key=lambda i: -weight(task.tables[i]))

    def place(self, task: Task, blocks: Homes, guard: LookAhead | None = None) -> Homes:
        """Each table's (row_offset, rows, device) blocks: the one pass, or with ``guard`` the
        look-ahead's; InfeasibleError where a block fits no device."""
        weight = WEIGHTS[self.name]
        state = DeviceState(task)
        homes: Homes = [[] for _ in task.tables]
        for i in self.order(task):
            t = task.tables[i]
            share = weight(t) / len(blocks[i])
            first = _first_devices(state, blocks[i])
            for k, (off, n, need) in enumerate(blocks[i]):
                exclude = [h[2] for h in homes[i]]
                if guard is None:
                    d = first[k] if first else state.lightest_feasible(t, need, exclude)
                else:
                    d = guard.choose(state.mem, _first_then(first, k, state.by_weight(t, need, exclude)))
                state.place(d, t, share, need)
                homes[i].append((off, n, d))
        return homes

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Table-wise plan (row blocks for tables that fit no device); the seed is recorded but
        does not change the result."""
        blocks = _blocks(task)
        homes = _with_fallback(task, blocks, self.order(task), lambda g: self.place(task, blocks, g), self.name)
        return _plan(task, homes, self.name, seed)


@dataclass
class RandomSharder:
    """Each table, in task order, on a uniformly random device where it fits (each row block of
    an oversized table on its own such device); on a tight task where that strands a block, the
    same draws with a look-ahead (module docstring)."""

    name: str = "random"

    def place(self, task: Task, blocks: Homes, seed: int, guard: LookAhead | None = None) -> Homes:
        """Each table's (row_offset, rows, device) blocks drawn with
        ``numpy.random.default_rng(seed)``: the one pass, or with ``guard`` the look-ahead's."""
        rng = np.random.default_rng(seed)
        state = DeviceState(task)
        homes: Homes = [[] for _ in task.tables]
        for i, t in enumerate(task.tables):
            first = _first_devices(state, blocks[i])
            for k, (off, n, need) in enumerate(blocks[i]):
                exclude = [h[2] for h in homes[i]]
                if first and first[k] not in exclude:
                    d = first[k] if guard is None else guard.choose(
                        state.mem, _first_then(first, k, state.feasible_devices(t, need, exclude)))
                else:
                    choices = state.feasible_devices(t, need, exclude)
                    j = int(rng.integers(len(choices)))
                    d = choices[j] if guard is None else guard.choose(state.mem, choices[j:] + choices[:j])
                state.place(d, t, 0.0, need)
                homes[i].append((off, n, d))
        return homes

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Plan drawn with ``numpy.random.default_rng(seed)`` (the look-ahead draws afresh from
        the same seed)."""
        blocks = _blocks(task)
        homes = _with_fallback(task, blocks, range(len(task.tables)), lambda g: self.place(task, blocks, seed, g),
                               self.name)
        return _plan(task, homes, self.name, seed)


register_sharder("random", RandomSharder)
for _name in WEIGHTS:
    register_sharder(_name, lambda _n=_name: GreedySharder(_n))
