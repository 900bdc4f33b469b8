#!/usr/bin/env python
"""Benchmark (not a test): wall time of DreamShard's and AutoShard's shipped policies sharding
T tables over G GPUs (greedy decoding, feasibility look-ahead included), median of repeats after
one warm-up call. Target: 500 tables x 16 GPUs in <= 2 s on this machine.
Writes results/rl_inference.{json,md}. Run it alone (timings).

    .venv/bin/python studies/rl_policies/inference_time.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.data.tasks import generate_task  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from shardlab.search import get_sharder, run_sharder  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("dreamshard", "autoshard")
SIZES = ((100, 4), (100, 16), (250, 8), (500, 8), (500, 16))
TARGET_S = 2.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cap-gb", type=float, default=8.0, help="memory cap per GPU (GB)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    rows = []
    for ntables, ngpu in SIZES:
        task = generate_task(split="all", ntables=ntables, ngpu=ngpu, mem_cap_gb=args.cap_gb, seed=ntables + ngpu,
                             name=f"bench-{ntables}x{ngpu}")
        for method in METHODS:
            sharder = get_sharder(method)
            run_sharder(sharder, task)                  # warm-up: loads the policy
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                run_sharder(sharder, task)
                times.append(time.perf_counter() - t0)
            rows.append({"method": method, "tables": ntables, "gpus": ngpu, "median_s": float(np.median(times)),
                         "max_s": float(np.max(times)), "repeats": args.repeats})
            print(f"{method:10s} {ntables:4d} x {ngpu:2d}: median {np.median(times):.3f} s")
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "environment": environment("cpu"),
              "target_s": TARGET_S, "cap_gb": args.cap_gb, "rows": rows}
    out = Path(args.out)
    write_json_atomic(out / "rl_inference.json", report)
    lines = ["# RL policies: inference time (`studies/rl_policies/inference_time.py`)", "",
             f"Made {report['date']} on {report['environment']['hardware']} (torch {report['environment']['torch']}): "
             "greedy decoding of the shipped `dreamshard_policy` and `autoshard_policy`, memory look-ahead "
             "included (`search/feasibility.py`), tasks drawn from the dlrm-synth pool (all tables), "
             f"{args.cap_gb:g} GB per GPU; median (max) of {args.repeats} calls after one warm-up. "
             f"Target: 500 tables x 16 GPUs in <= {TARGET_S:g} s.", "",
             "| method | tables x GPUs | median s | max s | target met |", "|---|---|---|---|---|"]
    for r in rows:
        met = "yes" if r["median_s"] <= TARGET_S else "no"
        lines.append(f"| {r['method']} | {r['tables']} x {r['gpus']} | {r['median_s']:.3f} | {r['max_s']:.3f} | "
                     f"{met if (r['tables'], r['gpus']) == (500, 16) else '-'} |")
    (out / "rl_inference.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
