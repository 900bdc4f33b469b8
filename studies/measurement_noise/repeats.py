#!/usr/bin/env python
"""How many timed passes a round should give each op and each all-to-all: on one task of set 1,
rounds of its plans measured at several repeat counts, alternating round by round, and per count
the seconds a round took and the per-round log-sd of the plans' paired ratios (to the first
plan) in compute, comm and the whole step. Measurement: run it alone.

    .venv/bin/python studies/measurement_noise/repeats.py [--task 1] [--rounds 10] [--repeats 10,30]

Writes ``results/repeats-<task>-<UTC>.{json,md}``. Every round is measured as a budgeted
comparison measures it (``shardlab.evaluate.plan_round.measure_round``, one comm bench and one
op cache for the whole run, the budget's warm-up), at ``profile_with(repeats=R)``, which sets
the passes of the ops and of the all-to-alls alike.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from shardlab.data.lookups import device_tables  # noqa: E402
from shardlab.evaluate.measured import budget_profile  # noqa: E402
from shardlab.evaluate.plan_round import measurable, measure_round  # noqa: E402
from shardlab.evaluate.exchange import comm_pattern  # noqa: E402
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.comm import CommBench  # noqa: E402
from shardlab.measure.hardware import environment, kept_memory, profile_with  # noqa: E402
from shardlab.measure.op_cache import OpCache  # noqa: E402
from studies.sealed_test.draw import load_manifest, manifest_path, sealed_task  # noqa: E402
from studies.sealed_test.run import plans_of  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("random", "size_greedy", "dim_greedy", "lookup_greedy", "torchrec")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", type=int, default=1, help="index of the set-1 task")
    ap.add_argument("--rounds", type=int, default=10, help="rounds per repeat count")
    ap.add_argument("--repeats", default="10,30", help="comma-separated timed passes per op and all-to-all")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.repeats.split(",")]
    manifest = load_manifest(manifest_path("1"))
    entry = manifest["tasks"][args.task]
    task = sealed_task(manifest, entry)
    base = budget_profile(profile_with("cpu", batch_size=task.batch_size))
    plans, _ = plans_of(task, METHODS, "cpu", int(entry["seed"]))
    task, _ = measurable(task)
    shards = {k: device_tables(task, p) for k, p in plans.items()}
    patterns = {k: comm_pattern(task, p, base.batch_size) for k, p in plans.items()}
    names = list(plans)
    got: dict[int, list] = {r: [] for r in counts}
    secs: dict[int, list] = {r: [] for r in counts}
    rng = np.random.default_rng(0)
    with CommBench.for_profile(task.ngpu, base) as bench, kept_memory():
        ops = OpCache.for_this_host()
        for i in range(args.rounds + 1):                  # round 0: warm-up, not kept
            for r in [counts[j] for j in rng.permutation(len(counts))]:
                prof = profile_with(base, repeats=r)
                t0 = time.perf_counter()
                m = measure_round(task, shards, patterns, prof, bench, ops, 0, [0, i, r])
                if i:
                    secs[r].append(time.perf_counter() - t0)
                    got[r].append(m)
            print(f"round {i}/{args.rounds}", flush=True)
    out = {"task": task.name, "plans": names, "environment": environment("cpu"), "profile": base.name,
           "rounds": args.rounds, "by_repeats": {}}
    lines = [f"# Timed passes per round: `{task.name}`", "",
             f"{len(names)} plans ({', '.join(names)}), {args.rounds} rounds per count, alternating; "
             f"per-round log-sd of each plan's paired ratio to `{names[0]}` (median over plans).", "",
             "| passes | s per round | compute | comm | step |", "| ---: | ---: | ---: | ---: | ---: |"]
    for r in counts:
        parts = {"compute": lambda a: a[:, :2].sum(axis=1).max(), "comm": lambda a: a[:, 2:].sum(axis=1).max(),
                 "step": lambda a: a.sum(axis=1).max()}
        sd = {}
        for part, f in parts.items():
            per = [np.std(np.log([f(m[n]) / f(m[names[0]]) for m in got[r]]), ddof=1) for n in names[1:]]
            sd[part] = float(np.median(per))
        out["by_repeats"][str(r)] = {"seconds_per_round": float(np.mean(secs[r])), "log_sd": sd}
        lines.append(f"| {r} | {np.mean(secs[r]):.2f} | {sd['compute']:.3f} | {sd['comm']:.3f} | {sd['step']:.3f} |")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = f"repeats-{args.task}-{stamp}"
    write_json_atomic(RESULTS / f"{name}.json", out)
    write_text_atomic(RESULTS / f"{name}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
