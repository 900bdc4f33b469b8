#!/usr/bin/env python
"""Write results/row_wise.{json,md}: the row-wise benchmark -- tasks whose largest tables fit no
device, NeuroShard vs TorchRec's planner (torchrec_free) and two heuristics, measured in paired
rounds on this machine (studies/row_wise/tasks.py). Resumes: a task already in the JSON is not
measured again (--fresh to redo).

    .venv/bin/python studies/row_wise/run.py [--rounds 5] [--only 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from studies.row_wise.tasks import METHODS, SPECS, build_task, run_task, verdicts  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def markdown(report: dict) -> list[str]:
    """The report's markdown page, line by line."""
    v = report["verdicts"]
    share = "n/a" if v["faster_or_equivalent_share"] is None else f"{v['faster_or_equivalent_share']:.0%}"
    lines = ["# Row-wise sharding: NeuroShard vs TorchRec's planner on tasks with tables larger than a device", "",
             f"Made {report['date']} by `studies/row_wise/run.py` on {report['environment']['hardware']} "
             f"(profile `cpu`, batch {report['batch_size']}). Every plan **measured** ({report['rounds']} paired, "
             "shuffled rounds: per device the fused TBE op, then the all-to-alls between G real gloo ranks with "
             "row-wise traffic); verdicts from the 95% interval of the median per-round ratio to `torchrec_free` "
             "(equivalent: the interval contains 1 and lies inside [1/1.05, 1.05]). "
             "Tasks are held out from every training step (Criteo 1TB, public model families, the pool's test "
             "tables); rows and caps are divided by the task's row scale where this machine's memory needs it.", "",
             f"**NeuroShard faster than or equivalent to torchrec_free: "
             f"{v['counts']['faster'] + v['counts']['equivalent']}/{v['judged']} = {share}** (target >= 90%): faster "
             f"{v['counts']['faster']}, equivalent {v['counts']['equivalent']}, inconclusive "
             f"{v['counts']['inconclusive']}, slower {v['counts']['slower']}; not judged (a method had no plan): "
             f"{', '.join(v['not_judged']) or 'none'}.", "",
             "Measured (each task's plans in one sitting): " + "; ".join(
                 f"{r['task']} {r.get('measured_at', '?')}" for r in report["tasks"]) + ".", "",
             "| task | G | oversized | method | median ms | 95% CI | x torchrec_free [CI] | verdict | row blocks (devices) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["tasks"]:
        for m in METHODS:
            if m in r["no_plan"]:
                lines.append(f"| {r['task']} | {r['ngpu']} | {', '.join(r['oversized'])} | {m} | no plan: "
                             f"{r['no_plan'][m][:80]} | | | | |")
                continue
            e = r["evaluations"].get(m)
            if e is None:
                continue
            ci = e.get("ci95_ms")
            rc = e.get("ratio_ci95")
            ratio = f"{e['ratio_to_reference']:.3f} [{rc[0]:.3f}, {rc[1]:.3f}]" if rc else ""
            lay = "; ".join(f"{k}: {v}" for k, v in r["row_layouts"].get(m, {}).items())
            lines.append(f"| {r['task']} | {r['ngpu']} | {', '.join(r['oversized'])} | {m} | {e['cost_ms']:.2f} | "
                         f"{'[%.2f, %.2f]' % tuple(ci) if ci else ''} | {ratio} | {e.get('verdict', '')} | {lay} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--only", type=int, default=None, help="the first N task specs")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--fresh", action="store_true")
    args = ap.parse_args()
    path = Path(args.out) / "row_wise.json"
    tasks = [build_task(spec, args.batch_size) for spec in SPECS[: args.only]]
    names = {t.name for t in tasks}
    old = {} if args.fresh or not path.exists() else {r["task"]: r for r in json.loads(path.read_text())["tasks"]}
    records = [r for r in old.values() if r["task"] in names]           # tasks no longer in SPECS are dropped
    for spec, task in zip(SPECS, tasks):
        if task.name in old:
            continue
        rec = run_task(spec, rounds=args.rounds, batch_size=args.batch_size, task=task)
        rec["measured_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        rec["code"] = environment("cpu").get("git")
        records = [r for r in records if r["task"] != rec["task"]] + [rec]
        report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  "environment": environment("cpu"), "rounds": args.rounds, "batch_size": args.batch_size,
                  "tasks": records, "verdicts": verdicts(records)}
        write_json_atomic(path, report)                      # after every task: a crash loses one task
        (Path(args.out) / "row_wise.md").write_text("\n".join(markdown(report)) + "\n")
        print(f"{rec['task']}: {rec['evaluations'].get('neuroshard', {}).get('verdict')} "
              f"({', '.join(rec['no_plan']) or 'all planned'})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
