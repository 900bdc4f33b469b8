#!/usr/bin/env python
"""Benchmark (not a test): every sharder on held-out test tasks at the seeds' settings, judged
by one cost model (simulated, no uncertainty) and, with --measure, on this machine (measured in
--rounds paired rounds: fused fbgemm ops in turn, gloo all-to-alls with G real ranks; medians
with 95% intervals and paired verdicts against each baseline); ratio to the lower bound, win
rates against each baseline (measured: significant wins only), search time; and NeuroShard's
search time at 100 x 8 and 2,000 x 128.
Writes results/search_benchmark.{json,md}. The runs are shardlab.workflows.benchmark, the
summaries and words shardlab.report.benchmark{,_text} (also used by notebooks/benchmark.ipynb).

    .venv/bin/python studies/search_benchmark/run.py [--tasks 5] [--measure [--rounds 3]] [--model neuroshard]
        [--settings 4x10-60,4x50] [--families 1]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.costmodel.bundle import load_bundle  # noqa: E402
from shardlab.data.model_families import FAMILY_SETS  # noqa: E402
from shardlab.workflows.benchmark import (METHODS, ROUNDS, SETTINGS, benchmark_tasks,  # noqa: E402
                                            neuroshard_scaling, run_benchmark)
from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment, get_profile  # noqa: E402
from shardlab.report.benchmark import done, summarise  # noqa: E402
from shardlab.report.benchmark_text import markdown_report  # noqa: E402
from studies.common.heldout import heldout_tasks  # noqa: E402
from studies.common.methods import split_methods  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=5, help="held-out tasks per setting")
    ap.add_argument("--model", default="neuroshard", help="cost model that judges (simulated)")
    ap.add_argument("--measure", action="store_true", help="also measure every plan here (slow)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="paired measurement rounds per task (>= 3: intervals)")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated sharder specs")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--settings", default=None, help="comma-separated settings (default: 4x10-60,4x50,8x80)")
    ap.add_argument("--families", type=int, default=0,
                    help="also this many tasks per held-out model family (4 GPUs, rows capped at 2M)")
    args = ap.parse_args()
    prof = get_profile("cpu")
    model = load_bundle(args.model)
    methods = split_methods(args.methods)
    tasks = benchmark_tasks(SETTINGS if args.settings is None else args.settings.split(","), args.tasks, seed=0)
    if args.families:   # held-out model families: tables no training step saw (datasets/heldout_models)
        tasks += [(f"family:{name}", t) for name in FAMILY_SETS
                  for t in heldout_tasks(name, args.families, 4, prof.batch_size, 4.0, 2_000_000)]
    rows = done(run_benchmark(tasks, methods, model, measure=args.measure, progress=False, rounds=args.rounds,
                              profile="cpu",
                              log=lambda line: print(line, flush=True)))
    keys = ["simulated_ms"] + (["measured_ms"] if args.measure else [])
    summaries = {k: summarise(rows, methods, k) for k in keys}
    scale = neuroshard_scaling(model, log=lambda line: print(line, flush=True))
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "environment": environment("cpu"),
              "profile": prof.to_dict(), "judge": model.source, **({"rounds": args.rounds} if args.measure else {}),
              "rows": rows,
              "summary": {key: {f"{k[0]} {k[1]}": v for k, v in sm.items()} for key, sm in summaries.items()},
              "neuroshard_search_seconds": scale}
    out = Path(args.out)
    write_json_atomic(out / "search_benchmark.json", report)
    (out / "search_benchmark.md").write_text(markdown_report(report, args.tasks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
