#!/usr/bin/env python
"""Benchmark (not a test): every search method at production sizes, run as a user runs it, on a
quiet machine and beside other work.

Each point is ``shardlab tasks`` (pool tables; copies at other dims past the pool's size, said in
the task) then ``shardlab shard TASK --method M`` in a fresh process, on the default hardware
profile (h100). Its time is the plan's ``search_seconds`` (the sharder's wall time: loading its
cost model or policy included); its memory the child process's peak RSS. Every point runs twice in
a row: quiet, then **busy** -- with one spinning process per core started just before (what a
notebook or a training job beside the planner does to it). Rows are appended to
``results/production-<UTC>.jsonl`` as they complete; ``--report`` writes the markdown report of
every kept run. Run it alone.

    .venv/bin/python studies/search_scaling/production.py
    .venv/bin/python studies/search_scaling/production.py --report studies/search_scaling/results/production.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.io import write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from studies.common.records import append_record  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: (method, tables, GPUs, target search_seconds or None): the sizes and targets of the scale work.
POINTS = (("neuroshard", 100, 8, 0.5), ("neuroshard", 800, 64, 3.0), ("neuroshard", 2000, 128, 10.0),
          ("neuroshard[beam_costing=moved]", 100, 8, 0.5), ("neuroshard[beam_costing=moved]", 800, 64, 3.0),
          ("neuroshard[beam_costing=moved]", 2000, 128, 10.0),
          ("neuroshard[columns=false]", 2000, 128, None), ("neuroshard[columns=false]", 10000, 1024, 10.0),
          ("dreamshard", 2000, 128, None), ("dreamshard", 10000, 1024, None),
          ("autoshard", 2000, 128, None), ("autoshard", 10000, 1024, None))
#: GB per GPU of the tasks (an H100's 80 GB).
MEM_GB = 80.0
#: Targets: peak memory (MB) and busy / quiet time.
PEAK_MB, BUSY_RATIO = 2048.0, 2.0


def _spin() -> None:
    while True:
        pass


def shard_once(task: Path, method: str, out: Path, timeout_s: float) -> dict:
    """``shardlab shard`` in a fresh process: its plan's search_seconds, wall time and peak RSS
    (MB, that process's own: ``os.wait4``)."""
    cmd = [str(Path(sys.executable).parent / "shardlab"), "shard", str(task), "--method", method, "--out", str(out)]
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, text=True)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout_s:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                return {"error": f"no plan in {timeout_s:.0f} s (stopped)"}
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    if proc.returncode:
        return {"error": (stderr.strip().splitlines() or ["no output"])[-1][:300]}
    plan = json.loads(out.read_text())
    return {"search_s": plan["search_seconds"], "wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024,
            "valid_range": plan.get("metadata", {}).get("valid_range"), "summary": stdout.strip()[:300]}


def run(points: list[tuple], timeout_s: float) -> Path:
    """Every point, quiet then busy; one row per run, appended as it completes."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"production-{stamp}.jsonl"
    env = environment()
    cli = str(Path(sys.executable).parent / "shardlab")
    with tempfile.TemporaryDirectory() as tmp, out.open("a") as record:
        for method, n, g, target in points:
            task = Path(tmp) / f"t{n}x{g}.json"
            if not task.exists():
                subprocess.run([cli, "tasks", "--ntables", str(n), "--ngpu", str(g), "--mem-gb", str(MEM_GB),
                                "--split", "all" if n > 2000 else "test", "--out", str(task)], check=True,
                               capture_output=True)
            drawn = json.loads(task.read_text())["name"]
            for load in ("quiet", "busy"):
                spinners = [mp.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 1)] \
                    if load == "busy" else []
                for p in spinners:
                    p.start()
                try:
                    got = shard_once(task, method, Path(tmp) / "plan.json", timeout_s)
                finally:
                    for p in spinners:
                        p.kill()
                        p.join()
                row = {"method": method, "tables": n, "gpus": g, "load": load, "target_s": target, "task": drawn,
                       "spinners": len(spinners), **got, "run": stamp, "environment": env}
                append_record(record, row)
                print(method, n, g, load, got.get("search_s", got.get("error")), flush=True)
    return out


def markdown(rows: list[dict]) -> str:
    """The report over every kept run: per point, quiet and busy search_seconds, their ratio,
    peak memory, the targets, and what the valid range said."""
    lines = ["# Every method at production sizes, quiet and busy (`studies/search_scaling/production.py`)", "",
             "Each point: `shardlab tasks` then `shardlab shard TASK --method M` in a fresh process, default profile "
             f"(h100), {MEM_GB:g} GB per GPU. `search s`: the plan's `search_seconds` (loading the model or policy "
             "included); `busy`: with one spinning process per core beside it. `peak MB`: the shard process's peak "
             "RSS. Targets: "
             f"search time as listed; peak memory <= {PEAK_MB:g} MB; busy <= {BUSY_RATIO:g}x quiet.", ""]
    runs: dict[str, list[dict]] = {}
    for r in rows:
        runs.setdefault(r["run"], []).append(r)
    for run, rs in runs.items():
        env = rs[0].get("environment", {})
        lines += [f"## Run {run}", "", f"{env.get('hardware', '?')}; torch {env.get('torch', '?')}, git {env.get('git', '?')}.",
                  "", "| method | tables x GPUs | quiet s | target s | busy s | busy / quiet | peak MB | outside valid range |",
                  "|---|---|---|---|---|---|---|---|"]
        for key in dict.fromkeys((r["method"], r["tables"], r["gpus"]) for r in rs):
            quiet = next((r for r in rs if (r["method"], r["tables"], r["gpus"]) == key and r["load"] == "quiet"), {})
            busy = next((r for r in rs if (r["method"], r["tables"], r["gpus"]) == key and r["load"] == "busy"), {})
            q, b = quiet.get("search_s"), busy.get("search_s")
            target = quiet.get("target_s")
            met = "" if target is None or q is None else (" (met)" if q <= target else " (not met)")
            ratio = "-" if q is None or b is None else f"{b / q:.2f}" + (" (met)" if b / q <= BUSY_RATIO else " (not met)")
            peak = max((x.get("peak_rss_mb") or 0.0) for x in (quiet, busy))
            vr = quiet.get("valid_range") or {}
            outside = "-" if not vr else (f"compute of {vr.get('compute_devices')} of {vr.get('ngpu')} devices"
                                          + (", all-to-alls" if vr.get("comm") else ""))
            lines.append(f"| {key[0]} | {key[1]} x {key[2]} | {quiet.get('error') or f'{q:.2f}'} | "
                         f"{'-' if target is None else f'{target:g}'}{met} | {busy.get('error') or f'{b:.2f}'} | {ratio} | "
                         f"{peak:.0f}{' (met)' if peak <= PEAK_MB else ' (not met)'} | {outside} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per shard run before it is stopped")
    ap.add_argument("--only", help="comma-separated methods to run (default: every point)")
    ap.add_argument("--report", help="write the markdown report of every kept run to this file; measure nothing")
    args = ap.parse_args()
    if args.report:
        rows = [json.loads(line) for f in sorted(RESULTS.glob("production-*.jsonl"))
                for line in f.read_text().splitlines() if line.strip()]
        write_text_atomic(args.report, markdown(rows))
        print(f"wrote {args.report} ({len(rows)} rows)")
        return 0
    chosen = [p for p in POINTS if not args.only or p[0] in args.only.split(",")]
    print(f"wrote {run(chosen, args.timeout)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
