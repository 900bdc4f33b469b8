#!/usr/bin/env python
"""Write results/ranking.{json,md}: how well each shipped cpu cost model ranks the plans of
every committed measured comparison of several plans (nothing is measured; committed records
are read).

Per task: every measured plan re-predicted with the model (the model evaluator,
:class:`~shardlab.evaluate.ModelEvaluator`, with the profile's shipped row-wise comm model), then
:func:`~shardlab.evaluate.ranking.ranking_quality` against the task's measured Evaluations:
Kendall's tau-b of predicted vs measured plan cost, the share of decisively measured pairs
(``faster``/``slower`` from the paired rounds, margin ``constants.EQUIVALENCE_MARGIN``) the
model orders right, and the plan-cost relative error. Per model and source: median tau over
tasks, the decisive pairs pooled over tasks, and the median plan-cost error over plans.

    .venv/bin/python studies/cost_models/ranking.py [--sources ...] [--models ...] [--max-tasks N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.data.hardware_profiles import profile_folder  # noqa: E402
from shardlab.costmodel.bundle import load_bundle, shipped_bundles  # noqa: E402
from shardlab.costmodel.task_calibration import replay_calibration  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.evaluate import Evaluation, ModelEvaluator  # noqa: E402
from shardlab.evaluate.ranking import pair_verdicts, ranking_quality  # noqa: E402
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from shardlab.measure.store import load_measured  # noqa: E402
from shardlab.tables import Task  # noqa: E402
from studies.common.records import read_run, run_name, run_paths  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PROFILE = "cpu"
COMMAND = ".venv/bin/python studies/cost_models/ranking.py"

#: Targets: median tau over tasks, share of decisive pairs ordered right, median plan-cost error.
TARGETS = {"kendall_tau_median": 0.8, "decisive_share": 0.9, "plan_cost_error_median": 0.08}

#: Committed records read, by source name: (kind, where), relative to the repository root; for
#: ``runs``, ``where`` is a results folder and a run-name prefix (``.jsonl`` or packed ``.jsonl.gz``).
SOURCES = {
    "cpu_heldout": ("dataset", "cpu_heldout"),
    "cpu_heldout_v2": ("dataset", "cpu_heldout_v2"),
    "cpu_heldout_verify": ("dataset", "cpu_heldout_verify"),
    "heldout_scale": ("runs", "studies/heldout_scale/results/scale-"),
    "sealed_1": ("runs", "studies/sealed_test/results/sealed-20261128T002408"),
    "sealed_1_again": ("runs", "studies/set1_development/results/set1-"),
    "oversized": ("runs", "studies/oversized/results/oversized-"),
    "sitting_agreement": ("sittings", "studies/sitting_agreement/results"),
}

#: Earlier campaigns not ranked here, and why.
SKIPPED = {
    "studies/heldout_search/results": "summaries (verdicts, model errors) of the measurements held in datasets/"
                                      "cpu_heldout, cpu_heldout_v2 and cpu_heldout_verify, ranked here from those "
                                      "datasets; verify_heldout.json holds costs and intervals but no placements "
                                      "and no rounds",
    "studies/row_wise/results": "row_wise*.json name their tasks and row layouts but hold no Task JSON and no plan "
                                "placements; row_wise_comm_search.json holds plans but tasks by name only (two "
                                "plans each): no plan can be re-predicted without re-deriving its task",
}

#: A measured comparison: (source, task id, Task, name -> Plan, name -> measured Evaluation, note).
Comparison = tuple[str, str, Task, dict[str, Plan], dict[str, Evaluation], str]


def _paired(task_id: str, plans: dict[str, Any], evaluations: dict[str, Any]) -> tuple[dict, dict]:
    """Plans and Evaluations of the methods that have both and were measured in rounds."""
    names = [m for m in evaluations if m in plans and evaluations[m].get("rounds_ms")]
    return ({m: Plan.from_dict(plans[m]) for m in names}, {m: Evaluation.from_dict(evaluations[m]) for m in names})


def _from_dataset(source: str, name: str) -> Iterator[Comparison]:
    for s in load_measured("heldout_plan", name):
        plans, evs = _paired(s["key"], s["plans"], s["evaluations"])
        yield source, f"{s['set']}/{s['index']}", Task.from_dict(s["task"]), plans, evs, ""


def _from_runs(source: str, where: str) -> Iterator[Comparison]:
    folder, _, prefix = where.rpartition("/")
    paths = run_paths(ROOT / folder, prefix)
    for path in paths:
        header, records = read_run(path)
        run = header.get("run", run_name(path))
        for r in records:
            task = Task.from_dict(r["task"])
            plans, evs = _paired(task.name, r["plans"], r["evaluations"])
            yield source, f"{run}/{task.name}" if len(paths) > 1 else task.name, task, plans, evs, ""


def _from_sittings(source: str, folder: str) -> Iterator[Comparison]:
    """The sitting-agreement tasks (``comparisons.json``), each plan's rounds grouped by the
    sittings (``sitting-*.json``) that measured every plan of the task."""
    root = ROOT / folder
    drawn = json.loads((root / "comparisons.json").read_text())
    measured: dict[str, list[dict]] = {}
    for path in sorted(root.glob("sitting-*.json")):
        for line in path.read_text().splitlines()[1:]:
            row = json.loads(line)
            measured.setdefault(row["task"], []).append(row["evaluations"])
    for entry in drawn["tasks"]:
        task = Task.from_dict(entry["task"])
        sittings = [s for s in measured.get(task.name, []) if set(entry["plans"]) <= set(s)]
        if not sittings:
            continue
        evs = {}
        for m in entry["plans"]:
            parts = [Evaluation.from_dict(s[m]) for s in sittings]
            rounds = tuple(x for p in parts for x in p.rounds_ms)
            evs[m] = replace(parts[0], rounds_ms=rounds, sittings_ms=tuple(p.rounds_ms for p in parts)
                             if len(parts) > 1 else None, ci95_ms=None, comparison=None)
        plans = {m: Plan.from_dict(p) for m, p in entry["plans"].items()}
        yield source, task.name, task, plans, evs, f"{len(sittings)} sittings"


def comparisons(sources: list[str], max_tasks: int | None = None) -> Iterator[Comparison]:
    """Every measured comparison of two or more plans of the named sources, in a fixed order."""
    readers = {"dataset": _from_dataset, "runs": _from_runs, "sittings": _from_sittings}
    for name in sources:
        kind, where = SOURCES[name]
        n = 0
        for c in readers[kind](name, where):
            if len(c[4]) < 2:
                continue
            if max_tasks is not None and n >= max_tasks:
                break
            n += 1
            yield c


def _batch(source: str) -> int | None:
    """The batch size a measured ``source`` names (``measured:cpu[batch_size=1024,...]``), or None."""
    if "batch_size=" not in source:
        return None
    return int(source.split("batch_size=", 1)[1].split(",")[0].split("]")[0])


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and np.isfinite(x)]
    return float(np.median(xs)) if xs else None


def _finite(x: float) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


#: The row of the measurement against itself (:func:`split_halves`), beside the models' rows.
SELF = "measurement, split in halves"


def split_halves(evs: dict[str, Evaluation]) -> tuple[dict[str, float], dict[str, float], str] | None:
    """Each plan's measured cost (ms, median) in two halves of the task's rounds -- by sitting
    (even-numbered against odd-numbered sittings) where every plan has the same two or more
    sittings, else even-numbered against odd-numbered rounds -- and which split was used; None
    below 2 rounds a half. The halves are paired: a round index is the same round for every plan."""
    sittings = {k: e.sittings for k, e in evs.items()}
    counts = {len(v) for v in sittings.values()}
    if counts == {c for c in counts if c >= 2} and len(counts) == 1:
        halves = [{k: [x for i, sit in enumerate(v) if i % 2 == h for x in sit] for k, v in sittings.items()}
                  for h in (0, 1)]
        how = "sittings"
    else:
        halves = [{k: list(e.rounds_ms or ())[h::2] for k, e in evs.items()} for h in (0, 1)]
        how = "rounds"
    if any(len(r) < 2 for half in halves for r in half.values()):
        return None
    a, b = ({k: float(np.median(r)) for k, r in half.items()} for half in halves)
    return a, b, how


def self_row(evs: dict[str, Evaluation], verdicts: dict, seed: int) -> dict[str, Any] | None:
    """The measurement's agreement with itself, in a model row's fields: one half's costs
    (:func:`split_halves`) ranked against the other half's as if they were a model's prediction
    -- tau, decisive pairs (verdicts from all rounds) -- and each plan's relative difference
    between the halves as its cost error. None where the rounds do not split."""
    split = split_halves(evs)
    if split is None:
        return None
    a, b, how = split
    halves = {k: replace(e, rounds_ms=(b[k],), sittings_ms=None) for k, e in evs.items()}
    q = ranking_quality(a, halves, verdicts, seed)
    errs = [abs(a[k] - b[k]) / b[k] for k in evs if b[k] > 0]
    return {"n_plans": q["n_plans"], "kendall_tau": _finite(q["kendall_tau"]),
            "decisive_pairs": q["decisive_pairs"], "decisive_right": q["decisive_right"],
            "decisive_share": _finite(q["decisive_share"]),
            "plan_cost_error_median": _median(errs), "plan_errors": errs, "split": how}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-task rows of one model (and source) summed up: tasks, plans, median tau, decisive
    pairs pooled and their median share per task, median plan-cost error over plans (None where
    the measurement's batch differs from the model's)."""
    decisive = sum(r["decisive_pairs"] for r in rows)
    right = sum(r["decisive_right"] for r in rows)
    errors = [e for r in rows for e in (r["plan_errors"] or [])]
    return {"tasks": len(rows), "plans": sum(r["n_plans"] for r in rows),
            "kendall_tau_median": _median([r["kendall_tau"] for r in rows]),
            "decisive_pairs": decisive, "decisive_right": right,
            "decisive_share": right / decisive if decisive else None,
            "decisive_share_median": _median([r["decisive_share"] for r in rows]),
            "plan_cost_error_median": _median(errors) if errors else None,
            "plan_errors_comparable": all(r["plan_errors"] is not None for r in rows)}


#: Row-name suffixes of a model re-costed with the task calibration a plan of the task recorded
#: (:func:`~shardlab.costmodel.task_calibration.replay_calibration`), and of the same model,
#: uncalibrated, on the same tasks.
CALIBRATED, SAME_TASKS = " + task calibration", " on those tasks, uncalibrated"


def calibration_record(plans: dict[str, Plan]) -> dict[str, Any] | None:
    """The first ``metadata.task_calibration`` record with measured ops among ``plans`` (the
    measurements NeuroShard made of the task's tables before its search), or None."""
    for p in plans.values():
        rec = (p.metadata or {}).get("task_calibration")
        if isinstance(rec, dict) and rec.get("ops"):
            return rec
    return None


def score(ev: ModelEvaluator, task: Task, plans: dict[str, Plan], evs: dict[str, Evaluation], verdicts: dict,
          seed: int, comparable: bool) -> dict[str, Any]:
    """One model's row for one task: ranking quality and each plan's cost error (None where the
    measurement ran at another batch than the model's)."""
    pred = {k: e.cost_ms for k, e in ev.evaluate(task, plans).items()}
    q = ranking_quality(pred, evs, verdicts, seed)
    errs = [abs(pred[k] - e.cost_ms) / e.cost_ms for k, e in evs.items()] if comparable else None
    return {"n_plans": q["n_plans"], "kendall_tau": _finite(q["kendall_tau"]),
            "decisive_pairs": q["decisive_pairs"], "decisive_right": q["decisive_right"],
            "decisive_share": _finite(q["decisive_share"]),
            "plan_cost_error_median": _finite(q["plan_cost_error_median"]) if comparable else None,
            "plan_errors": errs}


def run(sources: list[str], models: list[str], max_tasks: int | None = None, seed: int = 0,
        calibrated: tuple[str, ...] = ()) -> dict[str, Any]:
    """Rank every source's measured plans with every model, and each model of ``calibrated``
    also re-costed with the task calibration a plan of the task recorded; the report's JSON
    (module docstring)."""
    bundles = {m: load_bundle(m, PROFILE) for m in dict.fromkeys([*models, *calibrated])}
    evaluators = {m: ModelEvaluator(bundles[m], PROFILE, lower_bound=False) for m in models}
    model_batch = {m: (getattr(b.compute, "profile_", None) or {}).get("batch_size") for m, b in bundles.items()}
    names = [*models, *(m + x for m in calibrated for x in (CALIBRATED, SAME_TASKS)), SELF]
    tasks, rows = [], {m: {s: [] for s in sources} for m in names}
    for source, task_id, task, plans, evs, note in comparisons(sources, max_tasks):
        verdicts = pair_verdicts(evs, seed)
        measured_batch = _batch(next(iter(evs.values())).source)
        entry = {"source": source, "task": task_id, "tables": len(task.tables), "ngpu": task.ngpu,
                 "plans": list(evs), "note": note, "measured_batch": measured_batch,
                 "verdicts": {v or "none": list(verdicts.values()).count(v) for v in dict.fromkeys(verdicts.values())},
                 "models": {}}
        got = {}
        for m, ev in evaluators.items():
            got[m] = score(ev, task, plans, evs, verdicts, seed, measured_batch in (None, model_batch[m]))
        record = calibration_record(plans)
        for m in calibrated if record is not None else ():
            fitted, rec = replay_calibration(bundles[m], task, record)
            comparable = measured_batch in (None, model_batch[m])
            got[m + CALIBRATED] = {**score(ModelEvaluator(fitted, PROFILE, lower_bound=False), task, plans, evs,
                                          verdicts, seed, comparable), "applied": rec["applied"]}
            got[m + SAME_TASKS] = got.get(m) or score(ModelEvaluator(bundles[m], PROFILE, lower_bound=False), task,
                                                      plans, evs, verdicts, seed, comparable)
        own = self_row(evs, verdicts, seed)
        if own is not None:
            got[SELF] = own
        for m, row in got.items():
            rows[m][source].append(row)
            entry["models"][m] = {k: v for k, v in row.items() if k != "plan_errors"}
        tasks.append(entry)
    summary = {m: {**{s: summarize(r) for s, r in by.items() if r},
                   "all": summarize([x for r in by.values() for x in r])} for m, by in rows.items()}
    return {"profile": PROFILE, "models": {**{m: bundles[m].source for m in models},
                                           **{m + CALIBRATED: bundles[m].source + ", corrected on the task's own "
                                              "measured tables (the record of the task's NeuroShard plan)"
                                              for m in calibrated},
                                           SELF: "each task's measured rounds: one half against the other"},
            "model_batch": model_batch,
            "sources": {s: SOURCES[s][1] for s in sources}, "skipped": SKIPPED, "targets": TARGETS,
            "margin_from": "shardlab.constants.EQUIVALENCE_MARGIN", "seed": seed, "max_tasks": max_tasks,
            "calibrated": list(calibrated), "summary": summary, "tasks": tasks}


def _f(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def markdown(report: dict[str, Any]) -> str:
    """The report's markdown: header (when, commit, command, nothing measured), one table."""
    lines = ["# Cost models: ranking of measured plans", "",
             f"Made {report['made']} at git commit {report['git']} by `{report['command']}`. Nothing was measured: "
             "committed records were read and every measured plan re-predicted.", "",
             "Per task: Kendall's tau-b of predicted vs measured plan cost (median over rounds); decisive pairs = "
             "pairs of plans whose paired measured comparison says `faster` or `slower` (95% interval of the "
             "per-round ratio, equivalence margin `constants.EQUIVALENCE_MARGIN`, the profile's between-sitting "
             "spread), right = the model orders them the same way. Columns: tasks, plans, median tau over tasks, "
             "decisive pairs ordered right (pooled over tasks), median plan-cost relative error over plans. "
             f"Targets: median tau >= {TARGETS['kendall_tau_median']}, >= {TARGETS['decisive_share']:.0%} of "
             f"decisive pairs right, plan-cost error <= {TARGETS['plan_cost_error_median']:.0%}.", "",
             "| model | source | tasks | plans | tau (median) | decisive right | share | plan-cost error |",
             "|---|---|---|---|---|---|---|---|"]
    for m, by in report["summary"].items():
        for s, r in by.items():
            err = _f(r["plan_cost_error_median"]) + ("" if r["plan_errors_comparable"] or s == "all" else " *")
            lines.append(f"| {m} | {s} | {r['tasks']} | {r['plans']} | {_f(r['kendall_tau_median'])} | "
                         f"{r['decisive_right']}/{r['decisive_pairs']} | {_f(r['decisive_share'], '.1%')} | {err} |")
    lines += ["", "`all`: every task of every source (plan-cost error over the plans whose measurement ran at the "
              "model's batch size). `-` / `*`: sitting_agreement was measured at batch 1024 and the models predict "
              "at the batch they were trained at (4096), so its plan-cost error is not comparable and left out; its "
              "ranking is kept.", "",
              f"`<model>{CALIBRATED}`: the model as NeuroShard's search uses it, corrected to the task's own "
              "tables: the task calibration is fitted again (nothing timed) to the measurements the task's "
              "NeuroShard plan recorded under `metadata.task_calibration`, with the same rule that decides whether "
              "a correction applies; only tasks with such a record. "
              f"`<model>{SAME_TASKS}`: the same model uncorrected on those same tasks, for the comparison.", "",
              f"`{SELF}`: no model. Each task's rounds split in two paired halves (even- against odd-numbered "
              "sittings where the plans were measured in two or more, else even- against odd-numbered rounds); one "
              "half's median costs are ranked against the other half's like a prediction (decisive pairs: the "
              "verdicts from all rounds), and a plan's cost error is the halves' relative difference. It gauges "
              "how far the measurement agrees with itself when repeated: a model's tau against a measurement "
              "this noisy cannot be expected to reach 1, and a half holds half the rounds, so the gauge is, if "
              "anything, pessimistic for the whole measurement.", "", "Sources: " + "; ".join(f"`{s}`: `{w}`" for s, w in report["sources"].items())
              + ". Every plan cost comes from the Evaluation's per-round plan costs (the rounds the `.journal.jsonl` "
              "files hold per device, summed per round).", "", "Not ranked:", ""]
    lines += [f"- `{k}`: {v}." for k, v in report["skipped"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", nargs="+", default=list(SOURCES), choices=list(SOURCES))
    ap.add_argument("--models", nargs="+", default=None,
                    help=f"shipped {PROFILE} bundles or manifest paths of candidates (default: all shipped)")
    ap.add_argument("--max-tasks", type=int, default=None, help="first N tasks of each source (a quick slice)")
    ap.add_argument("--calibrated", nargs="*", default=[profile_folder(PROFILE).search_model],
                    help="models also re-costed with the task calibration a plan of the task recorded "
                         f"(default: the {PROFILE} search model, {profile_folder(PROFILE).search_model})")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    models = args.models or shipped_bundles(PROFILE)
    unknown = sorted(m for m in set(models) - set(shipped_bundles(PROFILE)) if not Path(m).is_file())
    if unknown:
        raise ShardlabError(f"ranking: field 'models' names no shipped {PROFILE} bundle or manifest: {', '.join(unknown)}")
    unknown = sorted(set(args.calibrated) - set(shipped_bundles(PROFILE)))
    if unknown:
        raise ShardlabError(f"ranking: field 'calibrated' names no shipped {PROFILE} bundle: {', '.join(unknown)}")
    report = run(args.sources, models, args.max_tasks, calibrated=tuple(args.calibrated))
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    argv = " ".join(sys.argv[1:])
    report = {"made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git": git or "?",
              "command": COMMAND + (f" {argv}" if argv else ""), "measured": "nothing", **report}
    out = Path(args.out)
    write_json_atomic(out / "ranking.json", report)
    write_text_atomic(out / "ranking.md", markdown(report))
    print(json.dumps({m: {s: [_f(r["kendall_tau_median"]), _f(r["decisive_share"]), _f(r["plan_cost_error_median"])]
                          for s, r in by.items()} for m, by in report["summary"].items()}))
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except ShardlabError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
