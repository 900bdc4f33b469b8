#!/usr/bin/env python
"""Where a search's time goes: ``shardlab shard TASK --method M`` under cProfile, on a task
``shardlab tasks`` draws (the production study's tasks: pool tables, 80 GB devices), model loading
included. Writes ``results/profile-<M>-<tables>x<gpus>-<UTC time>.md`` (a new file each run; the
runs kept before without the time are left as they are): wall seconds, then the functions with
the most time of their own and the most time under them. Timing: run it alone.

    .venv/bin/python studies/search_scaling/profile_search.py --tables 800 --gpus 64 [--method neuroshard]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.cli import main as cli_main  # noqa: E402
from shardlab.io import write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MEM_GB = 80.0
TOP = 25


def _table(stats: pstats.Stats, key: str) -> list[str]:
    """The TOP functions by ``key`` as markdown rows."""
    buf = io.StringIO()
    stats.stream = buf
    stats.sort_stats(key).print_stats(TOP)
    rows = ["| calls | own s | cumulative s | function |", "| ---: | ---: | ---: | --- |"]
    for line in buf.getvalue().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[1].replace(".", "", 1).isdigit():
            where = parts[5].replace(str(ROOT) + "/", "").replace(str(Path(sys.prefix)) + "/", "")
            rows.append(f"| {parts[0]} | {parts[1]} | {parts[3]} | `{where}` |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, required=True)
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--method", default="neuroshard")
    args = ap.parse_args(argv)
    cli = str(Path(sys.executable).parent / "shardlab")
    with tempfile.TemporaryDirectory() as tmp:
        task = Path(tmp) / "task.json"
        subprocess.run([cli, "tasks", "--ntables", str(args.tables), "--ngpu", str(args.gpus), "--mem-gb",
                        str(MEM_GB), "--split", "all" if args.tables > 2000 else "test", "--out", str(task)],
                       check=True, capture_output=True)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        rc = cli_main(["shard", str(task), "--method", args.method, "--out", str(Path(tmp) / "plan.json")])
        prof.disable()
        wall = time.perf_counter() - t0
    stats = pstats.Stats(prof)
    env = environment("cpu")
    lines = [f"# Profile: `{args.method}` on {args.tables} tables x {args.gpus} GPUs", "",
             f"`shardlab shard` in one process under cProfile (exit {rc}), model loading included: "
             f"**{wall:.1f} s** wall with the profiler's overhead; {env.get('hardware')}, git "
             f"{env.get('git')}. Command: `.venv/bin/python studies/search_scaling/profile_search.py "
             f"--tables {args.tables} --gpus {args.gpus} --method {args.method}`.", "",
             "## Most time of their own", "", *_table(stats, "tottime"), "",
             "## Most time under them", "", *_table(stats, "cumulative"), ""]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = RESULTS / f"profile-{args.method}-{args.tables}x{args.gpus}-{stamp}.md"
    write_text_atomic(out, "\n".join(lines))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
