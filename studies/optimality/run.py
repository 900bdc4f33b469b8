#!/usr/bin/env python
"""How far is each method's plan from the best plan that exists? Every method against the
exact planner's proven bound, under the analytic judge, from 4 to 2,000 tables and 2 to 128 GPUs;
and the exact planner's own targets (time, gap, memory). Run it alone (it times).

    .venv/bin/python studies/optimality/run.py [--quick] [--name optimality-<UTC>]
    .venv/bin/python studies/optimality/run.py --report studies/optimality/results/<name>.jsonl.gz   # plans nothing

1. **Targets** (:data:`TARGETS`), each in a fresh process (wall time and peak memory of the
   process, imports included): ``optimal[columns=false]`` on 60 x 8 table-wise tasks (10 s limit),
   ``optimal`` on 500 x 64 (60 s limit), and the bound of 10,000 x 1,024 (``optimal`` at its
   defaults: the averaged bound and the greedy plan).
2. **Gaps** (:func:`gap_tasks`): generated tasks of the default pool (:data:`GRID`, two seeds
   each), the development families (all tables, 4 GPUs) and the held-out-at-scale families
   (union tasks of 100 and 150 tables, 8 GPUs). Every method of :data:`METHODS` plans each task
   at its defaults for the default profile (``h100``; a method over its bounds or a study cap,
   :data:`CAPS`, is recorded as skipped); every plan is costed by the analytic judge
   (``ModelEvaluator("analytic")``, the GPU-cluster model) and quoted its gap to the best bound
   (:func:`~shardlab.search.optimal.plan_bound`: the exact planner's when the plan lies in its
   space, else the model's floor) and to the best plan found.
3. Appends each record to ``results/<name>.jsonl`` when it is done and rewrites ``<name>.md``
   and ``<name>.svg`` (gap against task size per method); the finished run is stored gzipped
   (``.jsonl.gz``, the same lines).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tqdm.auto import tqdm  # noqa: E402

from shardlab import constants as C  # noqa: E402
from shardlab.data.model_families import FAMILY_SETS, SCALE_FAMILY_SETS, family_task, union_task  # noqa: E402
from shardlab.data.tasks import generate_task  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.evaluate.model import ModelEvaluator  # noqa: E402
from shardlab.io import write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from shardlab.search import get_sharder, run_sharder  # noqa: E402
from shardlab.search.optimal import plan_bound  # noqa: E402
from shardlab.tables import Task  # noqa: E402
from studies.common.records import append_record, fresh_process_row, pack_run, read_text, run_name  # noqa: E402
from studies.optimality.report import markdown, svg  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PROFILE = C.PLAN_PROFILE
#: The exact planner's targets: (name, spec, tables, GPUs, seeds, target s, target gap).
TARGETS = (("60x8 table-wise", "optimal[columns=false]", 60, 8, (0, 1, 2), 10.0, 0.0),
           ("500x64", "optimal[time_limit_s=60]", 500, 64, (0,), 60.0, 0.02),
           ("10000x1024 bound", "optimal", 10_000, 1024, (0,), 60.0, None))
#: Memory target of the largest bound (GB of peak resident memory).
TARGET_GB = 2.0
#: Generated tasks: (tables, GPUs), each at two seeds.
GRID = ((4, 2), (8, 2), (12, 4), (20, 4), (40, 8), (60, 8), (100, 8), (200, 16), (500, 64), (1000, 64), (2000, 128))
QUICK_GRID = ((4, 2), (12, 4), (40, 8))
METHODS = C.BASELINE_METHODS + ("neuroshard", "optimal")
#: Rows of a development family's table are capped here (as the held-out studies do), so every
#: table fits a 4 GB device.
MAX_ROWS = 2_000_000
#: Study caps on tables x GPUs (kept under 10 minutes in all): TorchRec's planner and NeuroShard
#: take minutes beyond these on this 2-core machine (studies/search_scaling).
CAPS = {"torchrec": 32_000, "neuroshard": 64_000}


def gap_tasks(quick: bool) -> list[tuple[str, Task]]:
    """(family, task) of the gap study (module docstring)."""
    out = []
    for n, g in QUICK_GRID if quick else GRID:
        for seed in (0,) if quick else (0, 1):
            out.append(("generated", generate_task(ntables=n, ngpu=g, seed=seed, mem_cap_gb=16.0,
                                                   name=f"gen-{n}x{g}-s{seed}")))
    if quick:
        return out
    out += [("development", family_task(name, 4, 4.0, max_rows=MAX_ROWS)) for name in FAMILY_SETS]
    out += [("heldout_scale", union_task(SCALE_FAMILY_SETS, 8, 4.0, n, seed=0)) for n in (100, 150)]
    return out


def gap_record(family: str, task: Task) -> dict[str, Any]:
    """Every method's plan of ``task``, its judged cost, bound and gaps."""
    plans, skipped, seconds = {}, {}, {}
    work = len(task.tables) * task.ngpu
    for m in METHODS:
        if work > CAPS.get(m, work):
            skipped[m] = f"over the study's cap of {CAPS[m]} tables x GPUs"
            continue
        try:
            plans[m] = run_sharder(get_sharder(m, profile=PROFILE) if m in ("neuroshard", "optimal")
                                   else get_sharder(m), task)
            seconds[m] = plans[m].search_seconds
        except ShardlabError as e:
            skipped[m] = str(e).splitlines()[0]
    judge = ModelEvaluator("analytic", PROFILE, lower_bound=False)
    bundle, rowwise = judge.bundle(), judge.rowwise_model(judge.bundle())
    costs = {m: e.cost_ms for m, e in judge.evaluate(task, plans).items()}
    best = min(costs.values())
    opt = plans["optimal"].metadata["optimality"] if "optimal" in plans else {}
    rows = {}
    for m, cost in costs.items():
        bound, rests = plan_bound(task, plans[m], opt, bundle, rowwise)
        rows[m] = {"cost_ms": cost, "bound_ms": bound, "bound_rests_on": rests, "seconds": seconds[m],
                   "gap": None if not bound else cost / bound - 1.0, "gap_to_best": cost / best - 1.0}
    return {"family": family, "task": task.name, "tables": len(task.tables), "gpus": task.ngpu,
            "judge": bundle.source, "optimality": opt, "methods": rows, "skipped": skipped}


def target_point(spec: str, n: int, g: int, seed: int) -> dict[str, Any]:
    """One target run in this process (called in a fresh one)."""
    task = generate_task(ntables=n, ngpu=g, seed=seed, mem_cap_gb=16.0, name=f"target-{n}x{g}-s{seed}")
    start = time.perf_counter()
    plan = run_sharder(get_sharder(spec, profile=PROFILE), task)
    wall = time.perf_counter() - start
    o = plan.metadata["optimality"]
    return {"spec": spec, "tables": n, "gpus": g, "seed": seed, "wall_s": wall, "status": o["status"],
            "gap": o["gap"], "cost_ms": o["cost_ms"], "bound_ms": o["bound_ms"], "solver_s": o["seconds"],
            "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, "model": o["model"]}


def run_target(spec: str, n: int, g: int, seed: int, timeout_s: float = 600.0) -> dict[str, Any]:
    """:func:`target_point` in a fresh process; a failure or timeout is a row that says so."""
    cmd = [sys.executable, __file__, "--point", spec, str(n), str(g), str(seed)]
    return fresh_process_row(cmd, {"spec": spec, "tables": n, "gpus": g, "seed": seed}, timeout_s)


def write_reports(path: Path) -> None:
    """Rewrite ``<name>.md`` and ``<name>.svg`` beside ``path`` (``.jsonl`` or ``.jsonl.gz``) from its records."""
    lines = [json.loads(x) for x in read_text(path).splitlines() if x.strip()]
    header, records = lines[0], lines[1:]
    stem = path.with_name(run_name(path))
    write_text_atomic(str(stem) + ".svg", svg(records))
    write_text_atomic(str(stem) + ".md", markdown(header, records, stem.name + ".svg"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="three small tasks, one target point")
    ap.add_argument("--name", default=None, help="results stem (default optimality-<UTC>)")
    ap.add_argument("--report", default=None, help="rewrite the reports of this results file; plan nothing")
    ap.add_argument("--point", nargs=4, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.point:
        spec, n, g, seed = args.point
        print(json.dumps(target_point(spec, int(n), int(g), int(seed))))
        return
    if args.report:
        write_reports(Path(args.report))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = args.name or "optimality-" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{name}.jsonl"
    if path.exists():
        raise SystemExit(f"{path} exists: a run never writes over an earlier one (pick another --name)")
    header = {"kind": "header", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "environment": environment(), "profile": PROFILE, "methods": list(METHODS), "caps": CAPS,
              "command": "studies/optimality/run.py" + (" --quick" if args.quick else "")}
    with path.open("a") as f:
        append_record(f, header)
        targets = TARGETS[:1] if args.quick else TARGETS
        for label, spec, n, g, seeds, limit, gap in tqdm(targets, desc="targets"):
            for seed in seeds[:1] if args.quick else seeds:
                append_record(f, {"kind": "target", "target": label, "target_s": limit, "target_gap": gap,
                                  "target_gb": TARGET_GB, **run_target(spec, n, g, seed)})
                write_reports(path)
        for family, task in tqdm(gap_tasks(args.quick), desc="gap tasks"):
            append_record(f, {"kind": "gap", **gap_record(family, task)})
            write_reports(path)
    print(f"wrote {pack_run(path)} and {path.with_suffix('.md').name}")


if __name__ == "__main__":
    main()
