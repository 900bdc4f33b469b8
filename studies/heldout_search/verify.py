#!/usr/bin/env python
"""What `--verify K` buys on held-out model families (measurement; runs alone): for held-out
tasks (the ones of datasets/cpu_heldout), NeuroShard with the shipped model, verified -- its K
best plans and the best heuristic plan under the model measured in paired rounds, the measured
best kept. Writes results/verify_heldout.{json,md}: the choice, its ratio and verdict against
the model's own first choice and against the heuristic, and the seconds verification took.

    .venv/bin/python studies/heldout_search/verify.py [--k 3] [--rounds 5] [--tasks avazu_fec_dlrm:2,...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.evaluate import MeasuredEvaluator  # noqa: E402
from shardlab.workflows.verify import VerifiedSharder  # noqa: E402
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment, get_profile  # noqa: E402
from shardlab.search import get_sharder, run_sharder  # noqa: E402
from studies.common.heldout import heldout_tasks  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

DEFAULT_TASKS = "mlperf_dlrm_dcnv2_multihot:2,avazu_fec_dlrm:2,taobao_tzrec_din:2,amazon_electronics_hugectr_bst:1"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", default="neuroshard")
    ap.add_argument("--tasks", default=DEFAULT_TASKS, help="set:index of the held-out tasks (3 per set, 4 GPUs)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    prof = get_profile("cpu")
    rows = []
    for spec in args.tasks.split(","):
        name, index = spec.split(":")
        task = heldout_tasks(name, int(index) + 1, 4, prof.batch_size, 4.0, 2_000_000)[int(index)]
        sharder = VerifiedSharder(get_sharder("neuroshard", model=args.model),
                                  MeasuredEvaluator(prof, rounds=args.rounds, seed=0, lower_bound=False), args.k)
        start = time.perf_counter()
        plan = run_sharder(sharder, task, 0)
        v = plan.metadata["verification"]
        rows.append({"task": spec, "tables": len(task.tables), "seconds": time.perf_counter() - start,
                     "chosen": v["chosen"], "vs_model_choice": v["vs_model_choice"], "vs_heuristic": v["vs_heuristic"],
                     "plans": v["plans"]})
        print(f"{spec}: chose {v['chosen']}; vs model#1 {v['vs_model_choice']['ratio']:.3f} "
              f"{v['vs_model_choice']['verdict']}; vs {v['vs_heuristic']['reference']} "
              f"{v['vs_heuristic']['ratio']:.3f} {v['vs_heuristic']['verdict']}; {rows[-1]['seconds']:.0f} s")
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "environment": environment("cpu"),
              "k": args.k, "rounds": args.rounds, "model": args.model, "tasks": rows}
    out = Path(args.out)
    write_json_atomic(out / "verify_heldout.json", report)
    lines = ["# `--verify` on held-out model families (measured)", "",
             f"Made {report['date']} by `studies/heldout_search/verify.py` (K = {args.k}, {args.rounds} paired rounds, model "
             f"`{args.model}`, CPU profile, 4 GPUs as gloo ranks). Each row: NeuroShard's {args.k} best plans under the "
             "model plus the heuristic plan the model ranks best, measured together; the measured best is kept. Ratios: "
             "median over rounds of chosen / reference; verdicts from the 95% interval: faster or slower when it "
             "excludes 1, equivalent when it contains 1 and lies inside [1/1.05, 1.05], else inconclusive.", "",
             "| task | tables | chosen | vs the model's own choice | vs the heuristic | seconds |", "|---|---|---|---|---|---|"]
    for r in rows:
        m, h = r["vs_model_choice"], r["vs_heuristic"]
        lines.append(f"| {r['task']} | {r['tables']} | {r['chosen']} | {m['ratio']:.3f} {m['verdict'] or '-'} | "
                     f"{h['ratio']:.3f} {h['verdict'] or '-'} ({h['reference']}) | {r['seconds']:.0f} |")
    write_text_atomic(out / "verify_heldout.md", "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
