#!/usr/bin/env python
"""CUDA measurement campaign for a lent one-GPU device machine (scripts/gpu/README.md).

Each phase resumes from the store and stops taking work at its deadline, so a phase can be
split over several 10-minute device calls. The profile follows the GPU (``h100`` or ``h200``,
batch 65536, fp32, exact SGD: the seeds' setting); comm is not measured (one GPU cannot run
NCCL between ranks). Every op is timed by the package's compute profiler, on a GPU with CUDA
events (the provenance of every sample says ``compute_timing: cuda_events`` and records the
GPU's clocks, P-state and power limit).

    python scripts/gpu/campaign.py --store /tmp/gpu/store.db --phase fused --minutes 8
    phases: fused   (the compute ops of datasets/h100, train and test, timed again under their
                     keys: a before/after of the timer, op by op)
            compute (pool train tables, the CPU dataset's seed and caps: the same ops)
            test    (pool test tables)
            broad   (the broad space: column slices and row blocks of its tables)
            single  (each table of the stored compute samples alone)
            plans   (whole-plan compute of every registered method, NeuroShard table-wise too,
                     on the held-out tasks, in paired interleaved rounds)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.data.tasks import generate_task  # noqa: E402
from shardlab.measure.broad_campaign import BroadSpace, run_broad_campaign  # noqa: E402
from shardlab.measure.campaign import run_compute_campaign, run_single_table_costs  # noqa: E402
from shardlab.measure.compute import Job, run_jobs_prefetched  # noqa: E402
from shardlab.measure.hardware import HardwareProfile, environment, get_profile  # noqa: E402
from shardlab.measure.records import key_for_profile  # noqa: E402
from shardlab.measure.store import SampleStore, load_measured  # noqa: E402
from shardlab.search import get_sharder, run_sharder, sharder_names  # noqa: E402
from studies.common.heldout import SETS, heldout_tasks  # noqa: E402
from studies.common.methods import TABLE_WISE, split_methods  # noqa: E402
from studies.gpu_compute.plan_compute import measure_plan_compute  # noqa: E402

PHASES = ("fused", "compute", "test", "broad", "single", "plans")

#: The dataset whose compute ops the ``fused`` phase times again.
FUSED_FROM = "h100"


def gpu_profile() -> HardwareProfile:
    """The shipped profile for the visible GPU."""
    import torch

    name = torch.cuda.get_device_name()
    for key in ("h100", "h200"):
        if key.upper() in name.upper():
            return get_profile(key)
    raise SystemExit(f"campaign: no shipped profile for GPU '{name}' (add one to shardlab/measure/hardware.py)")


def fused_jobs(profile: HardwareProfile, dataset: str = FUSED_FROM, limit: int | None = None) -> list[Job]:
    """The compute ops of ``datasets/<dataset>`` in its order (the first ``limit``), each under
    its own key with ``profile``'s name in it (``compute:<profile>:<pool>:<split>:s<seed>:<i>``):
    the same tables, so the old and new timings pair op by op
    (``studies/gpu_compute/analysis.py``'s ``same_ops``)."""
    return [(key_for_profile(s["key"], profile.name), s["tables"]) for s in load_measured("compute", dataset)][:limit]


def plan_methods() -> list[str]:
    """Every registered sharder, and NeuroShard searching table-wise only beside it."""
    names = list(sharder_names())
    return names[:names.index("neuroshard") + 1] + [TABLE_WISE] + names[names.index("neuroshard") + 1:]


def runnable(methods: Sequence[str], batch_size: int) -> tuple[list[str], dict[str, str]]:
    """The methods that shard a small probe task here, and why each other one does not (e.g.
    torchrec where it is not installed): a method that cannot run is left out of the campaign
    rather than stored as skipped on every task."""
    probe = generate_task(ntables=12, ngpu=2, batch_size=batch_size, seed=0, name="probe")
    ok, left_out = [], {}
    for m in methods:
        try:
            run_sharder(get_sharder(m), probe, seed=0)
            ok.append(m)
        except Exception as e:  # noqa: BLE001 -- any failure: not runnable here, said why
            left_out[m] = f"{type(e).__name__}: {str(e)[:160]}"
    return ok, left_out


def run_fused(store_path: str, prof: HardwareProfile, workers: int, limit: int | None,
              deadline: float | None) -> int:
    """Time :func:`fused_jobs` not yet in the store (kind ``compute``); returns how many were added."""
    provenance = {**environment(prof.device), "profile": prof.to_dict(),
                  "campaign": {"kind": "compute", "replays": f"the compute ops of datasets/{FUSED_FROM}"}}
    with SampleStore(store_path) as store:
        done = store.keys("compute")
        jobs = [j for j in fused_jobs(prof, limit=limit) if j[0] not in done]
        return run_jobs_prefetched(store, "compute", jobs, prof, provenance, workers, f"fused ({prof.name})",
                                   False, deadline, total=len(jobs))


def run_phase(args: Any, prof: HardwareProfile, deadline: float | None) -> tuple[int, dict[str, str]]:
    """Run ``args.phase``; returns (samples added, methods left out with the reason)."""
    workers = max(1, args.workers)
    if args.phase == "fused":
        return run_fused(args.store, prof, args.workers, args.samples, deadline), {}
    if args.phase in ("compute", "test"):
        n = args.samples if args.phase == "compute" else min(args.samples, 600)
        return run_compute_campaign(args.store, n, prof, split="train" if args.phase == "compute" else "test",
                                    max_tables=15, mem_cap_gb=4.0, workers=workers, seed=0, progress=False,
                                    deadline=deadline), {}
    if args.phase == "single":
        return run_single_table_costs(args.store, prof, workers=workers, progress=False, deadline=deadline), {}
    if args.phase == "broad":
        return run_broad_campaign(args.store, args.samples, prof, space=BroadSpace(row_share=0.3), max_tables=10,
                                  mem_cap_gb=3.0, workers=workers, seed=7, progress=False, deadline=deadline), {}
    methods, left_out = runnable(split_methods(args.methods) if args.methods else plan_methods(), prof.batch_size)
    tasks = [t for g in args.ngpu for s in SETS
             for t in heldout_tasks(s, args.per_set, g, prof.batch_size, 16.0, 2_000_000)]
    return measure_plan_compute(args.store, tasks, methods, prof, rounds=args.rounds, workers=args.workers,
                                deadline=deadline, progress=False), left_out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--phase", required=True, choices=PHASES)
    ap.add_argument("--minutes", type=float, required=True, help="stop taking work after this long")
    ap.add_argument("--samples", type=int, default=3000, help="samples 0..N-1 (fused: the first N ops)")
    ap.add_argument("--workers", type=int, default=12, help="processes making lookup batches")
    ap.add_argument("--ngpu", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--per-set", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--methods", default=None, help="plans: comma-separated specs (default: every method)")
    ap.add_argument("--profile", default=None, help="a shipped profile instead of the GPU's (a dry run: cpu)")
    args = ap.parse_args(argv)
    deadline = time.monotonic() + 60 * args.minutes
    prof = get_profile(args.profile) if args.profile else gpu_profile()
    t0 = time.perf_counter()
    added, left_out = run_phase(args, prof, deadline)
    for m, why in left_out.items():
        print(f"{args.phase}: {m} left out (cannot run here: {why})", flush=True)
    with SampleStore(args.store) as store:
        kinds = store.kinds()
    print(f"{args.phase}: +{added} in {time.perf_counter() - t0:.0f} s; store {kinds}", flush=True)


if __name__ == "__main__":
    main()
