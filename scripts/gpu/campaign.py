#!/usr/bin/env python
"""CUDA measurement campaign for a lent one-GPU device machine (scripts/gpu/README.md).

Each phase resumes from the store and stops taking work at its deadline, so a phase can be
split over several 10-minute device calls. The profile follows the GPU (``h100`` or ``h200``,
batch 65536, fp32, exact SGD: the seeds' setting); comm is not measured (one GPU cannot run
NCCL between ranks).

    python scripts/gpu/campaign.py --store /tmp/gpu/store.db --phase compute --minutes 5
    phases: compute (pool train tables, the CPU dataset's seed and caps: the same ops),
            test (pool test tables), single (each table of the stored samples alone),
            plans (whole-plan compute of heuristic + NeuroShard plans of held-out tasks),
            broad (the broad space, with row blocks)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab import constants as C  # noqa: E402
from shardlab.profile.broad_campaign import BroadSpace, run_broad_campaign  # noqa: E402
from shardlab.profile.campaign import run_compute_campaign, run_single_table_costs  # noqa: E402
from shardlab.profile.hardware import get_profile  # noqa: E402
from shardlab.profile.store import SampleStore  # noqa: E402
from studies.common.heldout import SETS, heldout_tasks  # noqa: E402
from studies.common.methods import TABLE_WISE  # noqa: E402
from studies.gpu_compute.plan_compute import measure_plan_compute  # noqa: E402


def gpu_profile():
    """The shipped profile for the visible GPU."""
    import torch

    name = torch.cuda.get_device_name()
    for key in ("h100", "h200"):
        if key.upper() in name.upper():
            return get_profile(key)
    raise SystemExit(f"campaign: no shipped profile for GPU '{name}' (add one to shardlab/profile/hardware.py)")


def plan_tasks(ngpus: list[int], per_set: int, mem_cap_gb: float, batch_size: int):
    """Held-out tasks: every public model family's set and the pool's test tables."""
    return [t for g in ngpus for s in SETS for t in heldout_tasks(s, per_set, g, batch_size, mem_cap_gb, 2_000_000)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--phase", required=True, choices=["compute", "test", "single", "plans", "broad"])
    ap.add_argument("--minutes", type=float, required=True, help="stop taking work after this long")
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=12, help="processes making lookup batches")
    ap.add_argument("--ngpu", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--per-set", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", default=None, help="a shipped profile instead of the GPU's (a dry run: cpu)")
    args = ap.parse_args()
    deadline = time.monotonic() + 60 * args.minutes
    prof = get_profile(args.profile) if args.profile else gpu_profile()
    t0 = time.perf_counter()
    if args.phase in ("compute", "test"):
        n = args.samples if args.phase == "compute" else min(args.samples, 600)
        added = run_compute_campaign(args.store, n, prof, split="train" if args.phase == "compute" else "test",
                                     max_tables=15, mem_cap_gb=4.0, workers=args.workers, seed=0,
                                     progress=False, deadline=deadline)
    elif args.phase == "single":
        added = run_single_table_costs(args.store, prof, workers=args.workers, progress=False, deadline=deadline)
    elif args.phase == "broad":
        added = run_broad_campaign(args.store, args.samples, prof, space=BroadSpace(row_share=0.3), max_tables=10,
                                   mem_cap_gb=3.0, workers=args.workers, seed=7, progress=False, deadline=deadline)
    else:
        tasks = plan_tasks(args.ngpu, args.per_set, 16.0, prof.batch_size)
        added = measure_plan_compute(args.store, tasks, C.HEURISTIC_METHODS + (TABLE_WISE, "neuroshard"), prof,
                                     rounds=args.rounds, workers=args.workers, deadline=deadline, progress=False)
    with SampleStore(args.store) as store:
        kinds = store.kinds()
    print(f"{args.phase}: +{added} in {time.perf_counter() - t0:.0f} s; store {kinds}", flush=True)


if __name__ == "__main__":
    main()
