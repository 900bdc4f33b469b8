#!/usr/bin/env python
"""Write results/h100_floor.md: the timing floor of the H100 compute samples in datasets/h100,
i.e. how small the smallest measured ops are (ms). Those samples were timed with the host clock
around ``torch.cuda.synchronize()``, so every op carries the launch and synchronisation time; the
smallest ops (one small table) show that floor. Measures nothing.

    .venv/bin/python studies/quoted_figures/h100_floor.py
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "datasets" / "h100"
RESULTS = Path(__file__).resolve().parent / "results"
KINDS = {"single": "one table alone", "compute": "fused op of several tables"}
PARTS = ("fw_ms", "bw_ms", "total_ms")


def quantiles(rows: list[dict], part: str) -> dict[str, float]:
    """Minimum, 1st and 5th percentile and median of one part's per-sample medians (ms)."""
    v = np.array([r[part] for r in rows if r.get(part) is not None], dtype=float)
    return {"n": int(v.size), "min": float(v.min()), "p1": float(np.percentile(v, 1)),
            "p5": float(np.percentile(v, 5)), "median": float(np.median(v))}


def main() -> int:
    lines = ["# Timing floor of the H100 compute samples (`datasets/h100`)", "",
             "From `.venv/bin/python studies/quoted_figures/h100_floor.py` (measures nothing). Each sample is",
             "the median of 10 timed runs after 5 warm-ups at batch 65536, host clock around",
             "`torch.cuda.synchronize()` (`datasets/h100/NOTES.md`). Quantiles over samples, in ms.", "",
             "| samples | part | n | min | p1 | p5 | median |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for kind, what in KINDS.items():
        with gzip.open(DATA / f"{kind}.jsonl.gz", "rt") as f:
            rows = [json.loads(line) for line in f]
        for part in PARTS:
            q = quantiles(rows, part)
            lines.append(f"| {kind} ({what}) | {part[:-3]} | {q['n']} | {q['min']:.3f} | {q['p1']:.3f} | "
                         f"{q['p5']:.3f} | {q['median']:.3f} |")
    lines += ["", "fw + bw of the smallest one-table op is the floor the docs quote (about 0.5-0.6 ms);",
              "forward or backward alone is at least about 0.2 or 0.3 ms."]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "h100_floor.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
