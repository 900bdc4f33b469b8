"""Cost models and searches judged on held-out model families and on held-out pool tasks.

:func:`measure_heldout` builds tasks from the public table sets of
:mod:`shardlab.data.model_families` (tables no training step saw), shards each with several
methods, and measures all of a task's plans together in paired, interleaved rounds
(:class:`~shardlab.evaluate.MeasuredEvaluator`); one crash-safe sample per task (kind
``heldout_plan``, key ``heldout_plan:<profile>:<set>:<i>``) holds the task, the plans and their
measured Evaluations, so a rerun resumes and the measurements are kept whatever model comes
next. :func:`heldout_errors` then judges any cost-model bundle against those measurements, per
set: shard compute MAPE (each device's fused fw+bw compute, measured median over rounds, against
the model's prediction for that device's tables), plan-cost error (|predicted - measured| /
measured, median and p90 over plans) and Spearman's rank correlation of predicted and measured
plan costs. Nothing here trains: the sets stay held out.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.costmodel.metrics import errors
from shardlab.data.model_families import FAMILY_SETS, family_set, family_task
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.evaluate import Evaluation, MeasuredEvaluator, compare_to_reference, device_tables, estimate_plan
from shardlab.workflows.verify import VerifiedSharder
from shardlab.plan import Plan
from shardlab.measure.hardware import HardwareProfile, environment, get_profile
from shardlab.measure.store import SampleStore, load_measured
from shardlab.search import get_sharder, run_sharder
from shardlab.tables import Task
from studies.common.methods import TABLE_WISE, respelled, spec_of

KIND = "heldout_plan"

#: Methods whose plans are measured on every held-out task (model-based ones use ``model``).
METHODS = C.HEURISTIC_METHODS + (TABLE_WISE, "neuroshard")


#: The held-out *pool* set: tasks of the default pool's test tables (no cost model or policy
#: trains on them; the RL policies train on tasks of its train tables).
POOL_SET = "pool"
SETS = FAMILY_SETS + (POOL_SET,)


def pool_tasks(n: int, ngpu: int, batch_size: int, mem_cap_gb: float) -> list[Task]:
    """``n`` seeded tasks of the pool's test tables: task i has 10 + 5G + [0, 5G) tables (drawn
    with seed ``[i, G]``), seed 1000 + i, named ``pool-g<G>-<i>``."""
    out = []
    for i in range(n):
        size = 10 + 5 * ngpu + int(np.random.default_rng([i, ngpu]).integers(0, 5 * ngpu))
        out.append(generate_task(split="test", ntables=size, ngpu=ngpu, mem_cap_gb=mem_cap_gb, batch_size=batch_size,
                                 seed=1000 + i, name=f"pool-g{ngpu}-{i}"))
    return out


def heldout_tasks(set_name: str, n: int, ngpu: int, batch_size: int, mem_cap_gb: float,
                  max_rows: int) -> list[Task]:
    """``n`` tasks over set ``set_name``: task i takes all its tables (i = 0) or a seeded sample
    of about (2/3, 1/2, ...) of them; rows capped at ``max_rows`` (recorded in each table).
    :data:`POOL_SET`: :func:`pool_tasks` instead."""
    if set_name == POOL_SET:
        return pool_tasks(n, ngpu, batch_size, mem_cap_gb)
    total = len(family_set(set_name)["tables"])
    out = []
    for i in range(n):
        size = total if i == 0 else max(min(total, ngpu + 1), int(round(total * (2 / (i + 2)))))
        out.append(family_task(set_name, ngpu, mem_cap_gb, batch_size, ntables=size, seed=i, max_rows=max_rows))
    return out


def heldout_sharder(method: str, model: str | None, profile: HardwareProfile, rounds: int, seed: int) -> Any:
    """The sharder of ``method``: a sharder spec, or ``<spec>+verify<K>`` -- that sharder
    verified (:class:`~shardlab.workflows.verify.VerifiedSharder`: its K best plans and the
    best heuristic measured in ``rounds`` paired rounds here, the measured best kept)."""
    name, _, verify = method.partition("+verify")
    config = {"model": model} if model is not None and name.startswith("neuroshard") else {}
    sharder = get_sharder(name, **config)
    if not verify:
        return sharder
    if not verify.isdigit() or not 1 <= int(verify) <= 20:
        raise ShardlabError(f"heldout: method {method!r}: '+verify<K>' needs K in [1, 20]")
    return VerifiedSharder(sharder, MeasuredEvaluator(profile, rounds=rounds, seed=seed, lower_bound=False,
                                                      progress=False), int(verify))


def measure_heldout(store_path: str, sets: Sequence[str] = FAMILY_SETS, tasks_per_set: int = 3, ngpu: int = 4,
                    profile: str | HardwareProfile = "cpu", rounds: int = 3, mem_cap_gb: float = 4.0,
                    max_rows: int = 2_000_000, methods: Sequence[str] = METHODS, model: str | None = None,
                    seed: int = 0, progress: bool = True) -> int:
    """Measure the plans of every held-out task not yet in the store; returns how many tasks
    were added. ``model``: the bundle every NeuroShard method searches with (None: each its
    registration's)."""
    prof = get_profile(profile)
    if rounds < 3:
        raise ShardlabError(f"heldout: field 'rounds' = {rounds} must be >= 3 (intervals need 3 rounds)")
    provenance = {**environment(prof.device), "profile": prof.to_dict(),
                  "campaign": {"kind": KIND, "sets": list(sets), "tasks_per_set": tasks_per_set, "ngpu": ngpu,
                               "rounds": rounds, "mem_cap_gb": mem_cap_gb, "max_rows": max_rows,
                               "methods": list(methods), "model": model, "seed": seed}}
    for m in methods:                                   # a bad method name fails here, in one line
        heldout_sharder(m, model, prof, rounds, seed)
    jobs = [(s, i, t) for s in sets
            for i, t in enumerate(heldout_tasks(s, tasks_per_set, ngpu, prof.batch_size, mem_cap_gb, max_rows))]
    added = 0
    with SampleStore(store_path) as store:
        done = store.keys(KIND)
        todo = [(s, i, t) for s, i, t in jobs if f"{KIND}:{prof.name}:{s}:{i}" not in done]
        for s, i, task in tqdm(todo, desc=f"held-out tasks ({prof.name})", disable=not progress):
            plans = {}
            for m in methods:
                try:
                    plans[m] = run_sharder(heldout_sharder(m, model, prof, rounds, seed), task, seed)
                except ShardlabError as e:           # infeasible for this method: recorded, not measured
                    plans[m] = None
                    print(f"held-out {s}:{i}: {m} skipped: {e}")
            measured = {m: p for m, p in plans.items() if p is not None}
            evs = MeasuredEvaluator(prof, rounds=rounds, seed=seed, lower_bound=False,
                                    progress=False).evaluate(task, measured)
            payload = {"set": s, "index": i, "task": task.to_dict(),
                       "plans": {m: p.to_dict() for m, p in measured.items()},
                       "evaluations": {m: e.to_dict() for m, e in evs.items()},
                       "skipped": [m for m, p in plans.items() if p is None]}
            added += store.add(KIND, f"{KIND}:{prof.name}:{s}:{i}", payload, provenance)
    return added


def heldout_samples(dataset: str) -> list[dict[str, Any]]:
    """The held-out samples of shipped dataset ``datasets/<dataset>``, method keys as specs
    (:func:`~studies.common.methods.respelled`: a record is read, never rewritten)."""
    return [{**s, "plans": respelled(s["plans"]), "evaluations": respelled(s["evaluations"]),
             "skipped": [spec_of(m) for m in s.get("skipped", [])]}
            for s in load_measured(KIND, dataset)]


def heldout_errors(samples: Iterable[Mapping[str, Any]], bundle: Any) -> dict[str, Any]:
    """Per held-out set and over all: shard compute errors (fw+bw ms per device), plan-cost
    errors and Spearman of plan costs, for cost-model ``bundle`` against the measured samples."""
    by_set: dict[str, dict[str, list[float]]] = {}
    for sample in samples:
        task = Task.from_dict(sample["task"])
        acc = by_set.setdefault(sample["set"], {"shard_pred": [], "shard_meas": [], "plan_pred": [],
                                                "plan_meas": [], "plans": []})
        for m, pd in sample["plans"].items():
            plan, ev = Plan.from_dict(pd), Evaluation.from_dict(sample["evaluations"][m])
            shards = device_tables(task, plan)
            pred = np.asarray(bundle.compute.predict(shards)).sum(axis=1)
            for shard, p, d in zip(shards, pred, ev.per_device):
                if shard:
                    acc["shard_pred"].append(float(p))
                    acc["shard_meas"].append(d.fw_compute_ms + d.bw_compute_ms)
            acc["plan_pred"].append(estimate_plan(task, plan, bundle, lower_bound=False).cost_ms)
            acc["plan_meas"].append(ev.cost_ms)
    out: dict[str, Any] = {}
    for name, acc in list(by_set.items()) + [("all", {k: [x for a in by_set.values() for x in a[k]]
                                                      for k in ("shard_pred", "shard_meas", "plan_pred", "plan_meas")})]:
        plans = errors(acc["plan_pred"], acc["plan_meas"]) if acc["plan_meas"] else {}
        out[name] = {"shards": len(acc["shard_meas"]), "plans": len(acc["plan_meas"]),
                     "shard_compute": errors(acc["shard_pred"], acc["shard_meas"]),
                     "plan_cost_error_median": plans.get("median_ape", float("nan")),
                     "plan_cost_error_p90": plans.get("p90_ape", float("nan")),
                     "plan_cost_spearman": plans["spearman"] if len(acc["plan_meas"]) >= 3 else float("nan")}
    return out


def heldout_verdicts(samples: Iterable[Mapping[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Measured paired verdicts per held-out task: every method against the best baseline
    (the cheapest heuristic plan, measured), and column-wise NeuroShard against its own
    table-wise plan -- the check that splits are not chosen where they measure slower. Method
    keys as specs (:func:`~studies.common.methods.respelled`)."""
    rows = []
    for sample in samples:
        evs = {m: Evaluation.from_dict(e) for m, e in respelled(sample["evaluations"]).items()}
        row = {"set": sample["set"], "index": sample["index"], "tables": len(sample["task"]["tables"]),
               "ngpu": sample["task"]["ngpu"], "vs_best_baseline": {}, "cw_vs_tw": None}
        for m, e in compare_to_reference(evs, None, seed).items():
            c = e.comparison
            row["vs_best_baseline"][m] = {"reference": c.reference, "ratio": c.ratio, "verdict": c.verdict}
        if "neuroshard" in evs and TABLE_WISE in evs:
            c = compare_to_reference(evs, TABLE_WISE, seed)["neuroshard"].comparison
            splits = any(p["cols"] < t["dim"] for p in sample["plans"]["neuroshard"]["placements"]
                         for t in sample["task"]["tables"] if t["name"] == p["table"])
            row["cw_vs_tw"] = {"ratio": c.ratio, "verdict": c.verdict, "splits": splits}
        rows.append(row)
    return {"tasks": rows}


def search_verdicts(samples: Iterable[Mapping[str, Any]], methods: Sequence[str], seed: int = 0) -> dict[str, Any]:
    """Measured paired verdicts of each of ``methods`` on every held-out task, and counts over
    tasks (the held-out search targets): against each measured baseline (heuristics and TorchRec's
    planner; ``faster_or_equivalent_to_every`` when every verdict is "faster" or "equivalent",
    equivalence margin :data:`~shardlab.constants.EQUIVALENCE_MARGIN`), against the best baseline
    (``faster_than_best``: its verdict is "faster") and against NeuroShard's table-wise plan.
    A task whose method was not measured is left out of that method's counts. ``methods`` and
    the samples' keys are read as specs (:func:`~studies.common.methods.respelled`)."""
    methods = [spec_of(m) for m in methods]
    rows, counts = [], {m: {"tasks": 0, "faster_or_equivalent_to_every": 0, "faster_than_best": 0,
                            "slower_than_best": 0, "splits": 0} for m in methods}
    for sample in samples:
        evs = {m: Evaluation.from_dict(e) for m, e in respelled(sample["evaluations"]).items()}
        plans = respelled(sample["plans"])
        baselines = [b for b in C.BASELINE_METHODS if b in evs]
        best = compare_to_reference(evs, None, seed)
        row: dict[str, Any] = {"set": sample["set"], "index": sample["index"], "tables": len(sample["task"]["tables"]),
                               "ngpu": sample["task"]["ngpu"], "best_baseline": None, "methods": {}}
        dims = {t["name"]: t["dim"] for t in sample["task"]["tables"]}
        for m in methods:
            if m not in evs:
                continue
            c = best[m].comparison
            row["best_baseline"] = c.reference
            per = {b: compare_to_reference(evs, b, seed)[m].comparison.verdict for b in baselines}
            tw = compare_to_reference(evs, TABLE_WISE, seed)[m].comparison if TABLE_WISE in evs else None
            splits = sum(p["cols"] < dims[p["table"]] for p in plans[m]["placements"])
            row["methods"][m] = {"vs_best": {"ratio": c.ratio, "verdict": c.verdict},
                                 "slower_than": [b for b, v in per.items() if v == "slower"],
                                 "not_faster_or_equivalent": [b for b, v in per.items()
                                                              if v not in ("faster", "equivalent")],
                                 "vs_tw": None if tw is None else {"ratio": tw.ratio, "verdict": tw.verdict},
                                 "splits": splits}
            k = counts[m]
            k["tasks"] += 1
            k["faster_or_equivalent_to_every"] += not row["methods"][m]["not_faster_or_equivalent"]
            k["faster_than_best"] += c.verdict == "faster"
            k["slower_than_best"] += c.verdict == "slower"
            k["splits"] += splits > 0
        rows.append(row)
    return {"tasks": rows, "counts": counts}


def pooled_samples(*sample_sets: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Held-out samples of several campaigns pooled per task (same set, index and task): each
    method measured in more than one campaign with the *same plan* keeps all its rounds, in
    campaign order, so round k of every such method still comes from one paired round; methods
    of one campaign only, or whose plan differs between campaigns, are dropped. Each campaign is
    one sitting (``sittings_ms``), so :func:`search_verdicts` judges the pooled rounds with the
    hierarchical bootstrap over sittings, never as one flat sitting."""
    by_task: dict[tuple, list[Mapping[str, Any]]] = {}
    for samples in sample_sets:
        for s in samples:
            by_task.setdefault((s["set"], s["index"], repr(s["task"])), []).append(s)
    out = []
    for (set_name, index, _), group in by_task.items():
        if len(group) < 2:
            continue
        common = [m for m in group[0]["plans"] if all(
            m in g["plans"] and set(Plan.from_dict(g["plans"][m]).placements)
            == set(Plan.from_dict(group[0]["plans"][m]).placements) for g in group)]
        evaluations = {}
        for m in common:
            first = dict(group[0]["evaluations"][m])
            first["sittings_ms"] = [list(g["evaluations"][m]["rounds_ms"]) for g in group]
            first["rounds_ms"] = [x for s in first["sittings_ms"] for x in s]
            first["cost_ms"] = float(np.median(first["rounds_ms"]))
            first.pop("ci95_ms", None)
            evaluations[m] = first
        out.append({"set": set_name, "index": index, "task": group[0]["task"],
                    "plans": {m: group[0]["plans"][m] for m in common}, "evaluations": evaluations,
                    "provenance": {"campaign": {**group[0].get("provenance", {}).get("campaign", {}),
                                                "pooled_campaigns": len(group)}}})
    return out
