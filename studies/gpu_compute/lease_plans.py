"""The tasks and plans a lent GPU measures, made here on the CPU beforehand.

A lent GPU comes with minutes of device time and an image without TorchRec, so every plan it
measures is made here, by every registered method at its shipped defaults for the GPU profile
(``sharder_for(method, profile)``: the profile's cost models and policies), TorchRec's planner
included, and shipped in the repository as JSON. On the device only the measuring runs
(``scripts/gpu/lease.py``).

Tasks (:func:`lease_tasks`): the seeds' shapes -- 10, 20, ..., 60 tables of the default pool's
held-out (test) tables on 4 GPUs, dims drawn from 4..128, batch 65536, 4 GB per GPU -- and the
first (whole-family) held-out task of two model families on 8 GPUs (rows capped at 2,000,000,
4 GB per GPU). A method that refuses a task is recorded as skipped with its one-line reason.

    .venv/bin/python studies/gpu_compute/lease_plans.py [--profile h100] [--out PATH]
    .venv/bin/python studies/gpu_compute/lease_plans.py --add optimal   # a newly registered method, the rest kept
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab import constants as C  # noqa: E402
from shardlab.data.tasks import generate_task  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.io import read_json, write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment, get_profile  # noqa: E402
from shardlab.search import run_sharder, sharder_for, sharder_names  # noqa: E402
from shardlab.tables import Task  # noqa: E402
from studies.common.heldout import heldout_tasks  # noqa: E402
from studies.common.methods import TABLE_WISE  # noqa: E402

#: Where the plans are shipped (read by scripts/gpu/lease.py on the device), gzip-compressed:
#: the whole repository travels with each device call.
PLANS = Path(__file__).resolve().parent / "lease" / "plans.json.gz"
#: The seeds' table counts (4 GPUs each) and the held-out families measured on 8 GPUs.
SEED_TABLES = (10, 20, 30, 40, 50, 60)
SEED_GPUS = 4
FAMILIES = ("mlperf_dlrm_dcnv2_multihot", "taobao_tzrec_din")
FAMILY_GPUS = 8
MEM_GB = 4.0
MAX_ROWS = 2_000_000


#: A dry run's tasks (``--dry-run``): the same kinds, tiny (2 GPUs, 30 MB per GPU, rows <= 5,000,
#: 64 samples per batch), so that CI rehearses the whole lease on a CPU in seconds.
DRY = {"tables": (6, 9), "families": FAMILIES[:1], "seed_gpus": 2, "family_gpus": 2, "mem_gb": 0.03,
       "max_rows": 5_000, "batch_size": 64}


def lease_tasks(batch_size: int, dry: bool = False) -> list[Task]:
    """The seeds' shapes (pool test tables, seed 0 each) then one whole-family task per family
    (module docstring); ``dry``: the tiny tasks of :data:`DRY`."""
    tables, families, sg, fg, mem, rows = ((DRY["tables"], DRY["families"], DRY["seed_gpus"], DRY["family_gpus"],
                                            DRY["mem_gb"], DRY["max_rows"]) if dry else
                                           (SEED_TABLES, FAMILIES, SEED_GPUS, FAMILY_GPUS, MEM_GB, MAX_ROWS))
    out = [generate_task(ntables=n, ngpu=sg, mem_cap_gb=mem, batch_size=batch_size, seed=0,
                         split="test", dims=C.SEED_DIMS, name=f"seeds-{n}x{sg}") for n in tables]
    out += [heldout_tasks(f, 1, fg, batch_size, mem, rows)[0] for f in families]
    return out


def lease_methods() -> list[str]:
    """Every registered sharder, with NeuroShard searching table-wise only beside NeuroShard."""
    names = sharder_names()
    at = names.index("neuroshard") + 1
    return names[:at] + [TABLE_WISE] + names[at:]


def make_plans(tasks: Sequence[Task], methods: Sequence[str], profile: str, seed: int = 0,
               progress: bool = True) -> list[dict[str, Any]]:
    """Per task: the task, each method's plan (Plan JSON), skipped methods and why, search seconds."""
    out = []
    for task in tasks:
        plans, skipped, seconds = {}, {}, {}
        for m in methods:
            t0 = time.perf_counter()
            try:
                plans[m] = run_sharder(sharder_for(m, profile), task, seed=seed).to_dict()
            except ShardlabError as e:
                skipped[m] = str(e)
            seconds[m] = round(time.perf_counter() - t0, 3)
            if progress:
                print(f"{task.name}: {m} {'skipped' if m in skipped else 'planned'} in {seconds[m]:.1f} s", flush=True)
        out.append({"task": task.to_dict(), "plans": plans, "skipped": skipped, "search_seconds": seconds})
    return out


def read_plans(path: Path) -> tuple[dict, str]:
    """The plans at ``path`` (``.json`` or gzip-compressed ``.json.gz``) and the sha256 of their
    JSON text (the digest of the uncompressed file, so that it is the same either way)."""
    raw = Path(path).read_bytes()
    if Path(path).suffix == ".gz":
        raw = gzip.decompress(raw)
    return json.loads(raw), hashlib.sha256(raw).hexdigest()


def add_methods(path: Path, methods: Sequence[str], argv: Sequence[str] | None = None) -> None:
    """Plan ``methods`` on the tasks of the plans at ``path`` and add them there; every plan
    already made is kept as it was, and ``made["added"]`` records when and how the new ones were
    made. ``made["methods"]`` becomes :func:`lease_methods` (so each must be registered)."""
    data = read_json(str(path))
    made = data["made"]
    tasks = [Task.from_dict(e["task"]) for e in data["tasks"]]
    for entry, new in zip(data["tasks"], make_plans(tasks, methods, made["profile"], made.get("seed", 0))):
        for key in ("plans", "skipped", "search_seconds"):
            entry[key].update(new[key])
    made.setdefault("added", []).append({**environment("cpu"), "methods": list(methods), "command":
                                         "studies/gpu_compute/lease_plans.py " + " ".join(argv or sys.argv[1:])})
    made["methods"] = lease_methods()
    write_json_atomic(str(path), data)
    print(f"added {', '.join(methods)} to {path}: {len(tasks)} tasks")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="h100", help="the GPU profile the plans are made for")
    ap.add_argument("--out", type=Path, default=PLANS)
    ap.add_argument("--dry-run", action="store_true", help="tiny tasks, for a CPU rehearsal of the lease (needs --out)")
    ap.add_argument("--add", default=None, help="plan only these comma-separated methods (newly registered ones) "
                                                 "and add them to the plans in --out, the others kept as made")
    args = ap.parse_args(argv)
    if args.add:
        add_methods(args.out, [m.strip() for m in args.add.split(",") if m.strip()], argv)
        return
    if args.dry_run and args.out == PLANS:
        raise SystemExit("lease_plans: --dry-run writes tiny plans: give --out (the shipped plans stay as they are)")
    prof = get_profile(args.profile)
    tasks = lease_tasks(DRY["batch_size"] if args.dry_run else prof.batch_size, args.dry_run)
    methods = lease_methods()
    made = {**environment("cpu"), "command": "studies/gpu_compute/lease_plans.py " + " ".join(argv or sys.argv[1:]),
            "profile": prof.name, "seed": 0, "methods": methods}
    write_json_atomic(str(args.out), {"made": made, "tasks": make_plans(tasks, methods, prof.name)})
    print(f"wrote {args.out}: {len(tasks)} tasks x {len(methods)} methods")


if __name__ == "__main__":
    main()
