#!/usr/bin/env python
"""Do two fresh sittings of the same comparison agree? The same plans of the same development
tasks measured in separate sittings (fresh processes, fresh ranks, run an hour or more apart),
each sitting judged on its own rounds; the report counts, for every pair of sittings, the plan
pairs whose verdict is the same in both and those whose verdicts are opposite (faster in one,
slower in the other). Every sitting ever measured is kept and every pair of them is reported:
none is chosen after looking.

    .venv/bin/python studies/sitting_agreement/run.py plan       # once: tasks and plans (no timing)
    .venv/bin/python studies/sitting_agreement/run.py sitting    # one sitting (measurement, run alone)
    .venv/bin/python studies/sitting_agreement/run.py report     # every pair of sittings kept so far

Tasks: the development families (``datasets/heldout_models``, never the sealed set), one task of
16 tables (all of a smaller family's) per family on 2 and on 4 devices (seeds 3000 + k, rows capped at 2,000,000 for this
CPU), planned under the ``cpu`` profile and measured under it at batch 1024 with 5 timed runs per
op after 2 warm-ups (``cpu[batch_size=1024,repeats=5,warmup=2]``: a sitting in minutes; at the
profile's batch of 4096 and 10 runs it took about 20). Plans: the five heuristics, TorchRec's
planner and NeuroShard, identical plans measured once. A sitting: :class:`MeasuredEvaluator`,
8 timed paired rounds after 1 warm-up round, lookups of the sitting's own batches, every
measurement journalled as taken (``results/sitting-<UTC>.jsonl``), the Evaluations of each task
appended to ``results/sitting-<UTC>.json`` as it completes. Plan pairs: every two distinct plans
of a task, the paired ratio from that sitting's rounds alone
(:func:`shardlab.evaluate.stats.paired_ratio_ci`, with the profile's between-sitting spread) and
its verdict (margin 5%).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab import constants as C  # noqa: E402
from shardlab.data.model_families import FAMILY_SETS, family_set, family_task  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.evaluate import MeasuredEvaluator  # noqa: E402
from shardlab.evaluate.evaluation import Evaluation  # noqa: E402
from shardlab.io import read_json, write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from shardlab.measure.hardware import environment, get_profile, git_revision, profile_with  # noqa: E402
from shardlab.search import run_sharders  # noqa: E402
from shardlab.tables import Task  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
COMPARISONS = RESULTS / "comparisons.json"
METHODS = ("random", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy", "torchrec", "neuroshard")
PROFILE, ROUNDS, NTABLES, MAX_ROWS, MEM_GB = "cpu", 8, 16, 2_000_000, 4.0
#: The measuring profile: ``cpu`` at batch 1024, 5 timed runs per op after 2 warm-ups.
MEASURE = dict(batch_size=1024, repeats=5, warmup=2)


def cmd_plan(_: argparse.Namespace) -> None:
    """Draw the tasks and make their plans, once (refuses to redo: the sittings must judge the same plans)."""
    if COMPARISONS.exists():
        raise ShardlabError(f"{COMPARISONS.name} exists: the sittings compare its plans; it is never redrawn")
    prof = get_profile(PROFILE)
    out = []
    for k, (family, ngpu) in enumerate(itertools.product(FAMILY_SETS, (2, 4))):
        size = min(NTABLES, len(family_set(family)["tables"]))
        task = family_task(family, ngpu, MEM_GB, prof.batch_size, ntables=size, seed=3000 + k, max_rows=MAX_ROWS)
        plans = run_sharders(task, list(METHODS), seed=0, profile=PROFILE)
        out.append({"family": family, "task": task.to_dict(),
                    "plans": {m: p.to_dict() for m, p in plans.items() if p is not None}})
        print(f"{task.name}: {len(out[-1]['plans'])} plans")
    write_json_atomic(COMPARISONS, {"made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                                    "git": git_revision(), "profile": PROFILE, "methods": list(METHODS),
                                    "tasks": out})


def cmd_sitting(args: argparse.Namespace) -> None:
    """Measure every task's plans in one sitting; nothing earlier is touched."""
    data = read_json(COMPARISONS)
    started = dt.datetime.now(dt.timezone.utc)
    stem = RESULTS / f"sitting-{started.strftime('%Y%m%dT%H%M%SZ')}"
    index = len(list(RESULTS.glob("sitting-*.json")))
    head = {"started_utc": started.isoformat(timespec="seconds"), "sitting_index": index, "rounds": ROUNDS,
            "seed": index, "profile": profile_with(PROFILE, **MEASURE).name, "environment": environment("cpu"), "git": git_revision()}
    with open(f"{stem}.json", "a") as f:
        f.write(json.dumps({"header": head}) + "\n")
    t0 = time.perf_counter()
    for entry in data["tasks"][: args.tasks]:
        task = Task.from_dict(entry["task"])
        plans = {m: Plan.from_dict(p) for m, p in entry["plans"].items()}
        ev = MeasuredEvaluator(profile_with(PROFILE, **MEASURE), rounds=ROUNDS, warmup_rounds=1, seed=index, reference=next(iter(plans)),
                               lower_bound=False, journal=f"{stem}.jsonl", progress=not args.no_progress)
        evs = ev.evaluate(task, plans)
        with open(f"{stem}.json", "a") as f:
            f.write(json.dumps({"task": task.name, "evaluations": {m: e.to_dict() for m, e in evs.items()}}) + "\n")
            f.flush()
        print(f"{task.name}: {len(plans)} plans in {ev.seconds_:.0f} s", flush=True)
    print(f"sitting {stem.name}: {time.perf_counter() - t0:.0f} s")


def load_sittings() -> list[dict]:
    """Every sitting kept: header and task -> method -> Evaluation, in the order they were made."""
    out = []
    for path in sorted(RESULTS.glob("sitting-*.json")):
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        tasks = {x["task"]: {m: Evaluation.from_dict(e) for m, e in x["evaluations"].items()} for x in lines[1:]}
        out.append({"file": path.name, "header": lines[0]["header"], "tasks": tasks})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    sub.add_parser("plan", help="draw the tasks and make the plans (once)")
    s = sub.add_parser("sitting", help="one sitting of every comparison (measurement: run alone)")
    s.add_argument("--tasks", type=int, default=None, help="only the first N tasks (a trial; default all)")
    s.add_argument("--no-progress", action="store_true", help="no progress bars")
    sub.add_parser("report", help="agreement between every two sittings kept")
    args = p.parse_args()
    try:
        if args.verb == "report":
            from studies.sitting_agreement.report import cmd_report
            cmd_report(load_sittings(), read_json(COMPARISONS))
        else:
            {"plan": cmd_plan, "sitting": cmd_sitting}[args.verb](args)
    except ShardlabError as e:
        print(f"sitting_agreement: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
