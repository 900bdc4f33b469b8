#!/usr/bin/env python
"""Where a process's first sitting spends its extra time: the 14-table Ali-CCP task on 2 GPUs,
its nine plans of run set1-20261202T132237Z, two sittings of 8 rounds measured in this process
(reference `torchrec`, profile cpu), the first under cProfile. Prints the profile's top
functions by cumulative time and each sitting's seconds. Measures (run it alone).

    .venv/bin/python studies/set1_development/first_sitting.py [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import json
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.evaluate import measured  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from shardlab.tables import Task  # noqa: E402

RUN = Path(__file__).resolve().parent / "results" / "set1-20261202T132237Z.jsonl.gz"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=25, help="functions of the profile to print")
    args = ap.parse_args(argv)
    rec = next(r for r in map(json.loads, gzip.open(RUN, "rt")) if r["kind"] == "task" and "-14x2-" in r["task"]["name"])
    task = Task.from_dict(rec["task"])
    plans = {m: Plan.from_dict(rec["plans"][m]) for m in rec["plans"]}
    real, done = measured.run_sitting, []

    def timed(spec, group=None, tick=None):
        t0 = time.perf_counter()
        if not done:
            prof = cProfile.Profile()
            out = prof.runcall(real, spec, group, tick)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)
        else:
            out = real(spec, group, tick)
        done.append(time.perf_counter() - t0)
        print(f"sitting {len(done)}: {done[-1]:.1f} s", flush=True)
        return out

    measured.run_sitting = timed          # in this process, so that both sittings are seen here
    measured.MeasuredEvaluator(profile="cpu", rounds=8, sittings=2, reference="torchrec", progress=False,
                               fresh_process=False).evaluate(task, plans)


if __name__ == "__main__":
    main()
