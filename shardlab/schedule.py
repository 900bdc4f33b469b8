"""The plan cost model shared by measured and predicted evaluation (docs/methods.md).

One training iteration of a plan over G devices, in NeuroShard's order:

1. every device runs its fused embedding op (forward + backward compute, independent across
   devices);
2. the backward all-to-all (no delays: it is timed on its own);
3. device g is *ready* at compute_g + bw_comm_g; its **forward delay** is ready_g - min ready,
   the time it starts the forward all-to-all after the first device;
4. the forward all-to-all with those delays, so a device that is early waits for the
   stragglers inside its forward comm;
5. plan cost = max over devices of compute + fw comm + bw comm.

The **lower bound** of a task is a bound under the evaluator that reports it (docs/measurement.md,
"The lower bound"). Both kinds rest on plan cost = max over devices >= their mean:

- measured (:func:`lower_bound_ms`): all tables in one fused op, timed, / G plus the cheapest
  rank's forward + backward all-to-all of perfectly balanced dim sums (no delays). A bound only
  as far as fused costs are subadditive and balanced comm is cheapest, which measurements can
  contradict (on CPU a plan can measure slightly below it);
- predicted (:func:`floor_bound_ms`): from a cost model's floors on the compute summed over
  the devices that hold blocks in ANY plan and on those devices' mean comm, each proven for that
  model (:func:`shardlab.evaluate.model.model_bound_ms`); a model that has no such floors (the
  neural ones) gives no bound.

The measured evaluator (:mod:`shardlab.evaluate.measured`) and the cost-model simulation
(:func:`shardlab.costmodel.base.simulate_many`) both call :func:`forward_delays`, and the
bounds are composed here; nothing else computes either. How a step's batch is split over the ranks
(:func:`batch_rows`) and the index traffic of a row-split table (:func:`owner_counts`) live here
too, for the profilers, the evaluators and the search alike. Plain numpy, no timing, no model.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from shardlab.tables import Task


def forward_delays(ready_ms: np.ndarray) -> np.ndarray:
    """Forward start delays (ms) from each device's ready time (compute + backward comm, ms).

    ``ready_ms``: shape (..., G); returns the same shape, ``ready - min over the last axis``
    (so the earliest device has delay 0 and every delay is >= 0)."""
    ready = np.asarray(ready_ms, dtype=float)
    return ready - ready.min(axis=-1, keepdims=True)


def balanced_dims(task: Task) -> list[int]:
    """The task's total output width (:attr:`~shardlab.tables.Table.out_dim`, rounded down)
    spread as evenly as integers allow over its G devices (the communication term of the lower
    bound); length G."""
    total, g = int(sum(t.out_dim for t in task.tables)), task.ngpu
    return [total // g + (1 if i < total % g else 0) for i in range(g)]


def lower_bound_ms(fused_all_ms: float, ngpu: int, comm_ms: np.ndarray | Sequence[Sequence[float]] | None) -> float:
    """The measured lower bound (ms): ``fused_all_ms`` (forward + backward of all tables in one
    fused op, measured) / ``ngpu`` plus the cheapest rank's forward + backward all-to-all of the
    balanced dim sums, ``comm_ms`` of shape (G, 2) (None or G = 1: no communication). Its premises
    (subadditive fused costs, balanced comm cheapest) are the hardware's, not proven (module
    docstring); cost models use :func:`floor_bound_ms`."""
    comm = 0.0
    if comm_ms is not None and ngpu > 1:
        c = np.asarray(comm_ms, dtype=float).reshape(ngpu, 2)
        comm = float((c[:, 0] + c[:, 1]).min())
    return float(fused_all_ms) / ngpu + comm


def floor_bound_ms(op_ms: float, rest_ms: float, ngpu: int, comm_ms: float) -> float:
    """A predicted lower bound (ms) from a cost model's floors, valid for any plan whose n >= 1
    devices holding blocks have forward + backward compute summing to >= n x ``op_ms`` +
    ``rest_ms`` and forward + backward comm (waiting included) averaging >= ``comm_ms`` (0 for
    G = 1): ``op_ms + rest_ms / ngpu + comm_ms``. Plan cost = max over devices of compute + fw
    comm + bw comm >= the mean over those n devices >= op_ms + rest_ms / n + comm_ms, and n <= G."""
    return float(op_ms) + float(rest_ms) / ngpu + (float(comm_ms) if ngpu > 1 else 0.0)


def batch_rows(batch_size: int, world_size: int) -> list[int]:
    """Rows of each rank's batch slice: B // G each, one more for the first B % G ranks."""
    base, extra = divmod(batch_size, world_size)
    return [base + (1 if g < extra else 0) for g in range(world_size)]


def owner_counts(world_size: int, slice_rows: Sequence[int], owners: Sequence[tuple[int, float]]) -> list[list[int]]:
    """The index matrix of one row-split table: rank r sends ``round(pooling * slice_rows[r])``
    indices to each owner o of a row block with pooling factor ``pooling`` (lookups per sample
    that fall in o's rows), for ``owners`` = [(o, pooling), ...]."""
    out = [[0] * world_size for _ in range(world_size)]
    for o, pooling in owners:
        for r in range(world_size):
            out[r][o] += int(round(pooling * slice_rows[r]))
    return out
