"""Whole-plan compute on one GPU: every device's fused op of several plans of one task, timed
in turn on the one GPU, in paired interleaved rounds.

A plan's *compute cost* in a round is the slowest device's forward + backward compute (ms); the
all-to-alls are not part of it (one GPU cannot run NCCL between ranks), and every record says
so. Round r measures the task's plans in the order :func:`round_orders` gives (same seed, same
orders); an op that two plans share is timed once per round. Each (task, plan) is committed as
kind ``plan_compute:<G>`` with key ``plan_compute:<G>:<profile>:<task>:<method>``, so a rerun
skips what is stored. Lookup batches of every op of a task are made once, ahead, by worker
processes (:func:`shardlab.measure.compute.prefetched`) and reused by every round.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from shardlab.evaluate.measured import round_orders, shard_key
from shardlab.data.lookups import device_tables
from shardlab.measure.compute import measure_compute, prefetched
from shardlab.measure.hardware import HardwareProfile, environment, get_profile
from shardlab.measure.store import SampleStore
from shardlab.search import get_sharder, run_sharder
from shardlab.tables import Task

#: What a plan_compute record's cost covers.
COVERS = "compute only: max over devices of fused-op forward + backward (ms); all-to-alls not measured"


def plan_compute_key(task: Task, method: str, profile: HardwareProfile) -> str:
    """Store key of one (task, method) record."""
    return f"plan_compute:{task.ngpu}:{profile.name}:{task.name}:{method}"


def measure_plan_compute(store_path: str, tasks: Sequence[Task], methods: Sequence[str],
                         profile: str | HardwareProfile = "h100", rounds: int = 5, seed: int = 0,
                         workers: int = 8, max_gb: float = 40.0, deadline: float | None = None,
                         progress: bool = True, sharder_config: dict[str, dict[str, Any]] | None = None) -> int:
    """Measure the compute of ``methods``' plans of every task not yet stored (module docstring);
    returns how many (task, method) records were added. ``max_gb``: one op's memory limit (GB);
    ``deadline``: ``time.monotonic()`` seconds after which no new task is started;
    ``sharder_config``: keyword arguments per method (e.g. a NeuroShard model path)."""
    prof = get_profile(profile)
    provenance = {**environment(prof.device), "profile": prof.to_dict(),
                  "campaign": {"kind": "plan_compute", "rounds": rounds, "seed": seed, "methods": list(methods),
                               "covers": COVERS}}
    added = 0
    with SampleStore(store_path) as store:
        for task in tqdm(tasks, desc=f"plan compute ({prof.name})", disable=not progress):
            kind = f"plan_compute:{task.ngpu}"
            done = store.keys(kind)
            todo = [m for m in methods if plan_compute_key(task, m, prof) not in done]
            if not todo or (deadline is not None and time.monotonic() > deadline):
                continue
            plans, skipped = {}, {}
            for m in todo:
                try:
                    plans[m] = run_sharder(get_sharder(m, **(sharder_config or {}).get(m, {})), task, seed=seed)
                except Exception as e:        # infeasible for this method: recorded, not measured
                    skipped[m] = f"{type(e).__name__}: {e}"
            shards = {m: device_tables(task, p) for m, p in plans.items()}
            ops = {shard_key(ts): ts for s in shards.values() for ts in s if ts}
            jobs = [(str(i), [t.to_dict() for t in ts]) for i, ts in enumerate(ops.values())]
            made = {int(i): batches for i, _, batches in
                    prefetched(jobs, prof.batch_size, prof.input_batches, workers, window=max(2, 2 * workers))}
            inputs = {key: made[i] for i, key in enumerate(ops)}
            runs: dict[str, list[list[list[float]]]] = {m: [] for m in plans}
            for order in round_orders(list(plans), rounds, seed):
                cache: dict = {}
                for m in order:
                    per_device = []
                    for ts in shards[m]:
                        if not ts:
                            per_device.append([0.0, 0.0])
                            continue
                        key = shard_key(ts)
                        if key not in cache:
                            s = measure_compute(list(ts), prof, max_gb=max_gb, inputs=inputs[key])
                            cache[key] = [s.fw_ms, s.bw_ms]
                        per_device.append(cache[key])
                    runs[m].append(per_device)
            for m, p in plans.items():
                arr = np.asarray(runs[m])                                  # (R, G, 2)
                payload = {"task": task.to_dict(), "method": m, "ngpu": task.ngpu, "covers": COVERS,
                           "plan": p.to_dict(), "rounds_fw_bw_ms": arr.tolist(),
                           "rounds_cost_ms": arr.sum(axis=2).max(axis=1).tolist(), "profile": prof.to_dict()}
                added += store.add(kind, plan_compute_key(task, m, prof), payload, provenance)
            for m, why in skipped.items():
                store.add(kind, plan_compute_key(task, m, prof),
                          {"task": task.to_dict(), "method": m, "ngpu": task.ngpu, "skipped": why}, provenance)
    return added
