"""One measured round of plans on this machine: each device's fused op timed (a round's compute
first, in interleaved sweeps: :mod:`shardlab.measure.interleaved`), the backward all-to-all
measured with G real ranks, the forward all-to-all with the forward delays that compute +
backward comm give, so waiting for slower devices is part of it (``docs/measurement.md``, the
cost model of :mod:`shardlab.schedule`); and the task's lower bound. Costs are measured at the
hardware profile's batch size. :class:`~shardlab.evaluate.measured.MeasuredEvaluator` runs
these rounds."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.data.fit_lookups import with_lookups
from shardlab.data.lookups import lookup_origin
from shardlab.measure.comm import CommBench
from shardlab.measure.compute import DEFAULT_MAX_GB, measure_compute
from shardlab.measure.hardware import HardwareProfile
from shardlab.measure.interleaved import measure_interleaved
from shardlab.measure.op_cache import OpCache, op_bytes
from shardlab.schedule import balanced_dims, forward_delays, lower_bound_ms
from shardlab.tables import Table, Task

#: The lower bound's name among a round's items.
#: What a measured lower bound rests on (:func:`measure_bound`), in one line.
MEASURED_BOUND = "measured: every table in one fused op / G, plus a balanced all-to-all (not proven)"
BOUND = "<lower bound>"

Shards = Sequence[Sequence[Table]]


def measurable(task: Task) -> tuple[Task, str]:
    """``task`` with lookups for every table (tables with only the Task JSON fields get a
    generator fitted to their reuse bins and pooling factor at the task's batch size:
    :func:`~shardlab.data.fit_lookups.with_lookups`) and the note for ``source``: ``""`` when
    every table has its own generator, else e.g. ``" (lookups fitted for 3/30 tables, replayed
    from traces for 2/30)"``."""

    out = with_lookups(task)
    origins = [lookup_origin(t) for t in out.tables]
    n = len(origins)
    parts = [f"{what} for {origins.count(kind)}/{n} tables" for kind, what in
             (("fitted", "lookups fitted"), ("trace", "replayed from traces")) if kind in origins]
    return out, (f" ({', '.join(parts)})" if parts else "")


def round_orders(names: Sequence[str], rounds: int, seed: int, sitting: int = 0) -> list[list[str]]:
    """The measuring order of each of ``rounds`` timed rounds: ``names`` shuffled per round by
    ``numpy.random.default_rng([seed, 0x0DE7])`` for sitting 0 and ``[seed, 0x0DE7, sitting]``
    for later sittings (same seed, same orders)."""
    rng = np.random.default_rng([seed, 0x0DE7] + ([sitting] if sitting else []))
    return [[names[i] for i in rng.permutation(len(names))] for _ in range(rounds)]


def _comm(dims: Sequence[int], delays: Sequence[float] | None, profile: HardwareProfile,
          bench: Any | None, rowwise: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-rank forward and backward comm (ms, shape (G,) each): the all-to-all, with
    ``rowwise``'s collectives when given; zeros for one device. A sequence table's jagged
    outputs are sent as a fixed width, its mean (:attr:`~shardlab.tables.Table.out_dim`),
    each rank's sum rounded to whole columns."""
    if len(dims) < 2:
        return np.zeros(len(dims)), np.zeros(len(dims))
    dims = [int(round(d)) for d in dims]            # sequence tables' mean widths: the bench sends whole columns
    extra = {} if rowwise is None or rowwise.empty else {"rowwise": rowwise}
    if bench is None:
        with CommBench.for_profile(len(dims), profile) as b:
            s = b.measure(dims, delays, repeats=profile.repeats, warmup=profile.warmup, **extra)
    else:
        s = bench.measure(dims, delays, repeats=profile.repeats, warmup=profile.warmup, **extra)
    return np.asarray(s.fw_comm_ms), np.asarray(s.bw_comm_ms)


def shard_key(tables: Sequence[Table]) -> tuple:
    """A shard's identity (name, rows, dim per table, sorted): equal keys are the same fused op."""
    return tuple(sorted((t.name, t.rows, t.dim) for t in tables))


def _collective(bench: Any | None) -> bool:
    """Whether ``bench`` is a torchrun group's (every rank runs this code) rather than one
    process's spawned ranks."""
    return bool(getattr(bench, "collective", False))


def measure_shards(shards: Shards, profile: HardwareProfile, bench: Any | None = None,
                   cache: dict | None = None, pattern: tuple[list[int], Any] | None = None,
                   first_batch: int = 0, ops: OpCache | None = None) -> np.ndarray:
    """One measurement of a plan given its devices' (sub)tables: an array of shape (G, 4) of
    forward compute, backward compute, forward comm and backward comm (ms) per device (module
    docstring). ``cache``: shard key -> (fw, bw) compute ms, shared within one round.
    ``pattern``: the plan's :func:`~shardlab.evaluate.values.comm_pattern` (dim sums, row-wise
    traffic); default: every shard's columns on its device's all-to-all. ``first_batch``: the
    lookup batches the ops run on (:func:`~shardlab.measure.compute.measure_compute`; a later
    sitting draws its own). ``ops``: the sitting's built ops (:class:`~shardlab.measure.op_cache.OpCache`).
    With a torchrun group's bench every rank calls this; rank g times device g's shard on its own device, and
    every rank gets every device's times."""
    cache = {} if cache is None else cache
    c = np.zeros((len(shards), 2))
    mine = [bench.rank] if _collective(bench) else range(len(shards))
    for g in mine:
        tables = shards[g]
        if tables:
            key = shard_key(tables)
            if key not in cache:
                s = measure_compute(list(tables), profile, first_batch=first_batch, ops=ops)
                cache[key] = (s.fw_ms, s.bw_ms)
            c[g] = cache[key]
    if _collective(bench):
        c = np.asarray(bench.gather(c[bench.rank].tolist()), dtype=float)
    dims, rowwise = pattern if pattern is not None else ([sum(t.out_dim for t in ts) for ts in shards], None)
    _, bw = _comm(dims, None, profile, bench, rowwise)
    fw, _ = _comm(dims, list(forward_delays(c.sum(axis=1) + bw)), profile, bench, rowwise)
    return np.column_stack([c, fw, bw])


def round_compute(task: Task, plans_shards: Sequence[Shards], profile: HardwareProfile, bench: Any | None,
                  ops: OpCache, first_batch: int, seed: Any, bound: bool,
                  max_gb: float = DEFAULT_MAX_GB) -> dict[Any, Any]:
    """A round's compute, measured before its items in interleaved sweeps
    (:func:`~shardlab.measure.interleaved.measure_interleaved`, orders drawn by ``seed``): shard
    key -> (fw_ms, bw_ms) of every distinct device shard of ``plans_shards`` (under a torchrun
    group: this rank's device's), and, where ``bound`` and all tables fit ``max_gb`` GB,
    :data:`BOUND` -> the one fused op of every table's total_ms (rank 0's under torchrun). The
    :func:`measure_shards` and :func:`measure_bound` of the round's items read it as their
    ``cache``."""
    collective = _collective(bench)
    distinct: dict[tuple, list[Table]] = {}
    for shards in plans_shards:
        for g in ([bench.rank] if collective else range(len(shards))):
            if shards[g]:
                distinct.setdefault(shard_key(shards[g]), list(shards[g]))
    items = list(distinct.values())
    whole = bound and (not collective or bench.rank == 0) and op_bytes(task.tables, profile) <= max_gb * C.GB
    if whole:
        items.append(list(task.tables))
    got = measure_interleaved(items, profile, ops, first_batch, seed, max_gb) if items else []
    out: dict[Any, Any] = {k: (fw, bw) for k, (fw, bw, _) in zip(distinct, got)}
    if whole:
        out[BOUND] = got[-1][2]
    return out


def measure_bound(task: Task, profile: HardwareProfile, bench: Any | None = None,
                  max_gb: float = DEFAULT_MAX_GB, first_batch: int = 0, ops: OpCache | None = None,
                  cache: dict | None = None) -> float | None:
    """One measurement of the lower bound (ms, :func:`~shardlab.schedule.lower_bound_ms`): all
    tables in one fused op / G + the cheapest rank's all-to-all of balanced dim sums, on lookup
    batches from ``first_batch`` (the op's time from the round's ``cache`` where
    :func:`round_compute` put it, else timed here, from ``ops`` when built before). None when all
    tables together exceed ``max_gb`` GB."""
    if op_bytes(task.tables, profile) > max_gb * C.GB:
        return None

    def whole() -> float:
        if cache is not None and BOUND in cache:
            return float(cache[BOUND])
        return measure_compute(list(task.tables), profile, max_gb=max_gb, first_batch=first_batch, ops=ops).total_ms

    if _collective(bench):    # rank 0 times the one fused op, the others wait for its result
        whole_ms = bench.share(whole() if bench.rank == 0 else None)
    else:
        whole_ms = whole()
    fw, bw = _comm(balanced_dims(task), None, profile, bench)
    return lower_bound_ms(whole_ms, task.ngpu, np.column_stack([fw, bw]))
