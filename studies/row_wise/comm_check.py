"""Row-wise comm models judged on real plans of held-out tasks.

The row-wise benchmark (:mod:`studies.row_wise.tasks`, ``studies/row_wise/results/row_wise.json``)
measured every plan's per-device forward and backward comm between real gloo ranks, row-wise
collectives included, on tasks no training step saw (Criteo 1TB, public model families, the
pool's test tables). :func:`measured_comm_rows` turns each measured plan with row-wise traffic
into a comm sample -- the plan's :func:`~shardlab.evaluate.exchange.comm_pattern`, the forward
delays its measured medians imply (:func:`~shardlab.schedule.forward_delays` of compute +
backward comm, as the measured evaluator computes them) and the measured per-device medians over
its rounds -- and :func:`judge_rows` scores comm models on them.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from shardlab.costmodel.metrics import errors
from shardlab.evaluate.exchange import comm_pattern
from shardlab.workflows.criteo import criteo_plans, row_layouts
from shardlab.plan import Plan
from shardlab.schedule import forward_delays
from studies.row_wise.tasks import Spec, build_task


def _plans(record: Mapping[str, Any], task: Any) -> dict[str, Plan]:
    """The record's plans: as saved, or (records made before plans were saved) searched again
    with the benchmark's seed and kept only where their row layouts match the recorded ones."""
    if record.get("plans"):
        return {m: Plan.from_dict(p) for m, p in record["plans"].items()}
    rebuilt = criteo_plans(task, list(record["evaluations"]), seed=0)
    return {m: p for m, p in rebuilt.items()
            if not isinstance(p, str) and row_layouts(task, p) == record["row_layouts"].get(m, {})}


def measured_comm_rows(records: Sequence[Mapping[str, Any]], batch_size: int) -> list[dict[str, Any]]:
    """One comm sample per measured plan with row-wise traffic (module docstring): ``task``,
    ``method``, ``dim_sums`` (G,: the pattern's all-to-all), ``shard_dim_sums`` (G,: every
    block's columns on its device, as the comm models saw plans before), ``delays_ms`` (G,), ``rowwise`` ({dim, index_counts}),
    ``fw_comm_ms`` / ``bw_comm_ms`` (G,) measured medians."""
    out = []
    for r in records:
        task = build_task(Spec(**r["spec"]), batch_size)
        for method, plan in _plans(r, task).items():
            ev = r["evaluations"].get(method)
            if ev is None or plan.ngpu < 2:
                continue
            dims, rw = comm_pattern(task, plan, batch_size)
            if rw.empty:
                continue
            dev = ev["per_device"]
            compute = np.array([d["fw_compute_ms"] + d["bw_compute_ms"] for d in dev])
            bw = np.array([d["bw_comm_ms"] for d in dev])
            shard_dims = [sum(q.cols for q in plan.placements if q.device == g) for g in range(plan.ngpu)]
            out.append({"task": r["task"], "method": method, "dim_sums": dims, "shard_dim_sums": shard_dims,
                        "delays_ms": list(forward_delays(compute + bw)), "rowwise": rw.to_dict(),
                        "fw_comm_ms": [d["fw_comm_ms"] for d in dev], "bw_comm_ms": list(bw)})
    return out


#: A comm predictor: one row of :func:`measured_comm_rows` -> (G, 2) forward and backward ms.
Predictor = Callable[[Mapping[str, Any]], np.ndarray]


def judge_rows(rows: Sequence[Mapping[str, Any]], predictors: Mapping[str, Predictor]) -> dict[str, Any]:
    """Per-rank forward and backward errors (:func:`~shardlab.costmodel.metrics.errors`) of each
    predictor over ``rows``, and of the plan's comm (the max over ranks of fw + bw)."""
    fw = np.concatenate([r["fw_comm_ms"] for r in rows])
    bw = np.concatenate([r["bw_comm_ms"] for r in rows])
    plan = np.array([max(np.add(r["fw_comm_ms"], r["bw_comm_ms"])) for r in rows])
    out = {}
    for name, predict in predictors.items():
        p = [np.asarray(predict(r)) for r in rows]
        out[name] = {"fw": errors(np.concatenate([q[:, 0] for q in p]), fw),
                     "bw": errors(np.concatenate([q[:, 1] for q in p]), bw),
                     "plan_comm": errors(np.array([q.sum(axis=1).max() for q in p]), plan)}
    return out
