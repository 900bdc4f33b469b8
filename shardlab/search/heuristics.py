"""The five baseline heuristics of the seed papers (ALGORITHMS.md section 3).

Greedy: give each table a weight, sort tables by weight (descending; ties keep task order),
put each on the feasible device with the smallest accumulated weight (ties: less memory used,
then the lower device id). Weights: size_greedy = rows x dim; dim_greedy = dim;
lookup_greedy = dim x pooling_factor; size_lookup_greedy = dim x pooling_factor x log10(rows).
Random: each table on a device drawn uniformly among those where it still fits.
All are memory-feasible (or raise :class:`~shardlab.errors.InfeasibleError` naming the table)
and deterministic for a given seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from shardlab.plan import Plan
from shardlab.search.base import DeviceState, register_sharder
from shardlab.tables import Table, Task

WEIGHTS: dict[str, Callable[[Table], float]] = {
    "size_greedy": lambda t: float(t.rows * t.dim),
    "dim_greedy": lambda t: float(t.dim),
    "lookup_greedy": lambda t: t.dim * t.pooling_factor,
    "size_lookup_greedy": lambda t: t.dim * t.pooling_factor * math.log10(t.rows),
}


@dataclass
class GreedySharder:
    """Greedy balance of a per-table weight (``WEIGHTS[name]``) across devices."""

    name: str

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Table-wise plan; the seed is recorded but does not change the result."""
        task.check_feasible()
        weight = WEIGHTS[self.name]
        order = sorted(range(len(task.tables)), key=lambda i: -weight(task.tables[i]))
        state = DeviceState(task)
        devices = [0] * len(task.tables)
        for i in order:
            t = task.tables[i]
            d = state.lightest_feasible(t)
            state.place(d, t, weight(t))
            devices[i] = d
        return Plan.table_wise(task, devices, self.name, seed)


@dataclass
class RandomSharder:
    """Each table, in task order, on a uniformly random device where it fits."""

    name: str = "random"

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Table-wise plan drawn with ``numpy.random.default_rng(seed)``."""
        task.check_feasible()
        rng = np.random.default_rng(seed)
        state = DeviceState(task)
        devices = []
        for t in task.tables:
            choices = state.feasible_devices(t)
            d = int(choices[rng.integers(len(choices))])
            state.place(d, t)
            devices.append(d)
        return Plan.table_wise(task, devices, self.name, seed)


register_sharder("random", RandomSharder)
for _name in WEIGHTS:
    register_sharder(_name, lambda _n=_name: GreedySharder(_n))
