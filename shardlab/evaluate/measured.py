"""Measured evaluation: plans timed on this machine with real fused fbgemm ops and real
all-to-alls, in paired, interleaved rounds.

One round of plans (:func:`~shardlab.evaluate.plan_round.measure_round`; ``docs/measurement.md``,
the cost model of :mod:`shardlab.schedule`): every distinct device shard's fused op, then every
plan's backward all-to-all with G real ranks, then every plan's forward all-to-all with the
forward delays that compute + backward comm give (so waiting for slower devices is part of it),
each step in interleaved sweeps, so the plans of a round share the machine's drift. Costs are
measured at the hardware profile's batch size, which the ``source`` names.

**Rounds.** On a shared VM one op's time drifts by tens of percent between rounds, so
:class:`MeasuredEvaluator` measures every plan in every round, with the task's lower bound as one
more item of each round, and records the round's items in an order shuffled per round (seeded);
within a round every plan sees the same lookups, identical device shards are timed once and
shared, and identical plans are measured once. Within a sitting each fused op is built once and
timed again in every round, its weights trained on by every pass as in training
(:class:`~shardlab.measure.op_cache.OpCache`, up to :data:`~shardlab.constants.OP_CACHE_GB` GB of
ops or half the memory available; building was most of a round's time on large tables), and the
allocator keeps freed memory so that ops built again do not fault in fresh pages (:func:`~shardlab.measure.hardware.kept_memory`).
Per plan it reports the per-round costs, their median and a 95% bootstrap interval; against a
reference plan the paired per-round ratio, its interval and a verdict
(:mod:`shardlab.evaluate.stats`). Optional untimed warm-up rounds come first; comm ranks and the
compute-measuring process are pinned to cores where the OS allows (:mod:`shardlab.measure.hardware`).

Lower bound premise: on the shipped CPU data fused costs are near-additive (median fused /
sum-of-singles 1.0) but above 1 in about half of the multi-table samples and beyond noise in
~18% (tests/test_subadditivity.py, datasets/cpu/NOTES.md), so on CPU a plan can measure below
its bound; ratios below 1 mean exactly that.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.bounds import check_bounds
from shardlab.errors import ShardlabError, field_error
from shardlab.evaluate.sequential import check_budget, check_looks, run_sequential
from shardlab.evaluate.stats import check_margin, hierarchical_median_ci
from shardlab.data.lookups import device_tables
from shardlab.evaluate.evaluation import DeviceCost, Evaluation
from shardlab.evaluate.evaluator import check_plans
from shardlab.evaluate.exchange import comm_pattern
from shardlab.evaluate.reference import (CHEAPEST_BASELINE, FIRST_PLAN, NAMED, SELECTED, baseline_names,
                                         compare_to_reference, selects_reference)
from shardlab.plan import Plan, device_memory_bytes, validate_plan
from shardlab.evaluate.journal import check_journal
from shardlab.evaluate.plan_round import (BOUND, MEASURED_BOUND, measurable, measure_bound, measure_round,
                                          round_orders, shard_key)
from shardlab.evaluate.sitting import SittingSpec, fresh_process_available, run_in_fresh_process, run_sitting
from shardlab.measure.compute import DEFAULT_MAX_GB
from shardlab.measure.hardware import HardwareProfile, get_profile, profile_with, sitting_spread
from shardlab.tables import Task

def _evaluation(task: Task, plan: Plan, source: str, sittings: Sequence[Sequence[np.ndarray]],
                bound: float | None, seed: int, spread: float) -> Evaluation:
    """An Evaluation from S sittings of per-round (G, 4) measurements: per-round plan costs (by
    sitting when S > 1), their median and hierarchical interval, per-device component medians,
    and the between-sitting log-sd ``spread`` its comparisons add."""
    arr = np.stack([m for s in sittings for m in s])                        # (S * R, G, 4)
    costs = [tuple(float(x) for x in np.stack(s).sum(axis=2).max(axis=1)) for s in sittings]   # ms per round
    med = np.median(arr, axis=0)
    mem = [b / C.GB for b in device_memory_bytes(task, plan)]
    devices = tuple(DeviceCost(g, *(float(x) for x in med[g]), mem[g]) for g in range(plan.ngpu))
    return Evaluation(task.name, plan.method, source, devices, bound, tuple(x for c in costs for x in c),
                      hierarchical_median_ci(costs, seed=seed)[1], sittings_ms=tuple(costs) if len(costs) > 1 else None,
                      bound_source=MEASURED_BOUND if bound is not None else None, sitting_log_sd=spread)


class MeasuredEvaluator:
    """The :class:`~shardlab.evaluate.evaluator.Evaluator` that measures (module docstring).

    ``profile``: hardware profile (name or value); ``rounds``: timed rounds per sitting (>= 3
    for intervals and verdicts); ``sittings``: how many sittings (>= 1), each with its own
    ranks (started anew), its own lookup batches and its own round orders, the intervals from the
    hierarchical bootstrap over them (:mod:`shardlab.evaluate.stats`); ``warmup_rounds``:
    untimed rounds at the start of every sitting; ``seed``: the rounds' orders and the
    bootstrap; ``reference``: the plan (name in the mapping) to compare against; when None and
    the plans hold two or more baselines, the best of them is picked in a separate **selection
    sitting** of :data:`~shardlab.constants.SELECTION_ROUNDS` rounds (baselines only) and then
    judged on the sittings that follow, never on the rounds that chose it (the Comparison's
    ``chosen`` says so); ``lower_bound``: measure the bound in every round; ``pin``: pin comm
    ranks and the compute-measuring process to cores; ``margin``: the equivalence margin of the
    verdicts (dimensionless, default :data:`~shardlab.constants.EQUIVALENCE_MARGIN` = 0.05:
    :func:`~shardlab.evaluate.stats.verdict`); ``sitting_sd``: the between-sitting log-sd the
    ratio intervals add (dimensionless; None: the profile folder's ``sitting_log_sd``, 0 for a
    profile without one: :func:`~shardlab.measure.hardware.sitting_spread`; recorded in every
    Evaluation as ``sitting_log_sd``); ``progress``: a
    tqdm bar; ``journal``: a JSON-lines file that every measurement is appended to as it is
    taken (sitting, round, item, (G, 4) per-device ms), so an interrupted evaluation loses
    nothing measured; ``group``: a :class:`~shardlab.measure.group_bench.GroupBench` when
    torchrun started the ranks (``python -m shardlab.dist evaluate --measure``): every rank then
    runs :meth:`evaluate`, rank g times device g's shards on its own device, the all-to-alls run
    between the group's ranks, every rank returns the same Evaluations, and only rank 0 shows
    progress and journals (one sitting: torchrun's ranks cannot be re-spawned from here);
    ``budget_s``: measure with a time budget (s) instead of a fixed ``sittings``: sittings are
    added, up to ``looks`` decided in advance, while a verdict is still inconclusive, decided plans
    drop out, and each verdict says why its plan stopped (:mod:`~shardlab.evaluate.sequential`:
    the looks' intervals are repeated confidence intervals by alpha spending on the budget's
    time, so the stopping keeps the stated error rate); each op is then timed
    :data:`~shardlab.constants.BUDGET_OP_REPEATS` times after
    :data:`~shardlab.constants.BUDGET_OP_WARMUP` warm-ups (the profile's settings where smaller),
    so the budget buys more rounds (:func:`budget_profile`); ``fresh_process``: (None: :data:`~shardlab.constants.SITTING_FRESH_PROCESS`) run each sitting
    in a fresh process of its own, forked from a clean server, so that no sitting inherits what
    an earlier one allocated (:mod:`~shardlab.evaluate.sitting`; in process under torchrun and
    where the OS has no ``fork``).
    After :meth:`evaluate`: ``orders_`` (each timed round's order, plan names and
    :data:`BOUND`, sitting after sitting), ``measured_`` (every item in the order it was
    recorded, warm-ups and the selection sitting included, as (round, name); round < 0 for
    warm-ups, rounds of later sittings numbered on), ``warmup_ms_`` (plan name -> its cost in
    each warm-up round, ms: what the warm-up rounds would have added), ``selection_`` (baseline
    name -> its selection-sitting costs per round, ms; empty without one) and ``seconds_``
    (wall time of the whole evaluation, s)."""

    def __init__(self, profile: str | HardwareProfile = C.MEASURE_PROFILE, rounds: int = 5, warmup_rounds: int = 1,
                 seed: int = 0, reference: str | None = None, lower_bound: bool = True, pin: bool = True,
                 progress: bool = True, journal: str | None = None, group: Any | None = None,
                 margin: float = C.EQUIVALENCE_MARGIN, sittings: int = 1, sitting_sd: float | None = None,
                 budget_s: float | None = None, looks: int = C.SEQUENTIAL_LOOKS,
                 fresh_process: bool | None = None):
        self.profile = profile
        self.rounds = rounds
        self.warmup_rounds = warmup_rounds
        self.seed = seed
        self.reference = reference
        self.lower_bound = lower_bound
        self.pin = pin
        self.progress = progress
        self.journal = journal
        self.group = group
        self.margin = margin
        self.sittings = sittings
        self.sitting_sd = sitting_sd
        self.budget_s = budget_s
        self.looks = looks
        self.fresh_process = C.SITTING_FRESH_PROCESS if fresh_process is None else fresh_process

    def _check(self) -> HardwareProfile:
        check_bounds("measured evaluator", self, "rounds", "warmup_rounds", "sittings", "seed")
        if self.group is not None and int(self.sittings) > 1:
            raise field_error("measured evaluator", "sittings", self.sittings,
                              "must be 1 under torchrun (its ranks cannot be re-spawned): run the command again")
        check_margin(self.margin, "measured evaluator")
        if not isinstance(self.fresh_process, bool):
            raise field_error("measured evaluator", "fresh_process", self.fresh_process, "must be true or false")
        if self.budget_s is not None:
            check_budget(self.budget_s)
            check_looks(self.looks)
            if self.group is not None:
                raise field_error("measured evaluator", "budget_s", self.budget_s,
                                  "needs sittings of their own ranks, which torchrun's cannot be: give a fixed --rounds")
        if self.journal is not None:
            check_journal(self.journal)          # before anything runs
        prof = get_profile(self.profile)
        if prof.device == "cuda" and self.group is None:
            import torch
            if not torch.cuda.is_available():
                raise ShardlabError(f"hardware profile '{prof.name}' measures on a CUDA GPU and this machine has "
                                    f"none: measure here with profile '{C.MEASURE_PROFILE}'")
        return prof

    def _measuring_profile(self) -> HardwareProfile:
        """The profile ops are timed under: the profile, or with a budget :func:`budget_profile`."""
        prof = self._check()
        return prof if self.budget_s is None else budget_profile(prof)

    def _sitting(self, task: Task, prof: HardwareProfile, items: Sequence[str], shards: Mapping[str, Any],
                 patterns: Mapping[str, Any], orders: list, sitting: int | str, first_batch: int, bar: Any,
                 journal: str | None) -> dict[str, list]:
        """One sitting (:func:`~shardlab.evaluate.sitting.run_sitting`: its own ranks unless
        torchrun's, ``warmup_rounds`` untimed rounds, then the timed rounds in ``orders``), in a
        fresh process where ``fresh_process`` and the OS allow, its measurements recorded in the
        order taken. Returns name -> per-round measurements."""
        spec = SittingSpec(task, prof, {k: shards[k] for k in items if k != BOUND},
                           {k: patterns[k] for k in items if k != BOUND}, tuple(items),
                           tuple(tuple(o) for o in orders), sitting, self._nsit, first_batch, int(self.warmup_rounds),
                           self.seed, bool(self.pin), journal)

        def tick(status: str | None, n: int) -> None:
            if status is not None:
                bar.set_postfix_str(status, refresh=False)
            if n:
                bar.update(n)

        fresh = self.fresh_process and self.group is None and fresh_process_available()
        recorded = run_in_fresh_process(spec, tick) if fresh else run_sitting(spec, self.group, tick)
        runs: dict[str, list] = {k: [] for k in items}
        offset = len(self.orders_) if sitting != "selection" else 0
        for r, name, m in recorded:
            self.measured_.append((r + offset if r >= 0 else r, name))
            if r >= 0:
                runs[name].append(m)
            elif name != BOUND and sitting != "selection":
                self.warmup_ms_.setdefault(name, []).append(float(m.sum(axis=1).max()))
        return runs

    def evaluate(self, task: Task, plans: Mapping[str, Plan]) -> dict[str, Evaluation]:
        """Measured Evaluations of ``plans`` in paired rounds over ``sittings`` sittings, compared
        to the reference (named, or picked in a selection sitting first)."""
        prof = self._measuring_profile()
        check_plans(task, plans)
        t0 = time.perf_counter()
        task, note = measurable(task)
        for p in plans.values():
            validate_plan(task, p)
        if self.group is not None and self.group.world_size != task.ngpu:
            raise ShardlabError(f"measured evaluator: the group has {self.group.world_size} ranks but task "
                                f"'{task.name}' has field 'ngpu' = {task.ngpu}")
        shards = {k: device_tables(task, p) for k, p in plans.items()}
        patterns = {k: comm_pattern(task, p, prof.batch_size) for k, p in plans.items()}
        sig = {k: tuple(shard_key(x) for x in s) for k, s in shards.items()}
        first: dict[tuple, str] = {}      # identical plans are measured once per round
        for k in plans:
            first.setdefault(sig[k], k)
        rep = {k: first[sig[k]] for k in plans}
        items = list(first.values()) + ([BOUND] if self.lower_bound else [])
        base = list(dict.fromkeys(rep[k] for k in baseline_names(plans)))
        select = selects_reference(self.reference, base, self.rounds)
        nsit = self._nsit = int(self.sittings) if self.budget_s is None else int(self.looks)

        where = f" (torchrun: {task.ngpu} ranks, each timing its own device's shards)" if self.group else ""
        source = f"measured:{prof.name}{note}{where}"
        spread = sitting_spread(prof) if self.sitting_sd is None else self.sitting_sd
        self.orders_, self.measured_, self.warmup_ms_, self.selection_ = [], [], {}, {}
        lead = self.group is None or self.group.rank == 0
        journal = self.journal if lead else None
        per_sitting = (self.warmup_rounds + self.rounds) * len(items)
        bar = tqdm(total=nsit * per_sitting + (select and (self.warmup_rounds + C.SELECTION_ROUNDS) * len(base)),
                   desc="measuring plans", unit="plan", disable=not (self.progress and lead))
        with ExitStack() as stack:
            stack.callback(bar.close)     # also on failure: an error line must not follow the bar on its line
            reference, chosen = self.reference, NAMED if self.reference is not None else None
            if select:                    # lookups after every judged sitting's, orders of their own
                orders = round_orders(base, C.SELECTION_ROUNDS, self.seed, sitting=nsit + 0x5E1)
                runs = self._sitting(task, prof, base, shards, patterns, orders, "selection", nsit * prof.input_batches,
                                     bar, journal)
                self.selection_ = {k: [float(m.sum(axis=1).max()) for m in runs[k]] for k in base}
                reference = min(base, key=lambda k: (float(np.median(self.selection_[k])), base.index(k)))
                chosen = SELECTED

            def sitting(s: int, names: Sequence[str]) -> dict[str, list]:
                now = list(names) + ([BOUND] if self.lower_bound else [])
                orders = round_orders(now, self.rounds, self.seed, sitting=s)
                runs = self._sitting(task, prof, now, shards, patterns, orders, s, s * prof.input_batches, bar, journal)
                self.orders_.extend(orders)           # after: _sitting numbers this sitting's rounds on from it
                return runs

            if self.budget_s is None:
                by_sitting = [sitting(s, [k for k in items if k != BOUND]) for s in range(nsit)]
            else:
                if reference is None:                 # named, or picked in the selection sitting, or:
                    reference, chosen = (base[0], CHEAPEST_BASELINE) if base else (next(iter(plans)), FIRST_PLAN)
                judged, by_sitting = run_sequential(
                    sitting, lambda k, runs: _evaluation(task, plans[k], source, [r[k] for r in runs if k in r], None,
                                                         self.seed, spread),
                    [k for k in items if k != BOUND], rep[reference], float(self.budget_s), int(self.looks), self.seed,
                    self.margin, self.sitting_sd, chosen, started=t0)
                bar.total = bar.n                     # what was measured is the whole
        bounds = [b for runs in by_sitting for b in runs.get(BOUND, []) if b is not None]
        bound = float(np.median(bounds)) if bounds else None
        self.warmup_ms_ = {k: self.warmup_ms_[rep[k]] for k in plans if rep[k] in self.warmup_ms_}
        if self.budget_s is not None:
            self.seconds_ = time.perf_counter() - t0
            return {k: replace(judged[rep[k]], method=plans[k].method, lower_bound_ms=bound,
                               bound_source=MEASURED_BOUND if bound is not None else None,
                               comparison=replace(judged[rep[k]].comparison, reference=reference)) for k in plans}
        out = {k: _evaluation(task, plans[k], source, [runs[rep[k]] for runs in by_sitting], bound, self.seed,
                           spread)
               for k in plans}
        self.seconds_ = time.perf_counter() - t0
        return compare_to_reference(out, reference, self.seed, self.margin, self.sitting_sd, chosen)


def budget_profile(profile: str | HardwareProfile) -> HardwareProfile:
    """``profile`` with each op timed :data:`~shardlab.constants.BUDGET_OP_REPEATS` times after
    :data:`~shardlab.constants.BUDGET_OP_WARMUP` warm-ups where it times more (its name says so,
    e.g. ``cpu[warmup=2]``): a measurement with a time budget spends the time on more rounds
    instead (``constants``: what was measured)."""
    prof = get_profile(profile)
    return profile_with(prof, repeats=min(prof.repeats, C.BUDGET_OP_REPEATS),
                        warmup=min(prof.warmup, C.BUDGET_OP_WARMUP))


def measure_plan(task: Task, plan: Plan, profile: str | HardwareProfile = C.MEASURE_PROFILE,
                 bench: Any | None = None, lower_bound: bool = True) -> Evaluation:
    """One measurement of ``plan`` (no rounds, no interval: the campaigns' data point).
    ``bench``: an open :class:`~shardlab.measure.comm.CommBench` of ``plan.ngpu`` ranks to
    reuse (else one is started); ``lower_bound``: also measure the bound (None when all tables
    exceed the compute profiler's memory limit)."""
    profile = get_profile(profile)
    task, note = measurable(task)
    validate_plan(task, plan)
    got = measure_round(task, {"plan": device_tables(task, plan)}, {"plan": comm_pattern(task, plan, profile.batch_size)},
                        profile, bench, None, bound=lower_bound)
    m, bound = got["plan"], got.get(BOUND)
    mem = [b / C.GB for b in device_memory_bytes(task, plan)]
    devices = tuple(DeviceCost(g, *(float(x) for x in m[g]), mem[g]) for g in range(plan.ngpu))
    return Evaluation(task.name, plan.method, f"measured:{profile.name}{note}", devices, bound,
                      bound_source=MEASURED_BOUND if bound is not None else None)


def measure_plans(task: Task, plans: Mapping[str, Plan], profile: str | HardwareProfile = C.MEASURE_PROFILE,
                  lower_bound: bool = True, progress: bool = True, rounds: int = 1, seed: int = 0,
                  reference: str | None = None, margin: float = C.EQUIVALENCE_MARGIN,
                  sittings: int = 1) -> dict[str, Evaluation]:
    """Measure several plans of one task with one set of G ranks per sitting and the bound
    measured in the same rounds: :class:`MeasuredEvaluator` with ``rounds`` timed rounds (one by
    default, no warm-up round: the quick look; pass ``rounds`` >= 3 for intervals and verdicts),
    ``sittings`` sittings and the verdicts' equivalence ``margin`` (dimensionless). Returns
    name -> Evaluation, in ``plans``' order."""
    ev = MeasuredEvaluator(profile, rounds=rounds, warmup_rounds=0 if rounds == 1 else 1, seed=seed,
                           reference=reference, lower_bound=lower_bound, progress=progress, margin=margin,
                           sittings=sittings)
    return ev.evaluate(task, plans)


def measure_lower_bound(task: Task, profile: str | HardwareProfile = C.MEASURE_PROFILE, bench: Any | None = None,
                        max_gb: float = DEFAULT_MAX_GB) -> float | None:
    """One measurement of the task's lower bound (ms; :func:`measure_bound`)."""
    return measure_bound(measurable(task)[0], get_profile(profile), bench, max_gb)

