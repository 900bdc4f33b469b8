#!/usr/bin/env python
"""How much work each greedy-grid call of a column-wise NeuroShard search does: per call (the
table-wise pass, then one per beam round) the states, the steps (distinct blocks placed in
order), the (device content, block) pairs put through the cost model, and the call's seconds.
The task is one ``shardlab tasks`` draws (pool tables, 80 GB devices, like the other drivers of
this study); the search is ``neuroshard[portfolio=[]]`` on the default profile, task calibration
off. Writes ``results/grid_counts-<tables>x<gpus>-<UTC time>.{json,md}`` (never overwrites).
Timing: run it alone.

    .venv/bin/python studies/search_scaling/grid_counts.py --tables 800 --gpus 64
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["SHARDLAB_TASK_CALIBRATION"] = "off"       # before shardlab reads its constants

import shardlab.search.grid_placer as grid_placer  # noqa: E402
from shardlab.cli import main as cli_main  # noqa: E402
from shardlab.io import read_json, write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
METHOD = "neuroshard[portfolio=[]]"


def counted_search(tables: int, gpus: int) -> dict:
    """The search's plan seconds and one row per grid call (module docstring)."""
    calls = []
    grid = grid_placer.greedy_grid

    def counting(block_rows, local, order, *args, **kwargs):
        t0 = time.perf_counter()
        got = grid(block_rows, local, order, *args, **kwargs)
        calls.append({"states": int(local.shape[0]), "steps": int(len(order)), "costed": int(got.costed),
                      "seconds": round(time.perf_counter() - t0, 3)})
        return got

    grid_placer.greedy_grid = counting
    try:
        with tempfile.TemporaryDirectory() as tmp:
            task, plan = Path(tmp) / "task.json", Path(tmp) / "plan.json"
            assert cli_main(["tasks", "--ntables", str(tables), "--ngpu", str(gpus), "--mem-gb", "80", "--split",
                             "all" if tables > 2000 else "test", "--out", str(task)]) == 0
            t0 = time.perf_counter()
            assert cli_main(["shard", str(task), "--method", METHOD, "--out", str(plan)]) == 0
            wall = time.perf_counter() - t0
            seconds = read_json(plan)["search_seconds"]
    finally:
        grid_placer.greedy_grid = grid
    return {"tables": tables, "gpus": gpus, "method": METHOD, "search_seconds": seconds,
            "shard_wall_s": round(wall, 3), "calls": calls, "environment": environment("cpu")}


def report(r: dict) -> str:
    """The result as a markdown table."""
    rows = ["| call | states | steps | pairs costed | pairs per step | s |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for i, c in enumerate(r["calls"]):
        rows.append(f"| {i} | {c['states']} | {c['steps']} | {c['costed']:,} | {c['costed'] // max(c['steps'], 1):,} "
                    f"| {c['seconds']:.2f} |")
    total = sum(c["costed"] for c in r["calls"])
    return "\n".join([f"# Greedy-grid work: `{r['method']}` on {r['tables']} tables x {r['gpus']} GPUs", "",
                      f"`search_seconds` {r['search_seconds']:.1f} s ({r['shard_wall_s']:.1f} s for the whole "
                      f"`shardlab shard`); {total:,} (content, block) pairs costed in all; "
                      f"{r['environment'].get('hardware')}, git {r['environment'].get('git')}.", "",
                      *rows, ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, required=True)
    ap.add_argument("--gpus", type=int, required=True)
    args = ap.parse_args(argv)
    r = counted_search(args.tables, args.gpus)
    stem = RESULTS / f"grid_counts-{args.tables}x{args.gpus}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    write_json_atomic(stem.with_suffix(".json"), r)
    write_text_atomic(stem.with_suffix(".md"), report(r))
    print(stem.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
