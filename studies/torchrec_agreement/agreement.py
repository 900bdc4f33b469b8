"""Do shardlab's measured evaluator and real TorchRec training steps rank plans alike?

:func:`measure_agreement` shards each task with several methods and measures all of its plans
twice, each time in paired, interleaved rounds: by :class:`~shardlab.evaluate.MeasuredEvaluator`
(each device's fused fbgemm op, then real all-to-alls) and by
:class:`~shardlab.torchrec.evaluator.TorchRecEvaluator` (the plan applied in
``DistributedModelParallel``, training steps timed). One crash-safe sample per task (kind
``torchrec_agreement``) holds the task, the plans and both sets of Evaluations, so a rerun
resumes. :func:`agreement` then gives, per task, Spearman's rank correlation of the two
evaluators' medians and every pair of plans whose paired verdicts point opposite ways, with
what tells the plans apart (shards, column splits, tables on the busiest rank, lookups per
sample on it): the facts to explain the disagreement with.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from shardlab.costmodel.metrics import spearman
from shardlab.errors import ShardlabError
from shardlab.evaluate import Evaluation, MeasuredEvaluator, compare_to_reference, device_tables
from shardlab.torchrec.evaluator import TorchRecEvaluator
from shardlab.plan import Plan
from shardlab.measure.hardware import HardwareProfile, environment, get_profile
from shardlab.measure.store import SampleStore
from shardlab.search import get_sharder, run_sharder
from shardlab.tables import Task

KIND = "torchrec_agreement"


def measure_agreement(store_path: str, tasks: Sequence[tuple[str, Task]], methods: Sequence[str],
                      profile: str | HardwareProfile = "cpu", rounds: int = 5, steps: int = 5, seed: int = 0,
                      progress: bool = True) -> int:
    """Measure every (label, task) not yet in the store both ways; returns how many were added."""
    prof = get_profile(profile)
    provenance = {**environment(prof.device), "profile": prof.to_dict(),
                  "campaign": {"kind": KIND, "methods": list(methods), "rounds": rounds, "steps": steps, "seed": seed}}
    added = 0
    with SampleStore(store_path) as store:
        done = store.keys(KIND)
        todo = [(label, t) for label, t in tasks if f"{KIND}:{prof.name}:{label}" not in done]
        for label, task in tqdm(todo, desc="torchrec agreement", disable=not progress):
            plans = {}
            for m in methods:
                try:
                    plans[m] = run_sharder(get_sharder(m), task, seed)
                except ShardlabError as e:
                    print(f"agreement {label}: {m} skipped: {e}")
            measured = MeasuredEvaluator(prof, rounds=rounds, seed=seed, lower_bound=False,
                                         progress=False).evaluate(task, plans)
            torchrec = TorchRecEvaluator(prof, rounds=rounds, steps=steps, seed=seed).evaluate(task, plans)
            payload = {"label": label, "task": task.to_dict(), "plans": {m: p.to_dict() for m, p in plans.items()},
                       "measured": {m: e.to_dict() for m, e in measured.items()},
                       "torchrec": {m: e.to_dict() for m, e in torchrec.items()}}
            added += store.add(KIND, f"{KIND}:{prof.name}:{label}", payload, provenance)
    return added


def plan_facts(task: Task, plan: Plan) -> dict[str, Any]:
    """What tells plans apart for TorchRec: shards, column splits, and on the busiest rank (most
    lookups per sample) its tables and lookups per sample."""
    shards = device_tables(task, plan)
    lookups = [sum(t.pooling_factor for t in s) for s in shards]
    busiest = int(np.argmax(lookups))
    return {"shards": len(plan.placements),
            "splits": sum(p.cols < task.table(p.table).dim for p in plan.placements),
            "busiest_rank": busiest, "busiest_tables": len(shards[busiest]),
            "busiest_lookups_per_sample": float(lookups[busiest])}


def agreement(samples: Iterable[Mapping[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Per task: Spearman of the two evaluators' medians, and the pairs of plans whose paired
    verdicts disagree (one evaluator says faster where the other says slower, or one is
    significant and the other's ratio points the other way), with :func:`plan_facts`."""
    rows = []
    for s in samples:
        task = Task.from_dict(s["task"])
        meas = {m: Evaluation.from_dict(e) for m, e in s["measured"].items()}
        trec = {m: Evaluation.from_dict(e) for m, e in s["torchrec"].items()}
        names = [m for m in meas if m in trec]
        facts = {m: plan_facts(task, Plan.from_dict(s["plans"][m])) for m in names}
        pairs = []
        for a, b in itertools.combinations(names, 2):
            cm = compare_to_reference({a: meas[a], b: meas[b]}, b, seed)[a].comparison
            ct = compare_to_reference({a: trec[a], b: trec[b]}, b, seed)[a].comparison
            opposite = (cm.ratio - 1) * (ct.ratio - 1) < 0
            significant = cm.verdict in ("faster", "slower") or ct.verdict in ("faster", "slower")
            if opposite and significant:
                pairs.append({"a": a, "b": b, "measured": {"ratio": cm.ratio, "verdict": cm.verdict},
                              "torchrec": {"ratio": ct.ratio, "verdict": ct.verdict}})
        rows.append({"label": s["label"], "tables": len(task.tables), "ngpu": task.ngpu, "plans": len(names),
                     "spearman": spearman([meas[m].cost_ms for m in names], [trec[m].cost_ms for m in names]),
                     "measured_ms": {m: meas[m].cost_ms for m in names},
                     "torchrec_ms": {m: trec[m].cost_ms for m in names},
                     "torchrec_fw_bw_ms": {m: [max(d.fw_compute_ms for d in trec[m].per_device),
                                               max(d.bw_compute_ms for d in trec[m].per_device)] for m in names},
                     "facts": facts, "disagreements": pairs})
    rhos = [r["spearman"] for r in rows if np.isfinite(r["spearman"])]
    return {"tasks": rows, "mean_spearman": float(np.mean(rhos)) if rhos else float("nan"),
            "pairs": sum(len(list(itertools.combinations(range(r["plans"]), 2))) for r in rows),
            "disagreeing_pairs": sum(len(r["disagreements"]) for r in rows)}
