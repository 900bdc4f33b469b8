#!/usr/bin/env python
"""Benchmark (not a test): prediction throughput of the shipped compute cost models, in shards
per second, for batches of 1,000 shards of ~10 tables (beam search calls the model thousands of
times). Writes results/predict_throughput.{json,md}. Run it alone (timings).

    .venv/bin/python studies/cost_models/throughput.py [--dataset cpu] [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.costmodel.bundle import load_bundle, shipped_bundles  # noqa: E402
from shardlab.data.tasks import pool_tables  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="cpu")
    ap.add_argument("--shards", type=int, default=1000)
    ap.add_argument("--tables", type=int, default=10, help="mean tables per shard")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    pool = pool_tables("dlrm-synth", "test")
    shards = [[pool[int(i)].with_dim(int(rng.choice([4, 8, 16, 32, 64, 128])))
               for i in rng.choice(len(pool), size=int(rng.integers(args.tables - 5, args.tables + 6)), replace=False)]
              for _ in range(args.shards)]
    rows = {}
    for name in shipped_bundles(args.dataset):
        model = load_bundle(name, args.dataset).compute
        model.predict(shards[:10])  # warm-up
        cold = time.perf_counter()
        model.predict(shards)  # first call on these tables: features computed
        cold = time.perf_counter() - cold
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            model.predict(shards)
            times.append(time.perf_counter() - t)
        med = float(np.median(times))
        rows[name] = {"shards_per_s": args.shards / med, "batch_ms": med * 1e3, "first_call_ms": cold * 1e3,
                      "source": model.source}
        print(f"{name}: {args.shards / med:,.0f} shards/s (batch of {args.shards}: {med * 1e3:.1f} ms; "
              f"first call {cold * 1e3:.1f} ms)")
    env = environment("cpu")
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "environment": env,
              "shards": args.shards, "mean_tables": args.tables, "repeats": args.repeats, "models": rows}
    out = Path(args.out)
    write_json_atomic(out / "predict_throughput.json", report)
    lines = ["# Cost-model prediction throughput", "",
             f"{report['date']}, {env['hardware']}, torch {env['torch']}; batches of {args.shards} shards of "
             f"{args.tables - 5}..{args.tables + 5} tables; median of {args.repeats} (features cached after the "
             "first call, as in search).", "", "| model | shards/s | batch (ms) | first call (ms) |", "|---|---|---|---|"]
    lines += [f"| {n} | {r['shards_per_s']:,.0f} | {r['batch_ms']:.1f} | {r['first_call_ms']:.1f} |" for n, r in rows.items()]
    (out / "predict_throughput.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
