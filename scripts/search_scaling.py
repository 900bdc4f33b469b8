#!/usr/bin/env python
"""Benchmark (not a test): NeuroShard's search time, simulated plan cost and peak memory as
tables (50..2000) and GPUs (4..128) grow, table-wise and column-wise (issue 17). Each point
runs in a fresh process (`shardlab.experiments.search_scaling.time_search`). Where the
one-state-at-a-time search (`batched=False`, the search before issue 17) is affordable it runs
too, so the report compares the two plans' costs under the search's model. Writes
reports/search_scaling.{json,md} and the log-log figure reports/search_scaling.html. Run it
alone (timings).

    .venv/bin/python scripts/search_scaling.py [--quick] [--out reports]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.profile.provenance import environment  # noqa: E402

#: Issue 17's targets for the full (column-wise) search, seconds on this 2-core machine.
TARGETS_S = {(100, 8): 1.0, (800, 64): 10.0, (2000, 128): 60.0}
#: (GPUs, tables) and (tables, GPUs) sweeps; 500 x 4, 800 x 4 and 2000 x 8 or 16 do not fit 16 GB GPUs.
TABLE_SWEEP = ((4, (50, 100, 200)), (8, (50, 100, 200, 500, 1000)), (64, (100, 200, 500, 800, 1000, 2000)))
GPU_SWEEP = ((800, (8, 16, 32, 64, 128)), (2000, (32, 64, 128)))
#: Where the search before issue 17 also runs (its column-wise search took 75 s at 800 x 64).
LEGACY = ((100, 8), (200, 8), (500, 8), (100, 64), (200, 64), (800, 64))


def points(quick: bool) -> list[tuple[int, int]]:
    """The (tables, GPUs) grid, targets included, in size order."""
    if quick:
        return [(50, 8), (100, 8), (200, 16)]
    grid = {(n, g) for g, ns in TABLE_SWEEP for n in ns} | {(n, g) for n, gs in GPU_SWEEP for g in gs}
    return sorted(grid | set(TARGETS_S), key=lambda p: (p[0] * p[1], p))


def run_point(ntables: int, ngpu: int, column_wise: bool, batched: bool, timeout_s: float) -> dict:
    """One point in a fresh process; a failure or timeout is a row that says so."""
    cmd = [sys.executable, __file__, "--point", str(ntables), str(ngpu), "cw" if column_wise else "tw",
           "batched" if batched else "legacy"]
    row = {"tables": ntables, "gpus": ngpu, "search": "column-wise" if column_wise else "table-wise",
           "batched": batched}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**row, "error": f"over {timeout_s:.0f} s"}
    if done.returncode:
        return {**row, "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def markdown(report: dict) -> str:
    rows = report["rows"]
    env = report["environment"]
    lines = ["# NeuroShard: search time, plan quality and memory at scale (`scripts/search_scaling.py`)", "",
             f"Made {report['date']} on {env['hardware']} (torch {env['torch']}, git {env['git']}). Each point: "
             "one search in a fresh process, model `" + report["model"] + "` loaded beforehand; default "
             "k/n/splits (beam 3, top 10 by size and by cost, up to 10 splits, 11 caps), split guard on; "
             "16 GB per GPU (500 or 800 x 4 and 2000 x 8 or 16 do not fit, so are not run). `simulated ms`: the plan's cost under the search's own model -- a simulation, "
             "not a measurement. `peak RSS`: the process's peak resident memory (imports included; "
             "`before`: just before the search).", ""]
    lines += ["## Targets (issue 17: full column-wise search)", "", "| task | target s | measured s | met |",
              "|---|---|---|---|"]
    for (n, g), target in TARGETS_S.items():
        got = next((r for r in rows if (r["tables"], r["gpus"]) == (n, g) and r["search"] == "column-wise"
                    and r["batched"] and "search_s" in r), None)
        lines.append(f"| {n} x {g} | {target:g} | " + (f"{got['search_s']:.2f} | {'yes' if got['search_s'] <= target else 'no'} |"
                                                     if got else "not run | - |"))
    lines += ["", "## Before and after (column-wise; the same task searched one state at a time, `batched=False`)", "",
              "| task | before s | after s | speed-up | simulated ms before | after | after / before |",
              "|---|---|---|---|---|---|---|"]
    for n, g in LEGACY:
        old = _find(rows, n, g, "column-wise", False)
        new = _find(rows, n, g, "column-wise", True)
        if old and new:
            lines.append(f"| {n} x {g} | {old['search_s']:.2f} | {new['search_s']:.2f} | "
                         f"x{old['search_s'] / new['search_s']:.1f} | {old['simulated_ms']:.3f} | "
                         f"{new['simulated_ms']:.3f} | {new['simulated_ms'] / old['simulated_ms']:.6f} |")
    far = [r for r in rows if _outside(r)]
    lines += ["", "## Every point", ""]
    if far:
        lines += [f"**Simulated costs marked `*` are not meaningful**: the plan's largest per-device dim sum is "
                  f"more than {OUTSIDE}x the mean its neural comm model (`{far[0]['comm_model']}`, trained per G) "
                  "saw in training, and a log-target MLP extrapolates exponentially (inf: overflow). Search time "
                  "and the before/after equality still hold; the model, not the search, is out of range there.", ""]
    lines += ["| tables x GPUs | search | search s | simulated ms | column blocks | max dims / device | comm model | "
              "RSS before MB | peak RSS MB | tables from |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["batched"]:
            continue
        if "error" in r:
            lines.append(f"| {r['tables']} x {r['gpus']} | {r['search']} | {r['error']} | | | | | | | |")
            continue
        mark = " *" if _outside(r) else ""
        lines.append(f"| {r['tables']} x {r['gpus']} | {r['search']} | {r['search_s']:.2f} | {r['simulated_ms']:.3f}{mark} | "
                     f"{r['column_blocks']} | {r.get('max_device_dims', '')} | {r.get('comm_model', '')} | "
                     f"{r['rss_before_mb']:.0f} | {r['peak_rss_mb']:.0f} | {r['table_source']} |")
    lines += ["", "Figure (log-log, search time against tables, one line per GPU count and search): "
              "`search_scaling.html`.", ""]
    return "\n".join(lines)


#: A plan whose largest device dim sum exceeds this multiple of its comm model's training mean.
OUTSIDE = 4


def _outside(row: dict) -> bool:
    mean = row.get("comm_trained_mean_dims")
    return bool(mean) and row.get("max_device_dims", 0) > OUTSIDE * mean


def _find(rows: list[dict], n: int, g: int, search: str, batched: bool) -> dict | None:
    return next((r for r in rows if (r["tables"], r["gpus"], r["search"], r["batched"]) == (n, g, search, batched)
                 and "search_s" in r), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--point", nargs=4, metavar=("TABLES", "GPUS", "tw|cw", "batched|legacy"),
                    help="run one point in this process and print its JSON row")
    ap.add_argument("--quick", action="store_true", help="three small points (a smoke run)")
    ap.add_argument("--no-legacy", action="store_true", help="skip the search before issue 17")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per point")
    ap.add_argument("--out", default="reports")
    args = ap.parse_args()
    if args.point:
        from shardlab.experiments.search_scaling import time_search

        n, g, mode, how = args.point
        print(json.dumps(time_search(int(n), int(g), mode == "cw", how == "batched")))
        return 0
    rows = []
    todo = [(n, g, cw, True) for n, g in points(args.quick) for cw in (False, True)]
    if not (args.quick or args.no_legacy):
        todo += [(n, g, True, False) for n, g in LEGACY]
    for n, g, cw, batched in todo:
        row = run_point(n, g, cw, batched, args.timeout)
        rows.append(row)
        said = row.get("error") or f"{row['search_s']:.2f} s, simulated {row['simulated_ms']:.3f} ms, peak {row['peak_rss_mb']:.0f} MB"
        print(f"{n:5d} x {g:3d} {row['search']:11s} {'' if batched else '(before) '}{said}", flush=True)
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "environment": environment("cpu"),
              "model": next((r["model"] for r in rows if "model" in r), ""), "targets_s":
              [{"tables": n, "gpus": g, "seconds": s} for (n, g), s in TARGETS_S.items()], "rows": rows}
    out = Path(args.out)
    write_json_atomic(out / "search_scaling.json", report)
    write_text_atomic(out / "search_scaling.md", markdown(report))
    from shardlab.report.html import figure_html, standalone_page
    from shardlab.report.search_scaling import scaling_figure

    write_text_atomic(out / "search_scaling.html", standalone_page(
        "NeuroShard search time at scale", figure_html(scaling_figure(rows))))
    print(f"wrote {out / 'search_scaling.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
