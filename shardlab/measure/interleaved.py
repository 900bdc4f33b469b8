"""One round's compute with every op timed in turn, pass by pass.

On a shared VM a fused op's time moves in stretches of tens to hundreds of milliseconds (the
host's other work, frequency), so two ops timed one after the other see different stretches and
their ratio carries both. Here every op of a round is built first (or taken from the sitting's
:class:`~shardlab.measure.op_cache.OpCache`), then ``warmup`` untimed and ``repeats`` timed
**sweeps** run, each sweep one pass of every op in an order shuffled per sweep: each op's median
is taken over the same stretch of time as every other op's, and the drift they share cancels in
their ratio. On set-1 tasks here (4 plans, 10 timed passes per op) this took the per-round log-sd
of the plans' compute ratios from 0.27 to 0.066 (4 tables on 2 devices) and from 0.13 to 0.06 (12
tables on 2 devices), for about 15% more time per round.

Ops the cache cannot take (over its size together,
:meth:`~shardlab.measure.op_cache.OpCache.for_this_host`) are timed one at a time after the
sweeps, as :func:`~shardlab.measure.compute.measure_compute` times them.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from shardlab import constants as C
from shardlab.measure.compute import (DEFAULT_MAX_GB, check_op, op_groups, prepared, timed_op, timed_pass, timer_for,
                                      torch_threads)
from shardlab.measure.hardware import HardwareProfile, measurable_profile
from shardlab.measure.op_cache import OpCache, op_bytes, op_key
from shardlab.tables import Table


def measure_interleaved(shards: Sequence[Sequence[Table]], profile: str | HardwareProfile, ops: OpCache,
                        first_batch: int = 0, seed: Any = 0,
                        max_gb: float = DEFAULT_MAX_GB) -> list[tuple[float, float, float]]:
    """(fw_ms, bw_ms, total_ms) of each of ``shards`` -- its fused op, or with sequence tables the
    sum over its ops as :func:`~shardlab.measure.compute.measure_compute` has them -- on lookup
    batches ``first_batch`` ..; the ops timed in interleaved sweeps (module docstring) whose
    orders ``numpy.random.default_rng(seed)`` draws. A shard's ``total_ms`` is the median of its
    per-pass sums where it is one op, else the sum of its ops' medians. Shards repeat freely: an
    op is built and timed once. Refuses, in one line, what ``measure_compute`` refuses."""
    profile = measurable_profile(profile)
    keys: list[list[tuple]] = []
    distinct: dict[tuple, tuple[list[Table], bool]] = {}
    for shard in shards:
        check_op(shard, profile, max_gb)
        mine = []
        for pooled, group in op_groups(shard):
            key = op_key(group, profile, pooled, first_batch)
            distinct.setdefault(key, (list(group), pooled))
            mine.append(key)
        keys.append(mine)
    times: dict[tuple, tuple[float, float, float]] = {}
    with torch_threads(profile.threads):
        swept = []
        for key, (tables, pooled) in distinct.items():
            nbytes = op_bytes(tables, profile)
            if ops.takes(key, nbytes):
                swept.append((key, ops.get(key, nbytes, lambda t=tables, p=pooled: prepared(t, profile, p, first_batch,
                                                                                              None))))
        if swept:
            times.update(_sweeps(swept, profile, np.random.default_rng(seed)))
    for key, (tables, pooled) in distinct.items():
        if key not in times:
            rec = timed_op(tables, profile, pooled, first_batch)
            times[key] = (rec.fw_ms, rec.bw_ms, rec.total_ms)
    return [tuple(float(sum(times[k][j] for k in mine)) for j in range(3)) for mine in keys]   # type: ignore[misc]


def _sweeps(swept: list[tuple[tuple, Any]], profile: HardwareProfile,
            rng: np.random.Generator) -> dict[tuple, tuple[float, float, float]]:
    """``warmup`` + ``repeats`` sweeps over the built ``swept`` ops, each in its own shuffled
    order; key -> median (fw_ms, bw_ms, total_ms) over the timed sweeps. With
    :data:`~shardlab.constants.SWEEP_LEAD_PASSES` = k > 0 every timed pass of an op follows k
    untimed passes of the same op on the batches before it, so that it runs after itself, as
    in training, whatever op the sweep's order put before it."""
    _, (_, first_batches, _) = swept[0]
    timer = timer_for(first_batches[0][0].device)           # the device the ops' inputs are on
    if profile.device == "cuda":
        torch.cuda.synchronize()          # the inputs' copies and the ops' initialisation are done
    runs: dict[tuple, list[tuple[float, float, float]]] = {key: [] for key, _ in swept}
    for i in range(profile.warmup + profile.repeats):
        for k in rng.permutation(len(swept)):
            key, (op, batches, grads) = swept[k]
            for lead in range(C.SWEEP_LEAD_PASSES, 0, -1):
                timed_pass(op, batches, grads, i - lead, timer)
            got = timed_pass(op, batches, grads, i, timer)
            if i >= profile.warmup:
                runs[key].append(got)
    return {key: tuple(float(x) for x in np.median(np.asarray(r), axis=0)) for key, r in runs.items()}  # type: ignore[misc]
