#!/usr/bin/env python3
"""The measuring call of a GPU lease: everything a lent GPU is for, in one command of a few
minutes, in priority order, each result written as it is measured and useful alone.

    python3 scripts/gpu/lease.py --out "$OUT" --minutes 6.2                # on the lent GPU
    python3 scripts/gpu/lease.py --out DIR --minutes 1 --profile cpu --dry-run   # here, in CI

Phases (each stops taking work at its share of ``--minutes``; time a phase leaves over goes to
the next):

1. ``plans`` -> ``plan_rounds.jsonl``: the seeds' question. The tasks and every method's plan
   were made beforehand on the CPU (``studies/gpu_compute/lease_plans.py``, TorchRec's planner
   included) and are read from ``studies/gpu_compute/lease/plans.json.gz``. Per task, every
   distinct plan's devices are timed one fused op at a time (forward + backward with the fused
   SGD update, CUDA events: ``shardlab.measure.compute``), in paired, interleaved rounds (orders
   shuffled per round, seeded; identical shards timed once per round): first
   ``SELECTION_ROUNDS`` rounds of the baselines alone, which pick the reference, then
   ``ROUNDS`` judged rounds of every plan. One JSON line per round (per device ``[fw, bw]``
   ms), flushed and synced. The all-to-alls are not measured (one GPU cannot run NCCL between
   ranks): ``studies/gpu_compute/lease_report.py`` adds them from the labelled topology model.
2. ``fused`` -> ``floor.db`` (kind ``compute``): a stratified subset of ``datasets/h100``'s
   fused ops (host-timed), timed again with CUDA events under their own keys: the floor,
   before and after, op by op.
3. ``single`` -> ``floor.db`` (kind ``single``): a stratified subset of its single tables.
4. ``broad`` -> ``broad.db``: fused ops of the broad space (column slices, row blocks).

Lookup batches are made by ``--workers`` CPU processes: per table once per task for the plans
(device ops are concatenations of their tables' batches, exactly as
:func:`~shardlab.measure.compute.fused_inputs` makes them), per op for the campaigns.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from shardlab import constants as C  # noqa: E402
from shardlab.evaluate.measured import measurable, round_orders, shard_key  # noqa: E402
from shardlab.evaluate.reference import baseline_names  # noqa: E402
from shardlab.data.lookups import device_tables  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from shardlab.processes import ignore_sigint  # noqa: E402
from shardlab.measure.broad_campaign import BroadSpace, run_broad_campaign  # noqa: E402
from shardlab.measure.compute import make_inputs, measure_compute, run_jobs_prefetched  # noqa: E402
from shardlab.measure.hardware import HardwareProfile, environment, get_profile  # noqa: E402
from shardlab.measure.records import key_for_profile  # noqa: E402
from shardlab.measure.store import SampleStore, load_measured  # noqa: E402
from shardlab.tables import Table, Task  # noqa: E402
from studies.gpu_compute.lease_plans import DRY as DRY_TASKS, PLANS, read_plans  # noqa: E402

#: Judged rounds per task (>= 5: the 95% interval's ends are then rounds of their own).
ROUNDS = 5
#: The dataset whose ops and single tables are timed again, and how many of each.
FLOOR_FROM = "h100"
FLOOR_OPS = 240
FLOOR_SINGLES = 120
#: Cumulative shares of ``--minutes`` at which each phase stops taking work.
PHASE_ENDS = {"plans": 0.50, "fused": 0.85, "single": 0.90, "broad": 1.0}
#: What ``--dry-run`` shrinks (tiny sizes: CI runs the same phases on the CPU in seconds).
DRY = {"batch_size": DRY_TASKS["batch_size"], "warmup": 1, "repeats": 2, "input_batches": 1, "rounds": 3,
       "fused": 3, "single": 3, "broad": 2, "max_gb": 0.1}


def stratified(samples: Sequence[dict[str, Any]], n: int, strata: int = 8) -> list[dict[str, Any]]:
    """``n`` samples spread evenly over ``strata`` bins of their measured ``total_ms`` (ranked),
    evenly spaced inside each bin; deterministic, no draw."""
    ranked = sorted(samples, key=lambda s: (s["total_ms"], s["key"]))
    bins = np.array_split(np.arange(len(ranked)), strata)
    per = [n // strata + (1 if i < n % strata else 0) for i in range(strata)]
    out = []
    for b, k in zip(bins, per):
        for j in np.unique(np.linspace(0, len(b) - 1, num=min(k, len(b))).round().astype(int)):
            out.append(ranked[b[j]])
    return out


class RoundLog:
    """``plan_rounds.jsonl``: a header line, then one line per round, each flushed and synced."""

    def __init__(self, path: Path, header: dict[str, Any]):
        self.f = open(path, "a")
        self.write({"header": header})

    def write(self, line: dict[str, Any]) -> None:
        self.f.write(json.dumps(line) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())


def table_key(t: Table) -> str:
    return json.dumps(t.to_dict(), sort_keys=True)


def task_inputs(pool: ProcessPoolExecutor, tables: Sequence[Table], prof: HardwareProfile) -> dict[str, Future]:
    """Each distinct table's lookup batches, made by the pool (not waited for)."""
    uniq = {table_key(t): t for t in tables}
    return {k: pool.submit(make_inputs, [t.to_dict()], prof.batch_size, prof.input_batches) for k, t in uniq.items()}


def shard_batches(tables: Sequence[Table], per_table: dict[str, list], device: torch.device) -> list:
    """One device's op inputs: its tables' batches concatenated in order, offsets shifted."""
    out = []
    for k in range(len(next(iter(per_table.values())))):
        idx, offs, base = [], [], 0
        for t in tables:
            i, o = per_table[table_key(t)][k]
            idx.append(i)
            offs.append(o[:-1] + base)
            base += i.numel()
        offs.append(torch.tensor([base], dtype=torch.int64, device=device))
        out.append((torch.cat(idx), torch.cat(offs)))
    return out


def run_plans(entries: list[dict[str, Any]], prof: HardwareProfile, log: RoundLog, pool: ProcessPoolExecutor,
              rounds: int, max_gb: float, deadline: float, seed: int = 0) -> int:
    """Phase 1 (module docstring); returns the rounds written."""
    device = torch.device("cuda" if prof.device == "cuda" else "cpu")
    tasks = [measurable(Task.from_dict(e["task"]))[0] for e in entries]
    shards = [{m: device_tables(t, Plan.from_dict(p)) for m, p in e["plans"].items()} for t, e in zip(tasks, entries)]
    pending = task_inputs(pool, [x for s in shards[0].values() for ts in s for x in ts], prof)
    written = 0
    for i, (task, e) in enumerate(zip(tasks, entries)):
        if time.monotonic() > deadline:
            break
        t0 = time.perf_counter()
        per_table = {k: [(torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)) for a, b in f.result()]
                     for k, f in pending.items()}
        if i + 1 < len(entries):      # the next task's batches are made while this one is timed
            pending = task_inputs(pool, [x for s in shards[i + 1].values() for ts in s for x in ts], prof)
        sig = {m: tuple(shard_key(ts) for ts in s) for m, s in shards[i].items()}
        rep: dict[tuple, str] = {}
        for m in e["plans"]:
            rep.setdefault(sig[m], m)
        items = list(rep.values())
        base = list(dict.fromkeys(rep[sig[m]] for m in baseline_names({m: Plan.from_dict(p)
                                                                      for m, p in e["plans"].items()})))
        schedule = [("selection", r, o) for r, o in enumerate(round_orders(base, C.SELECTION_ROUNDS, seed, 0x5E1))]
        schedule += [("judged", r, o) for r, o in enumerate(round_orders(items, rounds, seed))]
        for sitting, r, order in schedule:
            if time.monotonic() > deadline:
                break
            cache: dict[tuple, list[float]] = {}
            ms: dict[str, list[list[float]]] = {}
            for m in order:
                per_device = []
                for ts in shards[i][m]:
                    if not ts:
                        per_device.append([0.0, 0.0])
                        continue
                    key = shard_key(ts)
                    if key not in cache:
                        rec = measure_compute(list(ts), prof, max_gb=max_gb,
                                              inputs=shard_batches(ts, per_table, device))
                        cache[key] = [rec.fw_ms, rec.bw_ms]
                    per_device.append(cache[key])
                ms[m] = per_device
            log.write({"task": task.name, "sitting": sitting, "round": r, "order": order,
                       "same_as": {m: rep[sig[m]] for m in e["plans"] if rep[sig[m]] != m}, "compute_ms": ms})
            written += 1
        print(f"plans: {task.name} ({task.ngpu} GPUs, {len(items)} distinct plans) in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        del per_table
    for f in pending.values():
        f.cancel()
    return written


def run_floor(store: str, prof: HardwareProfile, kind: str, n: int, workers: int, max_gb: float,
              deadline: float) -> int:
    """Phases 2-3: a stratified ``n`` of ``datasets/h100``'s ``kind`` samples (of those within
    ``max_gb``) timed again, under their keys (``profile.name`` in the key: the h100 profile
    keeps them, so old and new pair by key)."""
    fits = [s for s in load_measured(kind, FLOOR_FROM)
            if sum(Table.from_dict(t).memory_bytes(prof.weights_precision, prof.optimizer) for t in s["tables"])
            <= max_gb * C.GB]
    picked = stratified(fits, n)
    jobs = [(key_for_profile(s["key"], prof.name), s["tables"]) for s in picked]
    provenance = {**environment(prof.device), "profile": prof.to_dict(),
                  "campaign": {"kind": kind, "replays": f"a stratified {n} of datasets/{FLOOR_FROM}'s {kind} samples "
                                                        "(8 bins of their host-timed total_ms)"}}
    with SampleStore(store) as st:
        done = st.keys(kind)
        todo = [j for j in jobs if j[0] not in done]
        return run_jobs_prefetched(st, kind, todo, prof, provenance, workers, f"{kind} ({prof.name})", False,
                                   deadline, max_gb=max_gb, total=len(todo))


def kernel_check(prof: HardwareProfile, seed: int = 0) -> dict[str, Any]:
    """Before anything is timed: one small fused op built as every measurement builds it
    (:func:`~shardlab.measure.compute.build_tbe`) runs forward and backward, and its pooled
    output must equal the sums of its own weight rows (torch, fp32) to 1e-4: a wrong or
    unloadable kernel stops the lease here, in one line, not after minutes of numbers."""
    from shardlab.measure.compute import build_tbe

    device = torch.device("cuda" if prof.device == "cuda" else "cpu")
    tables = [Table(f"check{i}", rows, dim, 3.0, (1.0,) + (0.0,) * (C.N_REUSE_BINS - 1)) for i, (rows, dim) in enumerate(((1000, 8), (5000, 64)))]
    op = build_tbe(tables, prof, device)
    gen = torch.Generator().manual_seed(seed)
    batch, idx, offs, ref_parts = 256, [], [0], []
    weights = [w.detach().float().cpu().clone() for w in op.split_embedding_weights()]
    for t, w in zip(tables, weights):
        lengths = torch.randint(0, 6, (batch,), generator=gen)
        ids = torch.randint(0, t.rows, (int(lengths.sum()),), generator=gen)
        bag = torch.repeat_interleave(torch.arange(batch), lengths)
        ref_parts.append(torch.zeros(batch, t.dim).index_add_(0, bag, w[ids]))
        idx.append(ids)
        offs.extend((offs[-1] + torch.cumsum(lengths, 0)).tolist())
    out = op(torch.cat(idx).to(device), torch.tensor(offs, device=device))
    out.backward(torch.ones_like(out))
    if device.type == "cuda":
        torch.cuda.synchronize()
    err = float((out.detach().float().cpu() - torch.cat(ref_parts, dim=1)).abs().max())
    if not err <= 1e-4:
        raise SystemExit(f"lease: the fused op's forward is wrong on this machine (max abs error {err:.3g}); nothing timed")
    return {"fused_op_forward_max_abs_error": err, "backward": "ran"}


def lease_profile(name: str | None, dry: bool) -> HardwareProfile:
    """The profile measured: the named one, else the visible GPU's (h100 or h200); shrunk for a dry run."""
    if name is None:
        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
        name = next((k for k in ("h200", "h100") if k.upper() in gpu.upper()), None)
        if name is None:
            raise SystemExit(f"lease: no shipped profile for GPU '{gpu or 'none visible'}' (--profile cpu --dry-run here)")
    prof = get_profile(name)
    return replace(prof, **{k: DRY[k] for k in ("batch_size", "warmup", "repeats", "input_batches")}) if dry else prof


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the results (the device's $OUT)")
    ap.add_argument("--minutes", type=float, required=True, help="measuring budget; phases stop taking work at their share")
    ap.add_argument("--profile", default=None, help="default: the visible GPU's (h100 / h200)")
    ap.add_argument("--plans", type=Path, default=PLANS)
    ap.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--phases", default=",".join(PHASE_ENDS), help="comma-separated subset, in this order")
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes (a CPU rehearsal of every phase)")
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    ends = {p: t_start + 60 * args.minutes * share for p, share in PHASE_ENDS.items()}
    phases = [p for p in args.phases.split(",") if p]
    if any(p not in PHASE_ENDS for p in phases):
        raise SystemExit(f"lease: --phases must name some of {', '.join(PHASE_ENDS)}")
    prof = lease_profile(args.profile, args.dry_run)
    dry = DRY if args.dry_run else None
    max_gb = dry["max_gb"] if dry else 8.0
    args.out.mkdir(parents=True, exist_ok=True)
    plans, plans_sha256 = read_plans(args.plans)
    entries = plans["tasks"]
    env = {**environment(prof.device), "kernel_check": kernel_check(prof)}
    print(f"lease: {env.get('hardware')} profile {prof.name} ({env.get('compute_timing')}); kernel check "
          f"{env['kernel_check']}; phases {phases}", flush=True)
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(args.workers, mp_context=ctx, initializer=ignore_sigint) as pool:
        if "plans" in phases:
            header = {**env, "profile": prof.to_dict(), "rounds": dry["rounds"] if dry else ROUNDS,
                      "selection_rounds": C.SELECTION_ROUNDS, "seed": 0, "dry_run": bool(dry),
                      "plans_file": str(args.plans.relative_to(ROOT)) if args.plans.is_relative_to(ROOT) else args.plans.name,
                      "plans_sha256": plans_sha256, "plans_made": plans["made"],
                      "covers": "compute only, per device: fused forward + backward (ms); all-to-alls not measured"}
            n = run_plans(entries, prof, RoundLog(args.out / "plan_rounds.jsonl", header), pool,
                          dry["rounds"] if dry else ROUNDS, max_gb, ends["plans"])
            print(f"plans: {n} rounds written ({time.monotonic() - t_start:.0f} s)", flush=True)
    for kind, phase, n in (("compute", "fused", FLOOR_OPS), ("single", "single", FLOOR_SINGLES)):
        if phase in phases:
            added = run_floor(str(args.out / "floor.db"), prof, kind, dry[phase] if dry else n, args.workers,
                              max_gb, ends[phase])
            print(f"{phase}: +{added} ({time.monotonic() - t_start:.0f} s)", flush=True)
    if "broad" in phases:
        added = run_broad_campaign(str(args.out / "broad.db"), dry["broad"] if dry else 5000, prof,
                                   space=BroadSpace(row_share=0.3), max_tables=10, mem_cap_gb=max_gb if dry else 3.0,
                                   workers=args.workers, seed=7, progress=False, deadline=ends["broad"])
        print(f"broad: +{added} ({time.monotonic() - t_start:.0f} s)", flush=True)
    print(f"lease: done in {time.monotonic() - t_start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
