"""Search benchmark: every sharder on held-out tasks at a few settings, judged by one cost model
(simulated costs, labelled with the model's ``source``) and, optionally, measured on this
machine; ratio to the lower bound, win rates against each baseline, and search time.

A *setting* is named ``"<G>x<N>"`` or ``"<G>x<LO>-<HI>"``: G GPUs and N tables, or a number of
tables drawn uniformly from [LO, HI] per task. A *row* is one (task, method) pair::

    {"setting", "task" (index within the setting), "method", "search_s" (s), "simulated_ms",
     "simulated_bound_ms", "sim_source", "simulated_per_device" (one dict per GPU, ms and GB),
     ["measured_ms", "measured_bound_ms", "source", "measured_per_device"]}   # with measure=True

or, where the method raised :class:`~shardlab.errors.ShardlabError` on that task,
``{"setting", "task", "method", "skipped": "<the error's one line>"}``.

``scripts/bench_search.py`` (-> ``reports/search_benchmark.{json,md}``) and
``notebooks/benchmark.ipynb`` are thin wrappers around this module; the figures and the HTML
page are in :mod:`shardlab.report.benchmark_figures`.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from shardlab.data.tasks import generate_task, pool_tables, task_from_tables
from shardlab.errors import ShardlabError
from shardlab.io import names_list
from shardlab.evaluate import estimate_plan, measure_plans
from shardlab.profile.hardware import get_profile
from shardlab.search import get_sharder, run_sharder
from shardlab.tables import Task

SETTING_NAMES = ("4x10-60", "4x50", "8x80")
HEURISTICS = ["random", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy"]
METHODS = HEURISTICS + ["torchrec", "neuroshard_tw", "neuroshard", "dreamshard", "autoshard"]
BASELINES = HEURISTICS + ["torchrec"]
MEM_CAP_GB = 4.0
TASK_SEED_BASE = 1000

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
    seed])`` (the k-th draw; for seed 0 these are the draws ``scripts/bench_search.py`` always
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
                  progress: bool = True, seed: int = 0, profile: str = "cpu",
                  log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Run every method on every task (sharder seed ``seed``) and judge each plan with
    ``model`` (a cost-model bundle: :func:`~shardlab.costmodel.bundle.load_bundle`); with
    ``measure`` also measure it on this machine (``profile``; slow: real fused fbgemm ops, G
    gloo ranks and one measured lower bound per task: :func:`~shardlab.evaluate.measure_plans`).
    Returns one row per (task, method), in task then method order (module docstring); costs in ms, search time in s. A method raising
    :class:`ShardlabError` (infeasible, unsupported blocks, torchrec missing) gives a skipped
    row, not an exception. ``progress``: a tqdm bar on stderr; ``log``: called with one line
    per row (``print`` without a bar, ``tqdm.write`` with one)."""
    from tqdm import tqdm

    prof = get_profile(profile)
    rows: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    bar = tqdm(total=len(tasks) * len(methods), disable=not progress, unit="plan", desc="benchmark")
    for setting, task in tasks:
        k = index[setting] = index.get(setting, -1) + 1
        mine, plans = [], {}
        for m in methods:
            bar.set_postfix_str(f"{setting} task {k} {m}", refresh=False)
            try:
                plan = run_sharder(get_sharder(m), task, seed=seed)
                sim = estimate_plan(task, plan, model)
                plans[m] = plan
                mine.append({"setting": setting, "task": k, "method": m, "search_s": plan.search_seconds,
                             "simulated_ms": sim.cost_ms, "simulated_bound_ms": sim.lower_bound_ms,
                             "sim_source": sim.source, "simulated_per_device": [d.to_dict() for d in sim.per_device]})
            except ShardlabError as e:
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                mine.append({"setting": setting, "task": k, "method": m, "skipped": msg})
            bar.update(1)
        if measure and plans:   # G ranks started once per task and one measured bound for all its plans
            evs = measure_plans(task, plans, prof, progress=False)
            for r in mine:
                if r["method"] in evs:
                    ev = evs[r["method"]]
                    r.update(measured_ms=ev.cost_ms, measured_bound_ms=ev.lower_bound_ms, source=ev.source,
                             measured_per_device=[d.to_dict() for d in ev.per_device])
        rows += mine
        if log:
            for r in mine:
                log(f"{setting} task {k} {r['method']}: " + _describe(r))
    bar.close()
    return rows


def _describe(row: dict[str, Any]) -> str:
    """One log line's tail for a benchmark row: why it was skipped, or its costs and search time."""
    if "skipped" in row:
        return row["skipped"]
    measured = f", measured {row['measured_ms']:.2f} ms" if "measured_ms" in row else ""
    return f"simulated {row['simulated_ms']:.2f} ms{measured}, search {row['search_s']:.3f} s"


def bound_key(key: str) -> str:
    """The lower-bound field (ms) that goes with a cost field: ``measured_ms`` ->
    ``measured_bound_ms``, anything else -> ``simulated_bound_ms``."""
    return "measured_bound_ms" if key == "measured_ms" else "simulated_bound_ms"


def done(rows: Iterable[dict[str, Any]], key: str = "simulated_ms") -> list[dict[str, Any]]:
    """The rows that have a cost under ``key`` (skipped rows and unmeasured ones left out)."""
    return [r for r in rows if "skipped" not in r and r.get(key) is not None]


def settings_of(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Setting names in order of first appearance."""
    return list(dict.fromkeys(r["setting"] for r in rows))


def ratio(row: dict[str, Any], key: str = "simulated_ms") -> float:
    """A row's cost / lower bound (dimensionless); nan where there is no bound."""
    b = row.get(bound_key(key))
    return row[key] / b if b else float("nan")


def summarise(rows: Sequence[dict[str, Any]], methods: Sequence[str], key: str = "simulated_ms",
              baselines: Sequence[str] = BASELINES) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (setting, method), in setting then ``methods`` order: ``cost_ms`` (mean cost under
    ``key``, ms), ``ratio_to_bound`` (mean over tasks of cost / bound; nan without bounds),
    ``search_s`` (mean search time, s) and ``wins``: baseline -> fraction (in [0, 1]) of the tasks
    both solved on which the method is strictly cheaper (a method is never compared with itself).
    Skipped rows are left out; a method with no row in a setting has no entry."""
    ok = done(rows, key)
    out = {}
    for setting in settings_of(rows):
        by_method = {m: {r["task"]: r for r in ok if r["setting"] == setting and r["method"] == m}
                     for m in dict.fromkeys([*methods, *baselines])}
        for m in methods:
            mine = by_method[m]
            if not mine:
                continue
            wins = {}
            for b in baselines:
                theirs = by_method[b]
                common = sorted(set(mine) & set(theirs))
                if common and b != m:
                    wins[b] = float(np.mean([mine[t][key] < theirs[t][key] for t in common]))
            ratios = [r[key] / r[bound_key(key)] for r in mine.values() if r.get(bound_key(key))]
            out[(setting, m)] = {"cost_ms": float(np.mean([r[key] for r in mine.values()])),
                                 "ratio_to_bound": float(np.mean(ratios)) if ratios else float("nan"),
                                 "search_s": float(np.mean([r["search_s"] for r in mine.values()])), "wins": wins}
    return out


def summary_rows(rows: Sequence[dict[str, Any]], methods: Sequence[str], key: str = "simulated_ms",
                 baselines: Sequence[str] = BASELINES) -> list[dict[str, Any]]:
    """:func:`summarise` as table rows (one per setting and method, rounded; methods skipped on
    every task of a setting appear with their count of skips): setting, method, tasks,
    skipped, mean cost (ms), mean cost / lower bound, mean search (s), wins vs each baseline."""
    sm = summarise(rows, methods, key, baselines)
    out = []
    for setting in settings_of(rows):
        for m in methods:
            here = [r for r in rows if r["setting"] == setting and r["method"] == m]
            if not here:
                continue
            s = sm.get((setting, m))
            row = {"setting": setting, "method": m, "tasks": len(done(here, key)),
                   "skipped": sum("skipped" in r for r in here),
                   "mean cost (ms)": _round(s and s["cost_ms"], 2),
                   "mean cost / lower bound": _round(s and s["ratio_to_bound"], 3),
                   "mean search (s)": _round(s and s["search_s"], 4)}
            for b in baselines:
                row[f"wins vs {b}"] = _round(s["wins"].get(b) if s else None, 2)
            out.append(row)
    return out


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), digits)


def skipped(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The skipped rows (setting, task, method, skipped = the error's message)."""
    return [r for r in rows if "skipped" in r]


def neuroshard_scaling(model: Any, sizes: Sequence[tuple[int, int]] = ((100, 8), (2000, 128)),
                       log: Callable[[str], None] | None = None, batch_size: int | None = None) -> dict[str, float]:
    """NeuroShard's search time (s) on tasks of N tables over G GPUs for each (N, G) in
    ``sizes``, tables from the whole ``dlrm-synth`` pool at dims 32, 64, 16 and 128, cap 16 GB:
    ``"<N>x<G> table-wise"`` and (N <= 1000 only) ``"<N>x<G> column-wise beam"``."""
    from shardlab.search.neuroshard import NeuroShardSharder

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
            NeuroShardSharder(model=model, column_wise=cw).shard(task)
            label = f"{ntables}x{g} {name}"
            out[label] = time.perf_counter() - t
            if log:
                log(f"neuroshard {label}: {out[label]:.2f} s")
    return out


def markdown_report(report: Mapping[str, Any], tasks_per_setting: int, baselines: Sequence[str] = BASELINES) -> str:
    """``reports/search_benchmark.md`` from the JSON report ``scripts/bench_search.py`` writes
    (date, environment, profile, judge, summary per cost key, neuroshard_search_seconds)."""
    prof = report["profile"]
    lines = ["# Search benchmark", "", f"{report['date']}; {report['environment']['hardware']}; profile cpu "
             f"(batch {prof['batch_size']}); {tasks_per_setting} held-out tasks (pool test tables) per setting; "
             "memory cap 4 GB.",
             f"Simulated: every plan through one cost model ({report['judge']}; its lower bound is the model's, "
             "chunked by 15 tables). Measured: fused fbgemm ops per device in turn and gloo all-to-alls between G "
             "real ranks on this machine, waiting included; measured lower bound = all tables fused / G + balanced "
             "all-to-all (not a guarantee on CPU: datasets/cpu/NOTES.md); nan where all tables together exceed the "
             "compute profiler's 8 GB limit, so the bound cannot be measured. `wins vs X`: fraction of tasks "
             "strictly cheaper than X.", ""]
    for key, sm in report["summary"].items():
        lines += [f"## {key.split('_')[0]} costs", "",
                  "| setting | method | mean cost (ms) | mean cost / lower bound | mean search (s) | "
                  + " | ".join(f"wins vs {b}" for b in baselines) + " |", "|---" * (5 + len(baselines)) + "|"]
        for label, s in sm.items():
            setting, m = label.rsplit(" ", 1)
            lines.append(f"| {setting} | {m} | {s['cost_ms']:.2f} | {s['ratio_to_bound']:.3f} | {s['search_s']:.3f} | "
                         + " | ".join(f"{s['wins'].get(b, float('nan')):.2f}" for b in baselines) + " |")
        lines.append("")
    scale = report["neuroshard_search_seconds"]
    lines += ["", "NeuroShard search time: " + ", ".join(f"{k}: {v:.2f} s" for k, v in scale.items())]
    return "\n".join(lines) + "\n"
