#!/usr/bin/env python
"""Write results/stack_timings-<UTC>.json and results/stack_timings.md: what one fused fbgemm
TBE op (forward plus backward, fp32, exact SGD, one thread) costs on this CPU at the `cpu`
profile's batch of 4096 and at the seeds' batch of 65536, for 1 and for 20 tables of the shipped
pool, and each op against its tables timed one by one (fused / separate). The figures
docs/stack.md quotes. A measurement: run it alone (about two minutes on 2 cores).

    .venv/bin/python studies/quoted_figures/stack_timings.py

Tables: the first 20 test tables of pool `dlrm-synth` at dim 64 with fewer than 1,000,000 rows
(their own lookup generators). Per op: `shardlab.measure.compute.measure_compute` (median of the
timed runs, perf_counter); 10 timed runs after 5 warm-ups at batch 4096, 3 after 1 at 65536.
Every run keeps its record (a new file per run, with provenance).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.data.tasks import pool_tables  # noqa: E402
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.compute import measure_compute  # noqa: E402
from shardlab.measure.hardware import environment, profile_with  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SETTINGS = ((4096, 10, 5), (65536, 3, 1))          # (batch, timed runs, warm-ups)


def main() -> None:
    tables = [dataclasses.replace(t, dim=64) for t in pool_tables("dlrm-synth", "test") if t.rows < 1_000_000][:20]
    rows, t0 = [], time.perf_counter()
    for batch, repeats, warmup in SETTINGS:
        prof = profile_with("cpu", batch, repeats, warmup)
        one = measure_compute(tables[:1], prof)
        fused = measure_compute(tables, prof)
        separate = [measure_compute([t], prof) for t in tables]
        rows.append({"batch": batch, "repeats": repeats, "warmup": warmup,
                     "one_table": {"fw_ms": one.fw_ms, "bw_ms": one.bw_ms, "total_ms": one.total_ms},
                     "twenty_tables": {"fw_ms": fused.fw_ms, "bw_ms": fused.bw_ms, "total_ms": fused.total_ms},
                     "separate_sum_ms": sum(s.total_ms for s in separate),
                     "fused_over_separate": fused.total_ms / sum(s.total_ms for s in separate)})
        print(rows[-1], flush=True)
    made = dt.datetime.now(dt.timezone.utc)
    record = {"made": made.isoformat(timespec="seconds"), "seconds": time.perf_counter() - t0,
              "environment": environment("cpu"), "tables": [t.to_dict() for t in tables], "settings": rows}
    RESULTS.mkdir(exist_ok=True)
    name = f"stack_timings-{made.strftime('%Y%m%dT%H%M%SZ')}.json"
    write_json_atomic(RESULTS / name, record)
    lines = ["# One fused TBE op on this CPU (`studies/quoted_figures/stack_timings.py`)", "",
             f"Made {record['made']} ({record['environment']['hardware']}, torch {record['environment']['torch']}, "
             f"fbgemm_gpu {record['environment']['fbgemm_gpu']}; record `results/{name}`). fp32, exact SGD, one "
             "thread, forward + backward, median of the timed runs (ms).", "",
             "| batch | 1 table | 20 tables | backward / forward (20) | fused / separate (20) |", "|---|---|---|---|---|"]
    for r in rows:
        tw = r["twenty_tables"]
        lines.append(f"| {r['batch']} | {r['one_table']['total_ms']:.1f} | {tw['total_ms']:.1f} | "
                     f"{tw['bw_ms'] / tw['fw_ms']:.1f} | {r['fused_over_separate']:.2f} |")
    write_text_atomic(RESULTS / "stack_timings.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
