#!/usr/bin/env python
"""Write reports/row_wise_comm_search.{json,md}: does costing row layouts with the row-wise comm
model (neuroshard's default since session 11, search/row_comm.py) change NeuroShard's plans on
issue 18's benchmark tasks against the old accounting (neuroshard_rowcols), and where it does,
is the plan measured faster? Plans that differ are measured in paired
rounds on this machine (run it alone).

    .venv/bin/python scripts/row_wise_comm_search.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardlab.evaluate import MeasuredEvaluator  # noqa: E402
from shardlab.experiments.criteo import criteo_plans, row_layouts  # noqa: E402
from shardlab.experiments.row_wise_benchmark import SPECS, build_task  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.profile.provenance import environment  # noqa: E402

METHODS = ("neuroshard_rowcols", "neuroshard")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--out", default="reports")
    args = ap.parse_args()
    records = []
    for spec in SPECS:
        task = build_task(spec, args.batch_size)
        plans = criteo_plans(task, METHODS)
        a, b = (plans[m] for m in METHODS)
        rec = {"task": task.name, "same_plan": set(a.placements) == set(b.placements),
               "row_layouts": {m: row_layouts(task, p) for m, p in plans.items()},
               "plans": {m: p.to_dict() for m, p in plans.items()}}
        if not rec["same_plan"]:
            evs = MeasuredEvaluator("cpu", rounds=args.rounds, reference="neuroshard_rowcols", lower_bound=False,
                                    progress=False).evaluate(task, plans)
            rec["evaluations"] = {m: e.to_dict() for m, e in evs.items()}
            rec["measured_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        records.append(rec)
        print(task.name, "same plan" if rec["same_plan"] else rec["evaluations"]["neuroshard"]["verdict"],
              flush=True)
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "environment": environment("cpu"),
              "rounds": args.rounds, "batch_size": args.batch_size, "tasks": records}
    out = Path(args.out)
    write_json_atomic(out / "row_wise_comm_search.json", report)
    differ = [r for r in records if not r["same_plan"]]
    lines = ["# NeuroShard's row layouts costed with the row-wise comm model", "",
             f"Made {report['date']} by `scripts/row_wise_comm_search.py` on {report['environment']['hardware']}. "
             "`neuroshard` (since session 11) charges each choice of row layouts its own collectives "
             "(`search/row_comm.py`, the analytic model `analytic_rowwise_comm` fitted to `datasets/cpu/rowcomm`); "
             "`neuroshard_rowcols` searches as before, with row blocks' columns on their devices' all-to-all. The tasks are `reports/row_wise.md`'s: tables that fit no device, held out "
             "from every training step. Plans that differ were **measured** in "
             f"{args.rounds} paired, shuffled rounds (reference `neuroshard_rowcols`).", "",
             f"Same plan on {len(records) - len(differ)}/{len(records)} tasks; different on {len(differ)}.", "",
             "| task | same plan | row layouts equal | neuroshard_rowcols ms [95% CI] | neuroshard ms [95% CI] | "
             "ratio [95% CI] | verdict |", "|---|---|---|---|---|---|---|"]
    for r in records:
        lay = r["row_layouts"]["neuroshard_rowcols"] == r["row_layouts"]["neuroshard"]
        cells = ["", "", "", ""]
        if "evaluations" in r:
            a, b = (r["evaluations"][m] for m in METHODS)
            cells = [f"{a['cost_ms']:.2f} [{a['ci95_ms'][0]:.2f}, {a['ci95_ms'][1]:.2f}]",
                     f"{b['cost_ms']:.2f} [{b['ci95_ms'][0]:.2f}, {b['ci95_ms'][1]:.2f}]",
                     f"{b['ratio_to_reference']:.3f} [{b['ratio_ci95'][0]:.3f}, {b['ratio_ci95'][1]:.3f}]",
                     b["verdict"]]
        lines.append(f"| {r['task']} | {'yes' if r['same_plan'] else 'no'} | {'yes' if lay else 'no'} | "
                     + " | ".join(cells) + " |")
    (out / "row_wise_comm_search.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
