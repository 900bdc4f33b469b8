#!/usr/bin/env python
"""Benchmark (not a test): how long TorchRec's ``EmbeddingShardingPlanner`` (default proposers)
and ``ShardlabPlanner`` (NeuroShard table-wise) take to plan the same model of N tables over G
ranks with the same constraints, in the same run, and what their plans cost under one neutral,
labelled judge (``planning_time.py``). Each planning runs in a fresh process; ShardlabPlanner
``--repeats`` times (its median is reported), TorchRec's once (minutes to hours). Every row is
appended to ``results/<stamp>.jsonl`` as it completes; ``--report`` writes the markdown report
of every kept run. Run it alone (timings).

    .venv/bin/python studies/torchrec_planner/run.py [--points 1000x64:tw-fused,1000x64:default] [--timeout 2700]
    .venv/bin/python studies/torchrec_planner/run.py --grid 100,500,1000,2000x8,64,128 --timeout 300
    .venv/bin/python studies/torchrec_planner/run.py --report reports/torchrec_planner.md

``--grid TABLESxRANKS`` runs every combination, both spaces, small to large. ``--report`` also
draws the log-log figure of planning time against tables (``<report>.svg`` beside it, embedded
in the report): one line per planner, ranks and space; a planning stopped at the timeout is a
hollow point at the time it ran (a lower bound).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.io import write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: Target: ShardlabPlanner at least this many times faster at 1,000 tables x 64 ranks.
TARGET = 50.0


def point_row(planner: str, n: int, g: int, space: str, timeout_s: float) -> dict:
    """One planning in a fresh process; a failure or timeout is a row that says so."""
    cmd = [sys.executable, __file__, "--point", planner, str(n), str(g), space]
    row = {"planner": planner, "tables": n, "ranks": g, "space": space}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**row, "error": f"no plan in {timeout_s:.0f} s (stopped)", "plan_s_at_least": timeout_s}
    if done.returncode:
        return {**row, "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def markdown(rows: list[dict]) -> str:
    """The report over every kept row, grouped by run and point."""
    lines = ["# ShardlabPlanner vs TorchRec's planner: planning time (`studies/torchrec_planner/run.py`)", "",
             "Same model (one EmbeddingBagCollection of N pool tables on the meta device; augmented copies past the "
             "pool's size), same topology (16 GB per rank, 8 ranks per host), same constraints (every table's pooling "
             "factor; `tw-fused`: also table-wise shards and the fused kernel only; `default`: TorchRec may use every "
             "sharding type and kernel), same run. `plan s`: the `plan()` call in a fresh process (ShardlabPlanner's "
             "includes loading its model and measuring assumed reuse bins; median of its repeats). `judged ms`: the "
             "plan's cost under the analytic h100 model (fitted to H100 kernel measurements; cluster comm from public "
             "bandwidths) -- a labelled model, not a measurement; TorchRec's UVM kernels are costed as fused there.", ""]
    runs: dict[str, list[dict]] = {}
    for r in rows:
        runs.setdefault(r["run"], []).append(r)
    for run, rs in runs.items():
        env = rs[0].get("environment", {})
        lines += [f"## Run {run}", "", f"{env.get('hardware', '?')}; torch {env.get('torch', '?')}, git "
                  f"{env.get('git', '?')}.", "",
                  "| tables x ranks | space | planner | plan s | peak RSS MB | judged ms | shards | kernels | TorchRec s / ShardlabPlanner s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        points = sorted({(r["tables"], r["ranks"], r["space"]) for r in rs})
        for n, g, space in points:
            ours = [r for r in rs if (r["tables"], r["ranks"], r["space"], r["planner"]) == (n, g, space, "shardlab")]
            theirs = [r for r in rs if (r["tables"], r["ranks"], r["space"], r["planner"]) == (n, g, space, "torchrec")]
            ok = [r["plan_s"] for r in ours if "plan_s" in r]
            mine = statistics.median(ok) if ok else None
            for r in ours[:1] + theirs:
                t = (statistics.median(ok) if r["planner"] == "shardlab" and ok else r.get("plan_s"))
                ratio = ""
                mine_ms = next((x.get("judged_ms") for x in ours if x.get("judged_ms") is not None), None)
                if r["planner"] == "torchrec" and mine_ms and r.get("judged_ms"):
                    ratio = f"cost x{r['judged_ms'] / mine_ms:.3f} of ShardlabPlanner's; "
                if r["planner"] == "torchrec" and mine:
                    if "plan_s" in r:
                        x = r["plan_s"] / mine
                        ratio += f"x{x:.2f} ({'met' if x >= TARGET else 'not met'}: TorchRec {'slower' if x > 1 else 'faster'})"
                    elif "plan_s_at_least" in r:
                        ratio += f">= x{r['plan_s_at_least'] / mine:.0f} (met: lower bound)" \
                            if r["plan_s_at_least"] / mine >= TARGET else f">= x{r['plan_s_at_least'] / mine:.0f}"
                shown = _fmt(t, ".2f") + (f" (of {len(ok)}: {', '.join(f'{x:.2f}' for x in ok)})"
                                          if r["planner"] == "shardlab" and len(ok) > 1 else "")
                if "error" in r:
                    shown = r["error"]
                lines.append(f"| {n} x {g} | {space} | {r['planner']} | {shown} | {_fmt(r.get('peak_rss_mb'), '.0f')} | "
                             f"{_fmt(r.get('judged_ms'))} | {', '.join(r.get('sharding_types', []))} | "
                             f"{', '.join(r.get('kernels', []))} | {ratio} |")
        lines.append("")
    lines += [f"Target: ShardlabPlanner >= {TARGET:g}x faster at 1,000 x 64.", ""]
    return "\n".join(lines)


def figure(rows: list[dict]) -> str:
    """The log-log SVG of planning time (s) against tables over every kept row: one line per
    (planner, ranks, space); ShardlabPlanner's median over its repeats; a stopped planning is a
    hollow point at its timeout."""
    from studies.common.svg_plot import loglog_svg

    keys = sorted({(r["planner"], r["ranks"], r["space"]) for r in rows})
    series = []
    for planner, g, space in keys:
        pts: dict[int, list[tuple[float, bool]]] = {}
        for r in rows:
            if (r["planner"], r["ranks"], r["space"]) != (planner, g, space):
                continue
            if "plan_s" in r:
                pts.setdefault(r["tables"], []).append((r["plan_s"], False))
            elif "plan_s_at_least" in r:
                pts.setdefault(r["tables"], []).append((r["plan_s_at_least"], True))
        points = [(n, statistics.median(t for t, _ in v), all(h for _, h in v)) for n, v in sorted(pts.items())]
        if points:
            name = f"{'ShardlabPlanner' if planner == 'shardlab' else 'TorchRec'}, {g} ranks, {space}"
            series.append({"name": name, "points": points, "dash": planner == "torchrec"})
    return loglog_svg(series, "Planning time: ShardlabPlanner (solid) vs TorchRec's planner (dashed)", "tables",
                      "plan() time (s)", note="One process per planning, this 2-core VM; hollow: stopped at the "
                      "timeout (at least). Every kept run.")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--point", nargs=4, metavar=("PLANNER", "TABLES", "RANKS", "SPACE"),
                    help="plan once in this process and print its JSON row")
    ap.add_argument("--points", default="1000x64:tw-fused,1000x64:default",
                    help="comma-separated TABLESxRANKS:SPACE (space: tw-fused, default, or mixed: default over "
                         "pooled, position-weighted and sequence collections)")
    ap.add_argument("--grid", help="TABLES,...xRANKS,...: every combination, both spaces (instead of --points)")
    ap.add_argument("--repeats", type=int, default=3, help="ShardlabPlanner runs per point")
    ap.add_argument("--planners", default="shardlab,torchrec",
                    help="which planners to run (comma-separated; e.g. shardlab alone after a change to it)")
    ap.add_argument("--timeout", type=float, default=2700.0, help="seconds per planning before it is stopped")
    ap.add_argument("--report", help="write the markdown report of every kept run to this file; measure nothing")
    args = ap.parse_args()
    if args.point:
        from studies.torchrec_planner.planning_time import run_point
        planner, n, g, space = args.point
        print(json.dumps(run_point(planner, int(n), int(g), space)))
        return 0
    if args.report:
        rows = [json.loads(line) for f in sorted(RESULTS.glob("[0-9]*Z.jsonl")) for line in f.read_text().splitlines()
                if line.strip()]
        svg = Path(args.report).with_suffix(".svg")
        write_text_atomic(svg, figure(rows))
        write_text_atomic(args.report, markdown(rows) + f"\n![Planning time, log-log]({svg.name})\n")
        print(f"wrote {args.report} and {svg} ({len(rows)} rows)")
        return 0
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{stamp}.jsonl"
    env = environment()
    specs = args.points.split(",")
    if args.grid:
        tables, _, ranks = args.grid.partition("x")
        specs = [f"{n}x{g}:{space}" for n in tables.split(",") for g in ranks.split(",")
                 for space in ("tw-fused", "default")]
    for spec in specs:
        size, _, space = spec.strip().partition(":")
        n, _, g = size.partition("x")
        wanted = args.planners.split(",")
        plan = ["shardlab"] * args.repeats * ("shardlab" in wanted) + ["torchrec"] * ("torchrec" in wanted)
        for planner in plan:
            row = {**point_row(planner, int(n), int(g), space or "tw-fused", args.timeout), "run": stamp,
                   "environment": env}
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(planner, n, g, space, row.get("plan_s", row.get("error")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
