"""One measured round of plans on this machine: each device's fused op timed (a round's compute
first, in interleaved sweeps: :mod:`shardlab.measure.interleaved`), the backward all-to-all
measured with G real ranks, the forward all-to-all with the forward delays that compute +
backward comm give, so waiting for slower devices is part of it (``docs/measurement.md``, the
cost model of :mod:`shardlab.schedule`); and the task's lower bound. Costs are measured at the
hardware profile's batch size. :class:`~shardlab.evaluate.measured.MeasuredEvaluator` runs
these rounds."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.data.fit_lookups import with_lookups
from shardlab.data.lookups import lookup_origin
from shardlab.measure.comm import CommBench
from shardlab.measure.compute import DEFAULT_MAX_GB
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


def shard_key(tables: Sequence[Table]) -> tuple:
    """A shard's identity (name, rows, dim per table, sorted): equal keys are the same fused op."""
    return tuple(sorted((t.name, t.rows, t.dim) for t in tables))


def _collective(bench: Any | None) -> bool:
    """Whether ``bench`` is a torchrun group's (every rank runs this code) rather than one
    process's spawned ranks."""
    return bool(getattr(bench, "collective", False))


def measure_round(task: Task, shards: Mapping[str, Shards], patterns: Mapping[str, Any], profile: HardwareProfile,
                  bench: Any | None, ops: OpCache | None, first_batch: int = 0, seed: Any = 0, bound: bool = False,
                  max_gb: float = DEFAULT_MAX_GB) -> dict[str, Any]:
    """One round of the plans whose devices' (sub)tables are ``shards`` (name -> per device) and
    whose all-to-alls are ``patterns`` (name -> :func:`~shardlab.evaluate.exchange.comm_pattern`:
    dim sums and row-wise traffic; None: every shard's columns on its device's all-to-all):
    name -> an array of shape (G, 4) of forward compute, backward compute, forward comm and
    backward comm (ms) per device, and with ``bound`` :data:`BOUND` -> the lower bound (ms, None
    when all tables exceed ``max_gb`` GB; :func:`~shardlab.schedule.lower_bound_ms`).

    Measured in three interleaved steps (module docstring): every distinct device shard's fused
    op (and the all-tables op of the bound) in sweeps of one pass each
    (:func:`~shardlab.measure.interleaved.measure_interleaved`, from ``ops`` where built before,
    on lookup batches from ``first_batch``); then every plan's backward all-to-all (and the
    bound's balanced one) in sweeps; then every plan's forward all-to-all with the forward
    delays that compute + backward comm give, in sweeps. ``seed`` draws the sweeps' orders.
    ``bench``: the open bench of G ranks (None: one is started here for G > 1); ``ops``: the
    sitting's built ops (None: built for this round and dropped after); with a torchrun
    group's bench every rank calls this, rank g times device g's shards on its own device
    (rank 0 the bound's op) and every rank gets every device's times."""
    collective, G = _collective(bench), task.ngpu
    names = list(shards)
    distinct: dict[tuple, list[Table]] = {}
    for name in names:
        for g in ([bench.rank] if collective else range(G)):
            if shards[name][g]:
                distinct.setdefault(shard_key(shards[name][g]), list(shards[name][g]))
    whole = bound and op_bytes(task.tables, profile) <= max_gb * C.GB
    times_whole = whole and (not collective or bench.rank == 0)      # under torchrun rank 0 times it
    timed = list(distinct.values()) + ([list(task.tables)] if times_whole else [])
    got = measure_interleaved(timed, profile, ops or OpCache(), first_batch, _seed(seed, 0xC0), max_gb) if timed else []
    compute = {k: (fw, bw) for k, (fw, bw, _) in zip(distinct, got)}
    whole_ms = got[-1][2] if times_whole else None
    if collective:
        merged: dict[tuple, tuple[float, float]] = {}
        for part in bench.gather([(shard_key(shards[n][bench.rank]), compute.get(shard_key(shards[n][bench.rank])))
                                  for n in names if shards[n][bench.rank]]):
            merged.update(dict(part))
        compute = merged
        whole_ms = bench.share(whole_ms) if whole else None
    c = {n: np.array([compute[shard_key(ts)] if ts else (0.0, 0.0) for ts in shards[n]], dtype=float) for n in names}
    dims = {}
    for n in names:
        d, rw = patterns[n] if patterns.get(n) is not None else ([sum(t.out_dim for t in ts) for ts in shards[n]], None)
        dims[n] = ([int(round(x)) for x in d], rw)    # sequence tables' mean widths: the bench sends whole columns
    balanced = [int(round(x)) for x in balanced_dims(task)]
    with ExitStack() as stack:
        if bench is None and G > 1:                 # one bench for both steps
            bench = stack.enter_context(CommBench.for_profile(G, profile))
        bw, fw = _round_comm(names, dims, c, balanced if whole else None, profile, bench, seed, G)
    out: dict[str, Any] = {n: np.column_stack([c[n], fw[k][0], bw[k][1]]) for k, n in enumerate(names)}
    if bound:
        out[BOUND] = lower_bound_ms(whole_ms, G, np.column_stack(bw[-1])) if whole else None
    return out


def _round_comm(names: list[str], dims: dict, c: dict, balanced: list[int] | None, profile: HardwareProfile,
                bench: Any, seed: Any, G: int) -> tuple[list, list]:
    """The round's backward all-to-alls (every plan's, then the bound's ``balanced`` one when
    given), then its forward ones with the delays compute + backward comm give."""
    bw = _comm_many([(dims[n][0], None, dims[n][1]) for n in names] + ([(balanced, None, None)] if balanced else []),
                    profile, bench, _seed(seed, 0xB0), G)
    fw = _comm_many([(dims[n][0], list(forward_delays(c[n].sum(axis=1) + bw[k][1])), dims[n][1])
                     for k, n in enumerate(names)], profile, bench, _seed(seed, 0xF0), G)
    return bw, fw


def _seed(seed: Any, step: int) -> list[int]:
    """The seed of one step of a round: ``seed`` (an int or a list of ints) and the step's tag."""
    return [*(seed if isinstance(seed, (list, tuple)) else [seed]), step]


def _comm_many(patterns: list[tuple[list[int], list[float] | None, Any]], profile: HardwareProfile,
               bench: Any | None, seed: Any, G: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per pattern (dim sums, forward delays in ms or None, row-wise or None) the per-rank
    forward and backward comm (ms, shape (G,) each), all patterns' exchanges in interleaved
    sweeps (:meth:`~shardlab.measure.comm.CommBench.measure_many`); zeros for one device."""
    if G < 2 or not patterns:
        return [(np.zeros(G), np.zeros(G)) for _ in patterns]
    recs = bench.measure_many(patterns, repeats=profile.repeats, warmup=profile.warmup, seed=seed)
    return [(np.asarray(r.fw_comm_ms), np.asarray(r.bw_comm_ms)) for r in recs]


def measure_bound(task: Task, profile: HardwareProfile, bench: Any | None = None,
                  max_gb: float = DEFAULT_MAX_GB, first_batch: int = 0) -> float | None:
    """One measurement of the lower bound (ms, :func:`~shardlab.schedule.lower_bound_ms`): all
    tables in one fused op / G + the cheapest rank's all-to-all of balanced dim sums, on lookup
    batches from ``first_batch``; None when all tables together exceed ``max_gb`` GB
    (:func:`measure_round` with no plans)."""
    return measure_round(task, {}, {}, profile, bench, None, first_batch, bound=True, max_gb=max_gb)[BOUND]
