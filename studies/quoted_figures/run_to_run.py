#!/usr/bin/env python
"""Write results/run_to_run.{json,md}: how far the same plan's measured cost (its median over 8
or 16 paired rounds) moves between two runs on this 2-core VM, from the raw rounds the measurement-noise
study kept (datasets/cpu/noise_runs: each task's plans measured twice, seeds 1 and 2, in separate
runs). Measures nothing.

    .venv/bin/python studies/quoted_figures/run_to_run.py
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.io import read_json, write_json_atomic  # noqa: E402

RUNS = ROOT / "datasets" / "cpu" / "noise_runs"
RESULTS = Path(__file__).resolve().parent / "results"


def pairs(folder: Path) -> list[tuple[str, Path, Path]]:
    """(setting, run with seed 1, run with seed 2) for every setting measured twice."""
    by: dict[str, dict[str, Path]] = {}
    for p in sorted(folder.glob("*.json")):
        m = re.fullmatch(r"(.*)-seed([12])(.*)\.json", p.name)
        if m:
            by.setdefault(m.group(1) + m.group(3), {})[m.group(2)] = p
    return [(k, v["1"], v["2"]) for k, v in sorted(by.items()) if {"1", "2"} <= set(v)]


def moves(folder: Path) -> list[dict]:
    """Per setting and plan: both runs' medians (ms) and max / min - 1 (how far apart)."""
    rows = []
    for setting, a, b in pairs(folder):
        ea, eb = read_json(a)["evaluations"], read_json(b)["evaluations"]
        seen: dict[tuple, str] = {}
        for plan in sorted(set(ea) & set(eb)):
            key = (tuple(ea[plan]["rounds_ms"]), tuple(eb[plan]["rounds_ms"]))
            if key in seen:                    # an identical plan, measured once per round: counted once
                continue
            seen[key] = plan
            x, y = float(np.median(ea[plan]["rounds_ms"])), float(np.median(eb[plan]["rounds_ms"]))
            rows.append({"setting": setting, "plan": plan, "run1_ms": x, "run2_ms": y,
                         "rounds": [len(ea[plan]["rounds_ms"]), len(eb[plan]["rounds_ms"])],
                         "apart": max(x, y) / min(x, y) - 1.0})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(RUNS))
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    rows = moves(Path(args.runs))
    apart = np.array([r["apart"] for r in rows])
    summary = {"plans": len(rows), "settings": len({r["setting"] for r in rows}),
               "median": float(np.median(apart)), "p90": float(np.quantile(apart, 0.9)), "max": float(apart.max()),
               "over_10pct": int((apart > 0.10).sum()), "over_25pct": int((apart > 0.25).sum())}
    out = Path(args.out)
    write_json_atomic(out / "run_to_run.json", {"source": str(Path(args.runs).resolve().relative_to(ROOT)),
                                                "summary": summary, "plans": rows})
    worst = max(rows, key=lambda r: r["apart"])
    lines = ["# The same plan measured in two runs", "",
             "Made by `studies/quoted_figures/run_to_run.py` from the raw rounds in `datasets/cpu/noise_runs` "
             "(the measurement-noise study: each setting's plans measured in 8 paired rounds, 16 for "
             "`cpu_repeats3_warmup2`, twice, in separate runs with seeds 1 and 2; nothing measured here). Per plan: "
             "each run's median cost and how far apart they are (larger / smaller - 1); a plan identical to another "
             "of its setting (measured once per round) is counted once.", "",
             f"Over {summary['plans']} plans in {summary['settings']} settings the two medians are "
             f"{summary['median']:.1%} apart at the median, {summary['p90']:.1%} at p90 and {summary['max']:.1%} at "
             f"most ({worst['plan']}, {worst['setting']}); more than 10% apart: {summary['over_10pct']}, more than "
             f"25%: {summary['over_25pct']}.", "",
             "| setting | plan | run 1 ms | run 2 ms | apart |", "|---|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['plan']} | {r['run1_ms']:.2f} | {r['run2_ms']:.2f} | {r['apart']:.1%} |"
              for r in rows]
    (out / "run_to_run.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:6]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
