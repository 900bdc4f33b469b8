"""Search benchmark runs: every sharder on held-out tasks at a few settings, judged by one cost
model (simulated costs, labelled with the model's ``source``; predictions, so no uncertainty)
and, optionally, measured on this machine in paired rounds (medians with 95% intervals, and
against each baseline a paired verdict); and NeuroShard's search time at scale. This module
generates the tasks, runs the sharders and measures; the summaries, win counting, figures and
pages over its rows are in :mod:`shardlab.report.benchmark` and its siblings, which only draw
and write.

A *setting* is named ``"<G>x<N>"`` or ``"<G>x<LO>-<HI>"``: G GPUs and N tables, or a number of
tables drawn uniformly from [LO, HI] per task. A *row* is one (task, method) pair::

    {"setting", "task" (index within the setting), "method", "search_s" (s), "simulated_ms",
     "simulated_bound_ms" (the plan's own bound under the judge: the exact planner's where its
     plan is among the task's and the plan lies in its space, else the judge's floor), "bound_source"
     (what that bound rests on), "sim_source", "simulated_per_device" (one dict per GPU, ms and GB),
     ["measured_ms", "measured_bound_ms", "source", "measured_per_device",    # with measure=True
      "measured_rounds_ms" (plan cost per round, ms), "measured_ci95_ms" ([lo, hi] ms or None),
      "measured_vs" ({baseline: {"ratio", "ratio_ci95", "verdict", "equivalence_margin"}}: paired,
      against every other baseline measured on the task; measured with a time budget, against the
      evaluator's reference only, with "sittings", "rounds", "stopped" and "confidence": the
      sequential design judges that comparison alone)]}

or, where the method raised :class:`~shardlab.errors.ShardlabError` on that task,
``{"setting", "task", "method", "skipped": "<the error's one line>"}``.

``studies/search_benchmark/run.py`` (-> its ``results/search_benchmark.{json,md}``) and
``notebooks/benchmark.ipynb`` are thin wrappers around this module and the report ones.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from tqdm import tqdm

from shardlab import constants as C
from shardlab.constants import BASELINE_METHODS
from shardlab.data.tasks import generate_task, pool_tables, task_from_tables
from shardlab.errors import ShardlabError
from shardlab.evaluate import Evaluation, Evaluator, MeasuredEvaluator, ModelEvaluator, compare_to_reference
from shardlab.evaluate.sequential import task_budget
from shardlab.io import names_list
from shardlab.measure.hardware import get_profile
from shardlab.search import run_sharder, sharder_for
from shardlab.search.neuroshard import NeuroShardSharder
from shardlab.search.optimal import exact_record, plan_bound
from shardlab.tables import Task

SETTING_NAMES = ("4x10-60", "4x50", "8x80")
#: Every method the benchmark runs by default: the baselines, then the learned sharders.
METHODS = [*BASELINE_METHODS, "neuroshard[columns=false]", "neuroshard", "dreamshard", "autoshard"]
MEM_CAP_GB = 4.0
TASK_SEED_BASE = 1000

#: Timed rounds per task when measuring (>= 3 for intervals and verdicts; cheap by default).
ROUNDS = 3

Setting = tuple[int, tuple[int, int]]


def parse_setting(name: str) -> Setting:
    """``"4x50"`` -> ``(4, (50, 50))``, ``"4x10-60"`` -> ``(4, (10, 60))``: (GPUs, (min, max
    tables)). One-line :class:`ShardlabError` for anything else."""
    m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)(?:\s*-\s*(\d+))?\s*", str(name))
    if not m:
        raise ShardlabError(f"setting '{name}' must look like '<gpus>x<tables>' or '<gpus>x<min>-<max>'")
    g, lo = int(m.group(1)), int(m.group(2))
    hi = int(m.group(3)) if m.group(3) else lo
    if g < 1 or lo < 1 or hi < lo:
        raise ShardlabError(f"setting '{name}': need gpus >= 1 and 1 <= min <= max tables")
    return g, (lo, hi)


def as_settings(settings: Mapping[str, Setting] | Iterable[str] | str) -> dict[str, Setting]:
    """A dict name -> (GPUs, (min, max tables)) from such a dict or from names
    (:func:`names_list`, :func:`parse_setting`)."""
    if isinstance(settings, Mapping):
        return {str(k): (int(v[0]), (int(v[1][0]), int(v[1][1]))) for k, v in settings.items()}
    names = names_list(settings)
    if not names:
        raise ShardlabError("field 'settings' is empty: name at least one, e.g. '4x50'")
    return {s: parse_setting(s) for s in names}


SETTINGS = as_settings(SETTING_NAMES)


def benchmark_tasks(settings: Mapping[str, Setting] | Iterable[str], tasks_per_setting: int, seed: int = 0,
                    mem_cap_gb: float = MEM_CAP_GB, batch_size: int | None = None,
                    pool: str | None = None) -> list[tuple[str, Task]]:
    """``tasks_per_setting`` held-out tasks (the pool's ``test`` tables) per setting, in setting
    order: a list of (setting name, Task), length ``len(settings) * tasks_per_setting``.

    Task k of a setting draws its number of tables with ``numpy.random.default_rng([len(name),
    seed])`` (the k-th draw; for seed 0 these are the draws ``studies/search_benchmark/run.py`` always
    made) and its tables with :func:`~shardlab.data.tasks.generate_task` seed
    ``1000 * (seed + 1) + k``; memory cap ``mem_cap_gb`` GB per GPU, batch ``batch_size``
    samples (default: the ``cpu`` profile's, the batch the shipped models predict for)."""
    if tasks_per_setting < 1:
        raise ShardlabError(f"field 'tasks_per_setting' = {tasks_per_setting} must be >= 1")
    batch = batch_size or get_profile("cpu").batch_size
    extra = {"pool": pool} if pool else {}
    out = []
    for name, (g, (lo, hi)) in as_settings(settings).items():
        rng = np.random.default_rng([len(name), seed])
        for k in range(tasks_per_setting):
            out.append((name, generate_task(ntables=int(rng.integers(lo, hi + 1)), ngpu=g, mem_cap_gb=mem_cap_gb,
                                            batch_size=batch, seed=TASK_SEED_BASE * (seed + 1) + k,
                                            split="test", **extra)))
    return out


def run_benchmark(tasks: Sequence[tuple[str, Task]], methods: Sequence[str], model: Any, measure: bool = False,
                  progress: bool = True, seed: int = 0, profile: str = C.PLAN_PROFILE,
                  measure_profile: Any = C.MEASURE_PROFILE,
                  log: Callable[[str], None] | None = None, rounds: int = ROUNDS,
                  evaluator: Evaluator | None = None,
                  baselines: Sequence[str] = BASELINE_METHODS, budget_s: float | None = None) -> list[dict[str, Any]]:
    """Run every method on every task (sharder seed ``seed``; model-based sharders use the shipped
    models of hardware ``profile``) and judge each plan with ``model`` (a cost-model bundle or
    its name in ``profile``, through a :class:`~shardlab.evaluate.ModelEvaluator`: the simulated
    columns). Measured columns come
    from ``evaluator`` (any :class:`~shardlab.evaluate.Evaluator`, called once per task with all
    its plans); with ``measure`` and no ``evaluator``, a
    :class:`~shardlab.evaluate.MeasuredEvaluator` of ``measure_profile`` with ``rounds`` paired rounds
    and ``seed`` (slow: real fused fbgemm ops, G gloo ranks, the bound measured in every round),
    or with a time budget of ``budget_s`` seconds per task on average instead (sittings of
    ``rounds`` rounds added while a verdict against the best baseline is inconclusive:
    :mod:`~shardlab.evaluate.sequential`; the time a task leaves goes to the tasks after it:
    :func:`~shardlab.evaluate.sequential.task_budget`).
    Each measured row gets its rounds, interval and, against every other one of ``baselines``
    measured on the task, the paired verdict (module docstring).
    Returns one row per (task, method), in task then method order (module docstring); costs in
    ms, search time in s. A method raising :class:`ShardlabError` (infeasible, unsupported
    blocks, torchrec missing) gives a skipped row, not an exception. ``progress``: a tqdm bar
    on stderr; ``log``: called with one line per row (``print`` without a bar, ``tqdm.write``
    with one)."""
    judge = ModelEvaluator(ModelEvaluator(model, profile).bundle())
    shared = evaluator is None and measure and budget_s is not None     # the run's budget shared by its tasks
    if evaluator is None and measure and not shared:
        evaluator = MeasuredEvaluator(measure_profile, rounds=rounds, seed=seed, progress=False)
    spent = 0.0
    rows: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    bar = tqdm(total=len(tasks) * len(methods), disable=not progress, unit="plan", desc="benchmark")
    for done, (setting, task) in enumerate(tasks):
        k = index[setting] = index.get(setting, -1) + 1
        mine, plans = [], {}
        for m in methods:
            bar.set_postfix_str(f"{setting} task {k} {m}", refresh=False)
            try:
                plan = run_sharder(sharder_for(m, profile), task, seed=seed)
                sim = judge.evaluate(task, {m: plan})[m]
                plans[m] = plan
                mine.append({"setting": setting, "task": k, "method": m, "search_s": plan.search_seconds,
                             "simulated_ms": sim.cost_ms, "simulated_bound_ms": sim.lower_bound_ms,
                             "sim_source": sim.source, "simulated_per_device": [d.to_dict() for d in sim.per_device]})
            except ShardlabError as e:
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                mine.append({"setting": setting, "task": k, "method": m, "skipped": msg})
            bar.update(1)
        if plans:                             # each plan's own bound: the exact planner's where it applies
            bundle, record = judge.bundle(), exact_record(plans)
            rowwise = judge.rowwise_model(bundle)
            for r in mine:
                if r["method"] in plans:
                    bound, said = plan_bound(task, plans[r["method"]], record, bundle, rowwise)
                    r.update(simulated_bound_ms=bound, bound_source=said)
        if shared and plans:
            evaluator = MeasuredEvaluator(measure_profile, rounds=rounds, seed=seed, progress=False,
                                          budget_s=task_budget(budget_s, len(tasks), done, spent))
        if evaluator is not None and plans:   # every plan of a task in the same rounds, one bound for all
            fields = measured_fields(evaluator.evaluate(task, plans), baselines, seed)
            spent += float(getattr(evaluator, "seconds_", 0.0))
            for r in mine:
                r.update(fields.get(r["method"], {}))
        rows += mine
        if log:
            for r in mine:
                log(f"{setting} task {k} {r['method']}: " + _describe(r))
    bar.close()
    return rows


def measured_fields(evaluations: Mapping[str, Evaluation], baselines: Sequence[str] = BASELINE_METHODS,
                    seed: int = 0) -> dict[str, dict[str, Any]]:
    """The measured fields of each plan's row (module docstring) from one task's Evaluations
    (measured together, keyed by method): cost (median over rounds, ms), bound, source,
    per-device medians, rounds, interval, and ``measured_vs``: against every baseline among the
    keys (itself left out), the paired ratio, its interval and the verdict
    (:func:`~shardlab.evaluate.compare_to_reference`, bootstrap ``seed``; statistics only,
    nothing is measured again). Evaluations measured with a time budget (their comparisons say why
    they ``stopped``) keep their own comparison with the evaluator's reference alone, with the
    sittings and rounds it took: only it is judged by the sequential design."""
    listed = lambda v: None if v is None else [float(x) for x in v]  # noqa: E731
    budgeted = any(e.comparison is not None and e.comparison.stopped is not None for e in evaluations.values())
    vs = {} if budgeted else {b: compare_to_reference(evaluations, reference=b, seed=seed)
                              for b in baselines if b in evaluations}
    out = {}
    for m, ev in evaluations.items():
        out[m] = {"measured_ms": ev.cost_ms, "measured_bound_ms": ev.lower_bound_ms, "source": ev.source,
                  "measured_per_device": [d.to_dict() for d in ev.per_device],
                  "measured_rounds_ms": listed(ev.rounds_ms), "measured_ci95_ms": listed(ev.ci95_ms),
                  "measured_vs": {b: _paired(against[m]) for b, against in vs.items() if b != m}}
        c = ev.comparison
        if budgeted and c.reference != m:
            out[m]["measured_vs"] = {c.reference: {**_paired(ev), "sittings": len(ev.sittings),
                                                   "rounds": len(ev.rounds_ms), "stopped": c.stopped,
                                                   "confidence": c.confidence}}
    return out


def _paired(ev: Evaluation) -> dict[str, Any]:
    """A row's entry of ``measured_vs`` from an Evaluation compared to that baseline."""
    c = ev.comparison
    return {"ratio": c.ratio, "ratio_ci95": None if c.ratio_ci95 is None else list(c.ratio_ci95), "verdict": c.verdict,
            "equivalence_margin": c.margin}


def _describe(row: dict[str, Any]) -> str:
    """One log line's tail for a benchmark row: why it was skipped, or its costs and search time."""
    if "skipped" in row:
        return row["skipped"]
    ci = row.get("measured_ci95_ms")
    ci = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
    measured = f", measured {row['measured_ms']:.2f} ms{ci}" if "measured_ms" in row else ""
    return f"simulated {row['simulated_ms']:.2f} ms{measured}, search {row['search_s']:.3f} s"


def neuroshard_scaling(model: Any, sizes: Sequence[tuple[int, int]] = ((100, 8), (2000, 128)),
                       log: Callable[[str], None] | None = None, batch_size: int | None = None) -> dict[str, float]:
    """NeuroShard's search time (s) on tasks of N tables over G GPUs for each (N, G) in
    ``sizes``, tables from the whole ``dlrm-synth`` pool at dims 32, 64, 16 and 128, cap 16 GB:
    ``"<N>x<G> table-wise"`` and (N <= 1000 only) ``"<N>x<G> column-wise beam"``."""
    batch = batch_size or get_profile("cpu").batch_size
    pool = pool_tables("dlrm-synth", "all")
    variants = [t.with_dim(d, name=f"{t.name}@{d}") for d in (32, 64, 16, 128) for t in pool]
    out: dict[str, float] = {}
    for ntables, g in sizes:
        task = task_from_tables(variants[:ntables], g, 16.0, f"scale-{ntables}x{g}", batch_size=batch)
        for name, cw in (("table-wise", False), ("column-wise beam", True)):
            if ntables > 1000 and cw:
                continue
            t = time.perf_counter()
            NeuroShardSharder(model=model, columns=cw).shard(task)
            label = f"{ntables}x{g} {name}"
            out[label] = time.perf_counter() - t
            if log:
                log(f"neuroshard {label}: {out[label]:.2f} s")
    return out
