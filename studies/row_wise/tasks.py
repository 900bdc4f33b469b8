"""The row-wise benchmark: tasks whose largest tables fit no device, NeuroShard's plan against
TorchRec's planner's (``torchrec_free``) and the heuristics, every plan measured in paired
rounds; the verdict is NeuroShard vs ``torchrec_free``.

Tasks are held out from every training step: the Criteo 1TB tables and the public model
families of ``datasets/heldout_models`` (rows and cap divided by one factor where this
machine's memory needs it: :func:`~shardlab.workflows.criteo.scaled_task`), and the pool's test
tables at dim 64 with the cap at a share of the largest table's memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from shardlab.data.model_families import family_set
from shardlab.data.tasks import pool_tables
from shardlab.constants import EQUIVALENCE_MARGIN
from shardlab.evaluate import VERDICTS, MeasuredEvaluator
from shardlab.evaluate.stats import read_verdict
from shardlab.workflows.criteo import criteo_plans, criteo_task, row_layouts, scaled_task
from shardlab.search.row_wise import oversized
from shardlab.tables import Task

#: The methods measured on every task (NeuroShard is judged against ``torchrec_free``).
METHODS = ("neuroshard", "torchrec_free", "lookup_greedy", "size_greedy")


@dataclass(frozen=True)
class Spec:
    """One benchmark task: ``source`` ("criteo", a held-out family set, or "pool"), devices, cap
    per device (GB, before scaling), row scale; for "pool" the cap is ``share`` of the largest
    table's memory, over the first ``ntables`` test tables from ``offset``."""

    source: str
    ngpu: int
    mem_cap_gb: float = 16.0
    row_scale: int = 1
    share: float = 0.5
    ntables: int = 16
    offset: int = 0


#: The shipped task list (each has tables that fit no device, and fits the G devices in all:
#: an earlier list had two 8-GPU pool tasks over their total memory, replaced).
SPECS = (Spec("criteo", 8, 16.0, 16), Spec("mlperf_dlrm_dcnv2_multihot", 8, 16.0, 32),
         Spec("avazu_fec_dlrm", 4, 2.0, 4), Spec("pool", 4, share=0.45), Spec("pool", 4, share=0.6, offset=16),
         Spec("pool", 8, share=0.6, ntables=16, offset=32), Spec("pool", 4, share=0.5, ntables=12, offset=56),
         Spec("pool", 8, share=0.5, ntables=24, offset=44))


def build_task(spec: Spec, batch_size: int, seed: int = 0) -> Task:
    """The task of one spec."""
    if spec.source == "criteo":
        return criteo_task(spec.ngpu, spec.mem_cap_gb, spec.row_scale, batch_size, seed=seed)
    if spec.source == "pool":
        tables = tuple(t.with_dim(64) for t in pool_tables("dlrm-synth", "test")[spec.offset: spec.offset + spec.ntables])
        probe = Task("probe", spec.ngpu, 1.0, tables, batch_size)
        cap = max(probe.table_bytes(t) for t in tables) * spec.share / 2**30
        return Task(f"pool-test{spec.offset}-{spec.ntables}x{spec.ngpu}-cap{spec.share:g}", spec.ngpu, cap, tables,
                    batch_size)
    data = family_set(spec.source)
    return scaled_task(data["tables"], spec.source, spec.ngpu, spec.mem_cap_gb, spec.row_scale, batch_size, seed=seed,
                       origin=f"held-out set {spec.source} (datasets/heldout_models/{spec.source}.json)")


def run_task(spec: Spec, profile: str = "cpu", rounds: int = 5, batch_size: int = 4096, seed: int = 0,
             methods: Sequence[str] = METHODS, task: Task | None = None) -> dict[str, Any]:
    """Shard one spec's task (``task``: already built) with ``methods`` and measure the plans
    in paired rounds against ``torchrec_free`` (when it has a plan): a JSON-ready record."""
    task = build_task(spec, batch_size, seed) if task is None else task
    outcome = criteo_plans(task, methods, seed)
    plans = {m: p for m, p in outcome.items() if not isinstance(p, str)}
    reference = "torchrec_free" if "torchrec_free" in plans else None
    evs = MeasuredEvaluator(profile, rounds=rounds, seed=seed, reference=reference, lower_bound=False,
                            progress=False).evaluate(task, plans) if plans else {}
    return {"spec": spec.__dict__, "task": task.name, "ngpu": task.ngpu, "mem_cap_gb": task.mem_cap_gb,
            "oversized": [task.tables[i].name for i in oversized(task)], "tables": len(task.tables),
            "no_plan": {m: why for m, why in outcome.items() if isinstance(why, str)},
            "row_layouts": {m: row_layouts(task, p) for m, p in plans.items()},
            "row_choice": {m: p.metadata.get("row_wise") for m, p in plans.items() if p.metadata.get("row_wise")},
            "evaluations": {m: e.to_dict() for m, e in evs.items()}, "reference": reference,
            "plans": {m: p.to_dict() for m, p in plans.items()}}


def verdicts(records: Sequence[dict[str, Any]], method: str = "neuroshard") -> dict[str, Any]:
    """``method``'s verdicts against ``torchrec_free`` over the records: counts of each verdict
    (:data:`~shardlab.evaluate.VERDICTS`; a record's old "within noise" read as its interval
    gives now, :func:`~shardlab.evaluate.stats.read_verdict`), and the share faster or
    equivalent (the target: >= 90%) over tasks where both have a plan."""
    counts = dict.fromkeys(VERDICTS, 0)
    missing = []
    for r in records:
        ev = r["evaluations"].get(method)
        if r["reference"] is None or ev is None:
            missing.append(r["task"])
            continue
        margin = ev.get("equivalence_margin")
        v = read_verdict(ev.get("verdict"), ev.get("ratio_ci95"), EQUIVALENCE_MARGIN if margin is None else margin)
        if v in counts:
            counts[v] += 1
    judged = sum(counts.values())
    return {"method": method, "counts": counts, "judged": judged, "not_judged": missing,
            "faster_or_equivalent_share": (counts["faster"] + counts["equivalent"]) / judged if judged else None}
