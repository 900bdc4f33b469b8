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
All are memory-feasible (or raise :class:`~shardlab.errors.InfeasibleError` naming the table)
and deterministic for a given seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from shardlab.plan import Placement, Plan
from shardlab.search.greedy_state import DeviceState
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
    return [[(off, n, task.block_bytes(n, t.dim) if len(r) > 1 else task.table_bytes(t)) for off, n in r]
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


@dataclass
class GreedySharder:
    """Greedy balance of a per-table weight (``WEIGHTS[name]``) across devices."""

    name: str

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Table-wise plan (row blocks for tables that fit no device); the seed is recorded but
        does not change the result."""
        blocks = _blocks(task)
        weight = WEIGHTS[self.name]
        order = sorted(range(len(task.tables)), key=lambda i: -weight(task.tables[i]))
        state = DeviceState(task)
        homes: list[list[tuple[int, int, int]]] = [[] for _ in task.tables]
        for i in order:
            t = task.tables[i]
            share = weight(t) / len(blocks[i])
            first = _first_devices(state, blocks[i])
            for k, (off, n, need) in enumerate(blocks[i]):
                d = first[k] if first else state.lightest_feasible(t, need, [h[2] for h in homes[i]])
                state.place(d, t, share, need)
                homes[i].append((off, n, d))
        return _plan(task, homes, self.name, seed)


@dataclass
class RandomSharder:
    """Each table, in task order, on a uniformly random device where it fits (each row block of
    an oversized table on its own such device)."""

    name: str = "random"

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Plan drawn with ``numpy.random.default_rng(seed)``."""
        blocks = _blocks(task)
        rng = np.random.default_rng(seed)
        state = DeviceState(task)
        homes: list[list[tuple[int, int, int]]] = [[] for _ in task.tables]
        for i, t in enumerate(task.tables):
            first = _first_devices(state, blocks[i])
            for k, (off, n, need) in enumerate(blocks[i]):
                if first:
                    d = first[k]
                else:
                    choices = state.feasible_devices(t, need, [h[2] for h in homes[i]])
                    d = int(choices[rng.integers(len(choices))])
                state.place(d, t, 0.0, need)
                homes[i].append((off, n, d))
        return _plan(task, homes, self.name, seed)


register_sharder("random", RandomSharder)
for _name in WEIGHTS:
    register_sharder(_name, lambda _n=_name: GreedySharder(_n))
