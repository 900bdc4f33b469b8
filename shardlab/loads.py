"""Per-device loads known without any measurement: memory, dim sum and lookups.

These are plain counts from the task and the plan -- no timing, no model. Costs (ms) come
from measurement or from cost models, never from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardlab import constants as C
from shardlab.plan import Plan
from shardlab.tables import Task


@dataclass(frozen=True)
class DeviceLoad:
    """What one device holds under a plan.

    ``mem_gb``: weights + optimizer state (GB = 2**30 bytes); ``dim_sum``: sum of the
    columns of its blocks (the width of what it sends in the forward all-to-all);
    ``lookups``: embedding values gathered per batch, sum of batch x pooling_factor x cols
    (a row-range block counts its share of rows, i.e. assumes uniform access);
    ``tables``: names of the tables with a block on it.
    """

    device: int
    mem_gb: float
    dim_sum: int
    lookups: float
    tables: tuple[str, ...]


def device_loads(task: Task, plan: Plan) -> list[DeviceLoad]:
    """One :class:`DeviceLoad` per device (length ``plan.ngpu``)."""
    mem = [0] * plan.ngpu
    dims = [0] * plan.ngpu
    lookups = [0.0] * plan.ngpu
    names: list[list[str]] = [[] for _ in range(plan.ngpu)]
    for p in plan.placements:
        t = task.table(p.table)
        mem[p.device] += task.hbm_bytes(t, p.rows, p.cols)
        dims[p.device] += p.cols
        lookups[p.device] += task.batch_size * t.pooling_factor * p.cols * (p.rows / t.rows)
        names[p.device].append(p.table)
    return [DeviceLoad(d, mem[d] / C.GB, dims[d], lookups[d], tuple(names[d]))
            for d in range(plan.ngpu)]


def imbalance(values: list[float]) -> float:
    """max / mean of ``values`` (1.0 = perfectly balanced; 0 when all are zero)."""
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else 0.0
