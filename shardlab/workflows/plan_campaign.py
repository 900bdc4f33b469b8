"""Measured plans: random tasks sharded by the given methods, every plan measured by the
evaluator (per-device compute in turn, all-to-alls with G real ranks, forward waiting
included) and committed to the crash-safe store as kind ``plan:<G>``. This is DreamShard's
"measure the rollouts on hardware" step (docs/methods.md), here run with the
heuristic baselines as the policies; DreamShard's training loop calls it with its own policy.

Key ``plan:<G>:<profile>:<pool>:<split>:s<seed>:<i>``; sample i's task (10..60 tables by
default) and method depend only on ``seed`` and i, so a rerun resumes.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.evaluate import Evaluation, device_tables, measure_plan
from shardlab.plan import Plan
from shardlab.measure.comm import CommBench
from shardlab.measure.hardware import HardwareProfile, base_profile_name, get_profile, measurable_profile
from shardlab.measure.hardware import environment
from shardlab.measure.store import SampleStore
from shardlab.search import run_sharder, sharder_for
from shardlab.tables import Task


def plan_record(task: Task, plan: Plan, ev: Evaluation, profile: HardwareProfile) -> dict[str, Any]:
    """A measured plan as stored: each device's tables, per-device costs (ms), plan cost."""
    return {"task": task.name, "method": plan.method, "ngpu": plan.ngpu, "source": ev.source,
            "devices": [[t.to_dict() for t in ts] for ts in device_tables(task, plan)],
            "per_device": [d.to_dict() for d in ev.per_device], "cost_ms": ev.cost_ms,
            "profile": profile.to_dict()}


def plan_prefix(ngpu: int, profile: str | HardwareProfile = C.MEASURE_PROFILE, pool: str = C.DEFAULT_POOL,
                split: str = "train", seed: int = 0) -> str:
    """The key prefix of a plan campaign's samples; sample i is ``f"{prefix}{i}"``."""
    return f"plan:{ngpu}:{get_profile(profile).name}:{pool}:{split}:s{seed}:"


def run_plan_campaign(store_path: str, n_plans: int, ngpu: int = C.DEFAULT_NGPU,
                      profile: str | HardwareProfile = C.MEASURE_PROFILE, pool: str = C.DEFAULT_POOL, split: str = "train",
                      ntables: tuple[int, int] = C.PLAN_CAMPAIGN_TABLES, mem_cap_gb: float = C.DEFAULT_MEM_CAP_GB,
                      methods: Sequence[str] = C.HEURISTIC_METHODS, seed: int = 0, progress: bool = True,
                      plan_for: Callable[[Task, int], Plan] | None = None) -> int:
    """Measure plans 0..n_plans-1 not yet stored; returns how many were added. Plan i comes from
    ``methods[i % len(methods)]`` (default: the five heuristics, balanced to skewed plans);
    ``plan_for(task, i)`` overrides the methods (DreamShard passes its policy)."""
    prof = measurable_profile(profile)
    prefix = plan_prefix(ngpu, prof, pool, split, seed)
    if not methods:
        raise ShardlabError("field 'methods' is empty: name at least one sharder")
    sharders = [sharder_for(m, base_profile_name(prof)) for m in methods]   # a bad name fails before measuring
    provenance = {**environment(prof.device), "profile": prof.to_dict(), "pool": pool, "split": split,
                  "campaign": {"kind": "plan", "seed": seed, "ntables": list(ntables), "ngpu": ngpu,
                               "mem_cap_gb": mem_cap_gb, "methods": list(methods)}}
    added = 0
    with SampleStore(store_path) as store:
        done = store.keys(f"plan:{ngpu}")
        todo = [i for i in range(n_plans) if f"{prefix}{i}" not in done]
        if not todo:
            return 0
        with CommBench.for_profile(ngpu, prof) as bench:
            for i in tqdm(todo, desc=f"measured plans G={ngpu} ({prof.name})", disable=not progress):
                rng = np.random.default_rng([seed, i, 0x91A])
                task = generate_task(pool, int(rng.integers(ntables[0], ntables[1] + 1)), ngpu, mem_cap_gb,
                                     prof.batch_size, seed=int(rng.integers(2**31)), split=split,
                                     weights_precision=prof.weights_precision, optimizer=prof.optimizer,
                                     name=f"plan-campaign-{i}")
                if plan_for is not None:
                    plan = plan_for(task, i)
                else:
                    plan = run_sharder(sharders[i % len(sharders)], task, seed=i)
                ev = measure_plan(task, plan, prof, bench=bench, lower_bound=False)
                added += store.add(f"plan:{ngpu}", f"{prefix}{i}", plan_record(task, plan, ev, prof), provenance)
    return added
