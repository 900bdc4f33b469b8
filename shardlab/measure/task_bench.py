"""The measuring step of task calibration (:mod:`shardlab.costmodel.task_calibration`): which
fused ops of a task's own tables to time, and timing them within a budget.

**The ops** (:func:`task_ops`): every table of the task alone, and ``groups`` fused groups of
the task's tables of the sizes a device holds under a plan: about ``len(tables) / ngpu`` tables,
the sizes spread over 0.5x .. 1.5x that (so the fit sees small and large devices), each drawn
from ``numpy.random.default_rng([seed, len(tables), ngpu, k])`` among the tables that fit one
device, redrawn (up to 20 times) until the group fits one device's memory and the measuring
limit. Same task and seed: same ops, in the same order. The order interleaves the groups with
the singles (a seeded shuffle of them), so a budget that runs out leaves a balanced subset.

**Timing** (:func:`measure_ops`): each op is one :func:`~shardlab.measure.compute.measure_compute`
call under :func:`calibration_profile` (the profile with the light settings of
``constants.TASK_CALIBRATION_*``), at the profile's batch size (the one its cost models predict
at), in this process; no new op is started once ``budget_s`` seconds have passed. The ``measure``
argument replaces the timing (tests inject a synthetic one). Nothing is written to disk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.data.fit_lookups import fit_table_lookups
from shardlab.errors import ShardlabError
from shardlab.measure.compute import DEFAULT_MAX_GB, measure_compute
from shardlab.measure.hardware import HardwareProfile, fbgemm_version, get_profile, measurable_profile
from shardlab.tables import Table, Task

#: A measuring function: the op's tables and the profile -> (fw ms, bw ms).
Measure = Callable[[Sequence[Table], HardwareProfile], tuple[float, float]]

#: Draws per group before it is given up (its tables never fit one device together).
GROUP_DRAWS = 20


@dataclass(frozen=True)
class TaskOp:
    """One op to time: ``kind`` ``"table"`` (one table alone) or ``"group"`` (a fused group);
    ``indices``: its tables' positions in the task (ascending)."""

    kind: str
    indices: tuple[int, ...]


@dataclass(frozen=True)
class MeasuredOp:
    """A timed op: ``fw_ms``, ``bw_ms`` (median of the light runs, ms); ``seconds``: wall time
    spent on it (s), making its inputs included."""

    op: TaskOp
    fw_ms: float
    bw_ms: float
    seconds: float


def calibration_profile(profile: str | HardwareProfile) -> HardwareProfile:
    """``profile`` with task calibration's light timing settings (``constants.TASK_CALIBRATION_*``);
    the name says so (``"<name>[task-calibration]"``)."""
    prof = get_profile(profile)
    return replace(prof, name=f"{prof.name}[task-calibration]", warmup=C.TASK_CALIBRATION_WARMUP,
                   repeats=C.TASK_CALIBRATION_REPEATS, input_batches=C.TASK_CALIBRATION_INPUT_BATCHES)


def unmeasurable_reason(profile: str | HardwareProfile) -> str | None:
    """Why ``profile`` cannot be measured on this machine (one line), or None where it can."""
    prof = get_profile(profile)
    try:
        measurable_profile(prof)
    except ShardlabError:
        return f"profile '{prof.name}' cannot be measured on this machine (no GPU)"
    if fbgemm_version() == "absent":
        return f"profile '{prof.name}' cannot be measured on this machine (fbgemm_gpu is not installed)"
    return None


def _op_bytes(tables: Sequence[Table], profile: HardwareProfile) -> int:
    return sum(t.memory_bytes(profile.weights_precision, profile.optimizer) for t in tables)


def task_ops(task: Task, profile: str | HardwareProfile, seed: int = 0,
             groups: int = C.TASK_CALIBRATION_GROUPS) -> tuple[list[TaskOp], list[dict[str, str]]]:
    """The ops to time (module docstring), in measuring order, and the tables left out
    (``[{"table": name, "reason": why}]``: too large to measure alone here)."""
    prof = get_profile(profile)
    if groups < 0:
        raise ShardlabError(f"task calibration: field 'groups' = {groups} must be >= 0")
    device_cap, measure_cap = task.mem_cap_bytes, DEFAULT_MAX_GB * C.GB
    n = len(task.tables)
    skipped, singles = [], []
    for i, t in enumerate(task.tables):
        if _op_bytes([t], prof) > measure_cap:
            skipped.append({"table": t.name, "reason": f"needs over {DEFAULT_MAX_GB:g} GB to measure alone"})
        else:
            singles.append(i)
    fits = [i for i in singles if task.table_bytes(task.tables[i]) <= device_cap]
    mean = n / task.ngpu
    sizes = [min(len(fits), max(2, int(round(mean * f)))) for f in np.linspace(0.5, 1.5, groups)] if groups else []
    drawn: list[tuple[int, ...]] = []
    for k, size in enumerate(sizes):
        if size < 2:
            continue
        rng = np.random.default_rng([seed, n, task.ngpu, k])
        for _ in range(GROUP_DRAWS):
            pick = tuple(sorted(int(fits[j]) for j in rng.choice(len(fits), size=size, replace=False)))
            tabs = [task.tables[i] for i in pick]
            if sum(task.table_bytes(t) for t in tabs) <= device_cap and _op_bytes(tabs, prof) <= measure_cap:
                if pick not in drawn:
                    drawn.append(pick)
                break
    order = np.random.default_rng([seed, n, task.ngpu, groups]).permutation(len(singles))
    ops: list[TaskOp] = []
    per = len(singles) / max(1, len(drawn))
    for k, g in enumerate(drawn):
        ops.append(TaskOp("group", g))
        ops += [TaskOp("table", (singles[j],)) for j in order[int(round(k * per)):int(round((k + 1) * per))]]
    if not drawn:
        ops = [TaskOp("table", (singles[j],)) for j in order]
    return ops, skipped


def fbgemm_measure(tables: Sequence[Table], profile: HardwareProfile) -> tuple[float, float]:
    """The default :data:`Measure`: one :func:`~shardlab.measure.compute.measure_compute` call
    (fw ms, bw ms)."""
    rec = measure_compute(tables, profile)
    return rec.fw_ms, rec.bw_ms


def measure_ops(task: Task, ops: Sequence[TaskOp], profile: HardwareProfile, budget_s: float,
                measure: Measure | None = None) -> tuple[list[MeasuredOp], bool]:
    """Time ``ops`` in order under ``profile`` (already the calibration profile); returns the
    measured ops and whether the budget (s) stopped it before the last op. Tables with only the
    Task JSON fields are timed on lookups fitted to their reuse bins, as the measured evaluator
    times them (:func:`~shardlab.data.fit_lookups.fit_table_lookups`); an op that cannot be
    measured (a one-line :class:`ShardlabError`) is left out, so the fit has fewer ops."""
    if not budget_s > 0:
        raise ShardlabError(f"task calibration: field 'budget_s' = {budget_s} must be > 0")
    run = measure or fbgemm_measure
    start = time.monotonic()
    # tables with only the Task JSON fields are measured on lookups fitted to their reuse bins,
    # as the measured evaluator measures them (data/fit_lookups.py)
    tables = list(task.tables)
    if measure is None:
        for i, t in enumerate(tables):
            try:
                tables[i] = fit_table_lookups(t, task.batch_size)
            except ShardlabError:          # no lookups can be made for it: its ops fail below, one by one
                pass
    out: list[MeasuredOp] = []
    for op in ops:
        if time.monotonic() - start >= budget_s:
            return out, True
        t0 = time.monotonic()
        try:
            fw, bw = run([tables[i] for i in op.indices], profile)
        except ShardlabError:              # an op that cannot be measured here is left out of the fit
            continue
        out.append(MeasuredOp(op, float(fw), float(bw), time.monotonic() - t0))
    return out, False
