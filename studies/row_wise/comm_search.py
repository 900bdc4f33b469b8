#!/usr/bin/env python
"""Write results/row_wise_comm_search.{json,md}: does costing row layouts with the row-wise comm
model (``neuroshard[rowwise_comm=shipped]``) change NeuroShard's plans on the row-wise benchmark's
tasks against the default accounting (``neuroshard``), and where it does, is the plan measured
faster? Plans that differ are measured in paired rounds on this machine (run it alone).
Earlier sittings recorded under the old name ``neuroshard_rwcomm`` are read as the spec.

    .venv/bin/python studies/row_wise/comm_search.py [--rounds 5]   (again: another sitting, pooled)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.evaluate import MeasuredEvaluator  # noqa: E402
from shardlab.constants import EQUIVALENCE_MARGIN  # noqa: E402
from shardlab.evaluate.stats import paired_ratio_ci, read_verdict, verdict  # noqa: E402
from shardlab.workflows.criteo import criteo_plans, row_layouts  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from studies.common.methods import respelled  # noqa: E402
from studies.row_wise.tasks import SPECS, build_task  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: The default accounting, and row layouts costed with the shipped row-wise comm model.
METHODS = ("neuroshard", "neuroshard[rowwise_comm=shipped]")


def saved_record(record: dict) -> dict:
    """A task's saved record with every per-method mapping keyed by spec (a sitting recorded
    under ``neuroshard_rwcomm`` counts as ``neuroshard[rowwise_comm=shipped]``'s)."""
    sittings = [{**s, "rounds_ms": respelled(s["rounds_ms"]), "evaluations": respelled(s["evaluations"])}
                for s in record.get("sittings", [])]
    return {**record, "plans": respelled(record["plans"]), "row_layouts": respelled(record["row_layouts"]),
            "sittings": sittings}


def _placements(plan: dict) -> list:
    """A plan's placements, comparable across runs (its metadata holds timings)."""
    return sorted(json.dumps(p, sort_keys=True) for p in plan["placements"])


def pooled(sittings: list[dict]) -> dict:
    """Every sitting's paired per-round ratios (row-wise comm costed / default) pooled: median
    over all rounds, 95% interval of the hierarchical bootstrap over sittings (sittings, then
    rounds within them, resampled: :func:`~shardlab.evaluate.stats.paired_ratio_ci`), verdict
    (``evaluate/stats.py``, margin 5%)."""
    ratio, ci = paired_ratio_ci([s["rounds_ms"][METHODS[1]] for s in sittings],
                                [s["rounds_ms"][METHODS[0]] for s in sittings])
    rounds = sum(len(s["rounds_ms"][METHODS[0]]) for s in sittings)
    return {"rounds": rounds, "sittings": len(sittings), "ratio": ratio, "ratio_ci95": ci, "verdict": verdict(ci),
            "equivalence_margin": EQUIVALENCE_MARGIN}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds of a new sitting; 0: no new sitting (report only)")
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    path = Path(args.out) / "row_wise_comm_search.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    old = {r["task"]: saved_record(r) for r in saved.get("tasks", [])}
    records = []
    for spec in SPECS:
        task = build_task(spec, args.batch_size)
        plans = criteo_plans(task, METHODS)
        a, b = (plans[m] for m in METHODS)
        rec = {"task": task.name, "same_plan": set(a.placements) == set(b.placements),
               "row_layouts": {m: row_layouts(task, p) for m, p in plans.items()},
               "plans": {m: p.to_dict() for m, p in plans.items()}, "sittings": []}
        before = old.get(task.name, {})
        if before and all(_placements(before["plans"][m]) == _placements(rec["plans"][m]) for m in METHODS):
            rec["sittings"] = before.get("sittings", [])     # the same plans: earlier sittings count
        if not rec["same_plan"] and args.rounds > 0:
            evs = MeasuredEvaluator("cpu", rounds=args.rounds, reference="neuroshard", lower_bound=False,
                                    progress=False).evaluate(task, plans)
            rec["sittings"].append({"measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                                    "rounds_ms": {m: list(e.rounds_ms) for m, e in evs.items()},
                                    "evaluations": {m: e.to_dict() for m, e in evs.items()}})
        if rec["sittings"]:
            rec["pooled"] = pooled(rec["sittings"])
        records.append(rec)
        print(task.name, "same plan" if rec["same_plan"] else
              f"{len(rec['sittings'])} sittings (pooled: {rec.get('pooled', {}).get('verdict')})", flush=True)
        report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  "environment": environment("cpu"), "batch_size": args.batch_size, "notes": saved.get("notes", []),
                  "tasks": records + [r for n, r in old.items() if n not in {x["task"] for x in records}]}
        write_json_atomic(path, report)                     # after every task: a crash loses one task
    differ = [r for r in records if not r["same_plan"]]
    lines = ["# NeuroShard's row layouts costed with the row-wise comm model", "",
             f"Made {report['date']} by `studies/row_wise/comm_search.py` on {report['environment']['hardware']}. "
             f"`{METHODS[1]}` charges each choice of row layouts its own collectives "
             "(the analytic model `analytic_rowwise_comm` fitted to `datasets/cpu/rowcomm`); "
             "`neuroshard` (the default) counts row blocks' columns on their devices' all-to-all. "
             "The tasks are `results/row_wise.md`'s: tables that fit no device, held out from every training step. "
             "Plans that differ are **measured** in paired, shuffled rounds (reference `neuroshard`), "
             "in every sitting this script ran; the pooled verdict bootstraps the per-round ratios of all "
             "sittings of the same plans hierarchically (sittings, then rounds within them, resampled).", "",
             f"Same plan on {len(records) - len(differ)}/{len(records)} tasks; different on {len(differ)}.", "",
             *[f"Note: {n}" for n in report["notes"]], *([""] if report["notes"] else []),
             f"| task | same plan | row layouts equal | sitting | neuroshard ms [95% CI] | {METHODS[1]} ms [95% CI] "
             "| ratio [95% CI] | verdict |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        lay = "yes" if r["row_layouts"][METHODS[0]] == r["row_layouts"][METHODS[1]] else "no"
        if r["same_plan"]:
            lines.append(f"| {r['task']} | yes | {lay} | | | | | |")
            continue
        for s in r["sittings"]:
            a, b = (s["evaluations"][m] for m in METHODS)
            lines.append(f"| {r['task']} | no | {lay} | {s['measured_at']} ({len(s['rounds_ms']['neuroshard'])} "
                         f"rounds) | {a['cost_ms']:.2f} [{a['ci95_ms'][0]:.2f}, {a['ci95_ms'][1]:.2f}] | "
                         f"{b['cost_ms']:.2f} [{b['ci95_ms'][0]:.2f}, {b['ci95_ms'][1]:.2f}] | "
                         f"{b['ratio_to_reference']:.3f} [{b['ratio_ci95'][0]:.3f}, {b['ratio_ci95'][1]:.3f}] | "
                         f"{read_verdict(b.get('verdict'), b.get('ratio_ci95'))} |")
        p = r.get("pooled")
        if p is None:
            continue
        lines.append(f"| {r['task']} | no | {lay} | **pooled** ({p['rounds']} rounds) | | | {p['ratio']:.3f} "
                     f"[{p['ratio_ci95'][0]:.3f}, {p['ratio_ci95'][1]:.3f}] | **{p['verdict']}** |")
    (Path(args.out) / "row_wise_comm_search.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
