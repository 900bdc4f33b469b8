#!/usr/bin/env python
"""Benchmark (not a test): NeuroShard's search time, simulated plan cost and peak memory as
tables (50..2000) and GPUs (4..128) grow, table-wise and column-wise. Each point runs in a
fresh process (`studies.search_scaling.scaling.time_search`). Writes
results/<name>.{json,md} (default name search_scaling) and the log-log figure results/<name>.html (not kept
in git). Run it alone (timings). The committed results also timed the one-state-at-a-time
search NeuroShard had before its batched one (rows with `batched` false: the same plans, 5.8 to
11.3 times slower); that search is gone, so a new run times the batched search only.

    .venv/bin/python studies/search_scaling/run.py [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from studies.common.records import fresh_process_row  # noqa: E402
from studies.search_scaling.scaling import time_search  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: Targets for the full (column-wise) search, seconds on this 2-core machine.
TARGETS_S = {(100, 8): 1.0, (800, 64): 10.0, (2000, 128): 60.0}
#: (GPUs, tables) and (tables, GPUs) sweeps; 500 x 4, 800 x 4 and 2000 x 8 or 16 do not fit 16 GB GPUs.
TABLE_SWEEP = ((4, (50, 100, 200)), (8, (50, 100, 200, 500, 1000)), (64, (100, 200, 500, 800, 1000, 2000)))
GPU_SWEEP = ((800, (8, 16, 32, 64, 128)), (2000, (32, 64, 128)))


def points(quick: bool) -> list[tuple[int, int]]:
    """The (tables, GPUs) grid, targets included, in size order."""
    if quick:
        return [(50, 8), (100, 8), (200, 16)]
    grid = {(n, g) for g, ns in TABLE_SWEEP for n in ns} | {(n, g) for n, gs in GPU_SWEEP for g in gs}
    return sorted(grid | set(TARGETS_S), key=lambda p: (p[0] * p[1], p))


def run_point(ntables: int, ngpu: int, column_wise: bool, timeout_s: float) -> dict:
    """One point in a fresh process; a failure or timeout is a row that says so."""
    cmd = [sys.executable, __file__, "--point", str(ntables), str(ngpu), "cw" if column_wise else "tw"]
    row = {"tables": ntables, "gpus": ngpu, "search": "column-wise" if column_wise else "table-wise",
           "batched": True}
    return fresh_process_row(cmd, row, timeout_s)


def markdown(report: dict) -> str:
    """The report's markdown page."""
    rows = report["rows"]
    env = report["environment"]
    lines = ["# NeuroShard: search time, plan quality and memory at scale (`studies/search_scaling/run.py`)", "",
             f"Made {report['date']} on {env['hardware']} (torch {env['torch']}, git {env['git']}). Each point: "
             "one search in a fresh process, model `" + report["model"] + "` loaded beforehand; default "
             "k/n/splits (beam 3, top 10 by size and by cost, up to 10 splits, 11 caps), split guard on; "
             "16 GB per GPU (500 or 800 x 4 and 2000 x 8 or 16 do not fit, so are not run). `simulated ms`: the plan's cost under the search's own model -- a simulation, "
             "not a measurement. `peak RSS`: the process's peak resident memory (imports included; "
             "`before`: just before the search).", ""]
    lines += ["## Targets (full column-wise search)", "", "| task | target s | measured s | met |",
              "|---|---|---|---|"]
    for (n, g), target in TARGETS_S.items():
        got = next((r for r in rows if (r["tables"], r["gpus"]) == (n, g) and r["search"] == "column-wise"
                    and r["batched"] and "search_s" in r), None)
        lines.append(f"| {n} x {g} | {target:g} | " + (f"{got['search_s']:.2f} | {'yes' if got['search_s'] <= target else 'no'} |"
                                                     if got else "not run | - |"))
    far = [r for r in rows if _outside(r) and "valid_range" not in r]
    guarded = [r for r in rows if r.get("valid_range")]
    lines += ["", "## Every point", ""]
    if guarded:
        lines += ["**Simulated costs marked `+`** came partly from the model's labelled analytic fallback: some "
                  "devices (compute) or all-to-alls (comm) lay outside the range the trained model was fitted "
                  "on, so those were costed by the analytic model fitted to the same measurements, scaled to the "
                  "model's envelope at the range's edge (`docs/methods.md`). Last column: how much.", ""]
    if far:
        lines += [f"**Simulated costs marked `*` are not meaningful**: the plan's largest per-device dim sum is "
                  f"more than {OUTSIDE}x the mean its neural comm model (`{far[0]['comm_model']}`, trained per G) "
                  "saw in training, and a log-target MLP extrapolates exponentially (inf: overflow). The search "
                  "time still holds; the model, not the search, is out of range there.", ""]
    lines += ["| tables x GPUs | search | search s | simulated ms | column blocks | max dims / device | comm model | "
              "RSS before MB | peak RSS MB | tables from | costed outside the valid range |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['tables']} x {r['gpus']} | {r['search']} | {r['error']} | | | | | | | | |")
            continue
        mark = " +" if r.get("valid_range") else " *" if _outside(r) and "valid_range" not in r else ""
        lines.append(f"| {r['tables']} x {r['gpus']} | {r['search']} | {r['search_s']:.2f} | {r['simulated_ms']:.3f}{mark} | "
                     f"{r['column_blocks']} | {r.get('max_device_dims', '')} | {r.get('comm_model', '')} | "
                     f"{r['rss_before_mb']:.0f} | {r['peak_rss_mb']:.0f} | {r['table_source']} | {_fallback(r)} |")
    lines += ["", "Figure (log-log, search time against tables, one line per GPU count and search): "
              "`search_scaling.html`.", ""]
    return "\n".join(lines)


#: A plan whose largest device dim sum exceeds this multiple of its comm model's training mean.
OUTSIDE = 4


def _outside(row: dict) -> bool:
    mean = row.get("comm_trained_mean_dims")
    return bool(mean) and row.get("max_device_dims", 0) > OUTSIDE * mean


def _fallback(row: dict) -> str:
    """What of a row's simulated cost the labelled fallback gave ('-': nothing; '' for rows made
    before the valid-range guard existed)."""
    said = row.get("valid_range")
    if said is None:
        return ""
    parts = [f"compute of {said['compute_devices']} of {said['ngpu']} devices"] if said.get("compute_devices") else []
    return ", ".join(parts + (["all-to-alls"] if said.get("comm") else [])) or "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--point", nargs=3, metavar=("TABLES", "GPUS", "tw|cw"),
                    help="run one point in this process and print its JSON row")
    ap.add_argument("--quick", action="store_true", help="three small points (a smoke run)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per point")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--name", default="search_scaling",
                    help="file stem of the results (a new run keeps earlier ones under another stem)")
    args = ap.parse_args()
    if args.point:
        n, g, mode = args.point
        print(json.dumps(time_search(int(n), int(g), mode == "cw")))
        return 0
    rows = []
    for n, g, cw in [(n, g, cw) for n, g in points(args.quick) for cw in (False, True)]:
        row = run_point(n, g, cw, args.timeout)
        rows.append(row)
        said = row.get("error") or f"{row['search_s']:.2f} s, simulated {row['simulated_ms']:.3f} ms, peak {row['peak_rss_mb']:.0f} MB"
        print(f"{n:5d} x {g:3d} {row['search']:11s} {said}", flush=True)
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "environment": environment("cpu"),
              "model": next((r["model"] for r in rows if "model" in r), ""), "targets_s":
              [{"tables": n, "gpus": g, "seconds": s} for (n, g), s in TARGETS_S.items()], "rows": rows}
    out = Path(args.out)
    write_json_atomic(out / f"{args.name}.json", report)
    write_text_atomic(out / f"{args.name}.md", markdown(report))
    # plotly only here: a point's process must not hold it (its peak RSS is measured)
    from shardlab.report.html import figure_html, standalone_page
    from studies.search_scaling.figure import scaling_figure

    write_text_atomic(out / f"{args.name}.html", standalone_page(
        "NeuroShard search time at scale", figure_html(scaling_figure(rows))))
    print(f"wrote {out / (args.name + '.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
