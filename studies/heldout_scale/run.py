#!/usr/bin/env python
"""NeuroShard against the best heuristic on held-out tasks of 100 to 500 tables at 8 GPUs, measured
in paired rounds on this machine; run it alone (it times).

    .venv/bin/python studies/heldout_scale/run.py [--rounds 6] [--sittings 2 | --budget 10m] [--sizes 100,115,150,230,460]
    .venv/bin/python studies/heldout_scale/run.py --report results/scale-<UTC>.jsonl.gz   # measures nothing

1. Builds the study's tasks (:func:`study_tasks`): the tables of the seven held-out-at-scale
   families (``datasets/heldout_scale/``, 115 tables of public configurations no design decision
   has seen) sharded together, :data:`SIZES` tables each over 8 GPUs of 4 GB, seeds drawn from
   :data:`STUDY_SEED`. A task larger than the union holds every table once and then copies of
   drawn tables (``union_task``: each copy's ``source`` says so, the task's name ends
   ``-augmented``). Rows are the configurations' own: the largest task holds under 1 GB of weights,
   so nothing is scaled or capped to fit this machine.
2. Plans each task with every method of :data:`METHODS` at its shipped ``cpu`` defaults (a method
   that refuses a task is recorded as skipped), timing each search (``search_seconds``, s).
3. Measures the task's plans together: ``MeasuredEvaluator("cpu", rounds, sittings, seed,
   reference=None)``: paired interleaved rounds, the best heuristic picked in a separate selection
   sitting and judged on the sittings after it, four verdicts with a 5% equivalence margin. With
   ``--budget`` (per task on average; the run's budget shared, what a task leaves going to the
   tasks after it: ``shardlab.evaluate.sequential.task_budget``) each task is measured within its share
   instead (``MeasuredEvaluator(budget_s=...)``: sittings added while a verdict is inconclusive,
   decided plans dropping out); the report gives
   each verdict's sittings and rounds, and an option variant is not judged against its method
   then (only comparisons with the reference are part of the sequential design).
4. Appends the task's record to ``results/scale-<UTC>.jsonl`` as soon as it is done and rewrites
   the ``.md`` beside it; every measurement is journalled as it is made (``.journal.jsonl``); both are
   stored gzipped (``.jsonl.gz``, the same lines) once the run has finished. A run
   never writes over an earlier one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from shardlab import constants as C  # noqa: E402
from shardlab.data.model_families import SCALE_FAMILY_SETS, union_task  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.evaluate import MeasuredEvaluator  # noqa: E402
from shardlab.evaluate.evaluation import Evaluation  # noqa: E402
from shardlab.evaluate.reference import compare_to_reference  # noqa: E402
from shardlab.measure.hardware import environment, get_profile  # noqa: E402
from shardlab.search import method_list, run_sharder, sharder_for  # noqa: E402
from shardlab.cli.arguments import duration  # noqa: E402
from shardlab.evaluate.sequential import task_budget  # noqa: E402
from studies.common.records import (add_run_options, budget_settings, measure_run, new_run,  # noqa: E402
                                    run_or_report, took)

RESULTS = Path(__file__).resolve().parent / "results"
PROFILE = "cpu"

#: The baselines (the five heuristics and TorchRec's planner: the best of them, measured, is the
#: reference) and NeuroShard at its defaults and with the original authors' greedy rule. The first
#: run (2026-11-27) had the heuristics and NeuroShard only; each run's header names its methods.
METHODS = C.BASELINE_METHODS + ("neuroshard", "neuroshard[greedy_rule=before]")

#: Tables per task (the union holds 115; larger tasks add labelled copies), GPUs and GB per GPU.
SIZES, NGPU, MEM_CAP_GB = (100, 115, 150, 230, 460), 8, 4.0

#: Seed the task seeds are drawn from (a new draw of tasks needs a new seed).
STUDY_SEED = 20261127

OUTCOMES = ("faster", "equivalent", "slower", "inconclusive", "skipped")


def variant_pairs(methods: Sequence[str]) -> list[tuple[str, str]]:
    """(variant, default) for every method spec with options (``dreamshard[model=x.pt]``) run
    beside the same method at its defaults (``dreamshard``): the pairs judged against each other
    in the same rounds, in the order of ``methods``."""
    return [(m, m.split("[", 1)[0]) for m in methods if "[" in m and m.split("[", 1)[0] in methods]


def study_tasks(sizes: Sequence[int] = SIZES) -> list[tuple[int, Any]]:
    """(seed, task) per size: seeds drawn from :data:`STUDY_SEED` in [1,000,000, 2**31 - 1)."""
    seeds = np.random.default_rng(STUDY_SEED).integers(1_000_000, 2**31 - 1, len(SIZES))     # one per size, always
    return [(int(s), union_task(SCALE_FAMILY_SETS, NGPU, MEM_CAP_GB, n, seed=int(s)))
            for n, s in zip(SIZES, seeds) if n in sizes]


def measure_task(task: Any, methods: Sequence[str], rounds: int, sittings: int, seed: int,
                 journal: str | None = None, budget_s: float | None = None) -> dict[str, Any]:
    """One task's record: plans with their search seconds, skips, Evaluations against the best
    heuristic (``sittings`` sittings, or within ``budget_s`` seconds); every measurement is
    appended to ``journal`` as it is made."""
    plans, skipped, seconds = {}, {}, {}
    for m in methods:
        start = time.perf_counter()
        try:
            plans[m] = run_sharder(sharder_for(m, PROFILE), task, seed)
            seconds[m] = round(time.perf_counter() - start, 3)
        except ShardlabError as e:
            skipped[m] = str(e)
    how = {"sittings": sittings} if budget_s is None else {"budget_s": budget_s}
    judge = MeasuredEvaluator(get_profile(PROFILE), rounds=rounds, seed=seed, reference=None, lower_bound=False,
                              progress=False, journal=journal, **how)
    evs = judge.evaluate(task, plans)
    return {"kind": "task", "measured_seconds": float(getattr(judge, "seconds_", 0.0)), **how, "seed": seed, "task": task.to_dict(),
            "copies": sum((t.source or "").startswith("augmented:") for t in task.tables),
            "weights_gb": sum(t.rows * t.dim * 4 for t in task.tables) / 2**30,
            "plans": {m: p.to_dict() for m, p in plans.items()}, "search_seconds": seconds, "skipped": skipped,
            "evaluations": {m: e.to_dict() for m, e in evs.items()}}


def verdict(rec: Mapping[str, Any], method: str, against: str | None = None) -> tuple[str, float | None, Any]:
    """(outcome of :data:`OUTCOMES` or 'reference', ratio to the best baseline -- or to method
    ``against``, paired in the same rounds --, its 95% interval)."""
    if method in rec["skipped"] or method not in rec["evaluations"]:
        return "skipped", None, None
    if against is not None:
        if against in rec["skipped"] or against not in rec["evaluations"]:
            return "skipped", None, None
        evs = {m: Evaluation.from_dict(e) for m, e in rec["evaluations"].items()}
        comp = compare_to_reference(evs, against, rec["seed"], rec.get("margin", C.EQUIVALENCE_MARGIN))[method].comparison
    else:
        comp = Evaluation.from_dict(rec["evaluations"][method]).comparison
    if comp is None:
        return "inconclusive", None, None
    if comp.reference == method:
        return "reference", 1.0, None
    return comp.verdict or "inconclusive", comp.ratio, comp.ratio_ci95


def outside_range(rec: Mapping[str, Any], method: str = "neuroshard") -> str:
    """What the plan's metadata says its cost model costed outside its valid range ('-' if nothing)."""
    said = rec["plans"].get(method, {}).get("metadata", {}).get("valid_range")
    if not said:
        return "-"
    parts = [f"compute of {said['compute_devices']} of {said['ngpu']} devices"] if said.get("compute_devices") else []
    parts += ["all-to-alls"] if said.get("comm") else []
    return ", ".join(parts) or "-"


def report(header: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    """The run's markdown: each judged method's outcomes against the best baseline (and each
    option variant against its method at defaults, :func:`variant_pairs`), then every task."""
    s = header["settings"]
    budget = s.get("budget_s")
    judged = [m for m in s["methods"] if m not in C.BASELINE_METHODS]
    lines = [f"# NeuroShard on held-out tasks at scale, measured: run `{header['run']}`", "",
             f"{len(records)} of {len(s['sizes'])} tasks over the {len(s['sets'])} held-out-at-scale families "
             f"(`datasets/heldout_scale/`), {s['ngpu']} GPUs x {s['mem_cap_gb']:g} GB, profile `{header['profile']}`, "
             + (f"{s['rounds']} paired rounds x {s['sittings']} sittings" if budget is None else
                f"a time budget of {budget:g} s per task on average ({s.get('sharing') or 'each task its own'}; sittings of {s['rounds']} rounds added while a verdict is "
                "inconclusive; each verdict gives the sittings and rounds it took)")
             + f", equivalence margin {s['margin']:.0%}. "
             "The reference is the best baseline among the methods run, picked by the evaluator in a separate "
             "selection sitting. Rows are the configurations' own (nothing scaled or capped); tasks over 115 "
             "tables add labelled copies (`copies`).", "",
             "| vs best baseline | " + " | ".join(OUTCOMES) + " | reference |",
             "| --- | " + " | ".join("---:" for _ in OUTCOMES) + " | ---: |"]
    for m in judged:
        said = [verdict(r, m)[0] for r in records]
        lines.append(f"| `{m}` | " + " | ".join(str(said.count(v)) for v in OUTCOMES) + f" | {said.count('reference')} |")
    pairs = variant_pairs(s["methods"]) if budget is None else []
    for variant, default in pairs:
        said = [verdict(r, variant, default)[0] for r in records]
        lines.append(f"| `{variant}` vs `{default}` | " + " | ".join(str(said.count(v)) for v in OUTCOMES) + " | - |")
    lines += ["", "## Tasks", "",
              "| task | tables | copies | best baseline | " + " | ".join(f"`{m}` / best [95%], verdict" for m in judged)
              + "".join(f" | `{v}` / `{d}` [95%], verdict" for v, d in pairs) + " | NeuroShard's choice | search s | "
              "costed outside the model's valid range |",
              "| --- | ---: | ---: | --- | " + " | ".join("---" for _ in judged) + " | ---" * len(pairs)
              + " | --- | ---: | --- |"]

    def cell(v: tuple, ev: Mapping[str, Any] | None = None) -> str:
        out, ratio, ci = v
        return out if ratio is None else (f"{ratio:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "") + f", {out}"
                                          + (f" ({took(ev)})" if budget is not None and ev else ""))

    for r in records:
        best = next((e["reference"] for e in r["evaluations"].values() if e.get("reference")), "-")
        cells = ([cell(verdict(r, m), r["evaluations"].get(m)) for m in judged]
                 + [cell(verdict(r, v, d)) for v, d in pairs])
        meta = r["plans"].get("neuroshard", {}).get("metadata", {})
        choice = meta.get("portfolio", {}).get("chosen", "-")
        cal = meta.get("task_calibration")
        if cal:
            choice += "; calibrated" if cal.get("applied") else "; not calibrated"
        lines.append(f"| `{r['task']['name']}` | {len(r['task']['tables'])} | {r['copies']} | `{best}` | "
                     + " | ".join(cells) + f" | {choice} | {r['search_seconds'].get('neuroshard', float('nan')):.2f} | {outside_range(r)} |")
    lines += ["", "Measured costs (median ms over the judged rounds) per method:", "",
              "| task | " + " | ".join(f"`{m}`" for m in s["methods"]) + " |",
              "| --- | " + " | ".join("---:" for _ in s["methods"]) + " |"]
    for r in records:
        cells = [f"{r['evaluations'][m]['cost_ms']:.2f}" if m in r["evaluations"] else "skipped" for m in s["methods"]]
        lines.append(f"| `{r['task']['name']}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run(rounds: int, sittings: int, out: Path, sizes: Sequence[int] = SIZES, progress: bool = True,
        methods: Sequence[str] = METHODS, budget_s: float | None = None) -> Path:
    """Measure the study's tasks (module docstring; ``budget_s``: seconds per task instead of
    ``sittings``); returns the run's packed ``.jsonl.gz`` path."""
    run_id, jsonl = new_run(out, "scale-")
    header = {"kind": "header", "run": run_id, "profile": PROFILE, "environment": environment("cpu"),
              "settings": {"methods": list(methods), "sets": list(SCALE_FAMILY_SETS), "sizes": list(sizes),
                           "ngpu": NGPU, "mem_cap_gb": MEM_CAP_GB, "study_seed": STUDY_SEED, "rounds": rounds,
                           "sittings": sittings if budget_s is None else None, "margin": C.EQUIVALENCE_MARGIN,
                           **budget_settings(budget_s)}}
    tasks = study_tasks(sizes)
    journal = str(out / f"{run_id}.journal.jsonl")
    spent = [0.0]                         # measuring seconds so far: what a budget leaves the tasks after

    def measure(done: int, item: tuple[int, Any]) -> dict[str, Any]:
        seed, task = item
        rec = measure_task(task, methods, rounds, sittings, seed, journal=journal,
                           budget_s=task_budget(budget_s, len(tasks), done, spent[0]))
        spent[0] += rec["measured_seconds"]
        return rec

    return measure_run(jsonl, header, tasks, measure, report, "held-out tasks at scale", progress)

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(ap, rounds=6, results=RESULTS)
    ap.add_argument("--budget", type=duration, default=None, metavar="DURATION",
                    help="measure with a time budget of this much per task on average (90s, 10m; the time a "
                         "task leaves goes to the tasks after it) instead of --sittings")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="tables per task, comma-separated (default all)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="method specs, comma-separated (default: the baselines, neuroshard and its 'before' rule)")
    args = ap.parse_args(argv)

    def measured() -> Path:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
        if not sizes or any(x not in SIZES for x in sizes):
            raise ShardlabError(f"field 'sizes' = {args.sizes!r} must name sizes of {SIZES}")
        methods = method_list(args.methods)
        if not set(C.BASELINE_METHODS) <= set(methods):
            raise ShardlabError(f"field 'methods' must include every baseline ({', '.join(C.BASELINE_METHODS)})")
        return run(args.rounds, args.sittings, Path(args.out), sizes, methods=tuple(methods), budget_s=args.budget)

    return run_or_report(args, report, measured)

if __name__ == "__main__":
    raise SystemExit(main())
