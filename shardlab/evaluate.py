"""Plan evaluation: the cost of a plan (Evaluation JSON of INTERFACES.md) and its lower bound.

Measured (ALGORITHMS.md sections 1 and 7): each device's fused op is timed in turn on this
machine (compute is independent across devices); the backward all-to-all is measured with G
real ranks; each device's forward delay is its compute + backward comm minus the smallest of
those; the forward all-to-all is measured with those delays, so waiting for slower devices is
part of it. Plan cost = max over devices of compute + fw comm + bw comm. Costs are measured at
the hardware profile's batch size, which the ``source`` names.

Lower bound: compute cannot beat (all tables in one fused op) / G where fused cost is
subadditive, and communication cannot beat the all-to-all of perfectly balanced dim sums
(the cheapest rank's forward + backward, no delays). Where the premise fails: on the shipped
CPU data (batch 4096, tests/test_subadditivity.py, datasets/cpu/NOTES.md) fused costs are
near-additive (median fused / sum-of-singles 1.0) but above 1 in about half of the multi-table
samples and beyond noise in ~18%, most often for shards of 2-4 tables; so on CPU the bound can
exceed a plan's measured cost by up to that superadditivity (p95 ratio 1.33), and plan/bound
ratios below 1 mean exactly that. :func:`subadditivity` measures it on any store or dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.plan import Plan, device_memory_bytes, validate_plan
from shardlab.profile.campaign import singles_of
from shardlab.profile.compute import measure_compute
from shardlab.profile.hardware import HardwareProfile, get_profile
from shardlab.tables import Table, Task


#: Largest shard a model is asked to predict for the lower bound (the campaigns' max_tables).
BOUND_CHUNK = 15


@dataclass(frozen=True)
class DeviceCost:
    """One device's costs (ms) and memory (GB)."""

    device: int
    fw_compute_ms: float
    bw_compute_ms: float
    fw_comm_ms: float
    bw_comm_ms: float
    mem_gb: float

    @property
    def total_ms(self) -> float:
        """Compute plus both all-to-alls (ms)."""
        return self.fw_compute_ms + self.bw_compute_ms + self.fw_comm_ms + self.bw_comm_ms

    def to_dict(self) -> dict[str, Any]:
        """Evaluation JSON's per-device entry."""
        return {"device": self.device, "fw_compute_ms": self.fw_compute_ms, "bw_compute_ms": self.bw_compute_ms,
                "fw_comm_ms": self.fw_comm_ms, "bw_comm_ms": self.bw_comm_ms, "total_ms": self.total_ms,
                "mem_gb": self.mem_gb}


@dataclass(frozen=True)
class Evaluation:
    """The cost of one plan. ``source``: ``measured:<profile>``, ``model:<name>`` or
    ``analytic:<profile>`` -- never unlabelled. ``cost_ms`` = max over devices of total_ms."""

    task: str
    method: str
    source: str
    per_device: tuple[DeviceCost, ...]
    lower_bound_ms: float | None = None

    @property
    def cost_ms(self) -> float:
        """The straggler's total (ms)."""
        return max(d.total_ms for d in self.per_device)

    def to_dict(self) -> dict[str, Any]:
        """Evaluation JSON."""
        return {"task": self.task, "method": self.method, "source": self.source, "cost_ms": self.cost_ms,
                "lower_bound_ms": self.lower_bound_ms, "per_device": [d.to_dict() for d in self.per_device]}


def device_tables(task: Task, plan: Plan) -> list[list[Table]]:
    """The (sub)tables on each device: whole tables as they are, column blocks as tables of
    ``cols`` columns (same rows and lookups). Row-range blocks are not measurable yet."""
    out: list[list[Table]] = [[] for _ in range(plan.ngpu)]
    for p in plan.placements:
        t = task.table(p.table)
        if p.rows != t.rows:
            raise ShardlabError(f"plan '{plan.method}': table '{t.name}': row-wise blocks cannot be measured yet")
        name = t.name if p.cols == t.dim else f"{t.name}[{p.col_offset}:{p.col_offset + p.cols}]"
        out[p.device].append(t.with_dim(p.cols, name=name))
    return out


def _comm(dim_sums: Sequence[int], delays: Sequence[float] | None, profile: HardwareProfile,
          bench: Any | None) -> tuple[list[float], list[float]]:
    from shardlab.profile.comm import CommBench

    if len(dim_sums) < 2:
        return [0.0] * len(dim_sums), [0.0] * len(dim_sums)
    if bench is None:
        with CommBench.for_profile(len(dim_sums), profile) as b:
            s = b.measure(dim_sums, delays, repeats=profile.repeats, warmup=profile.warmup)
    else:
        s = bench.measure(dim_sums, delays, repeats=profile.repeats, warmup=profile.warmup)
    return list(s.fw_comm_ms), list(s.bw_comm_ms)


def measure_plan(task: Task, plan: Plan, profile: str | HardwareProfile = "cpu",
                 bench: Any | None = None, lower_bound: bool = True) -> Evaluation:
    """Measure ``plan`` on this machine (module docstring). ``bench``: an open
    :class:`~shardlab.profile.comm.CommBench` of ``plan.ngpu`` ranks to reuse (else one is
    started). ``lower_bound``: also measure the bound (one fused op of all tables, which is
    skipped -- bound None -- when it would exceed the compute profiler's memory limit)."""
    profile = get_profile(profile)
    validate_plan(task, plan)
    per_dev = device_tables(task, plan)
    fw_c, bw_c = [], []
    for tables in per_dev:
        if tables:
            s = measure_compute(tables, profile)
            fw_c.append(s.fw_ms)
            bw_c.append(s.bw_ms)
        else:
            fw_c.append(0.0)
            bw_c.append(0.0)
    dims = [sum(t.dim for t in ts) for ts in per_dev]
    _, bw_comm = _comm(dims, None, profile, bench)
    ready = [f + b + c for f, b, c in zip(fw_c, bw_c, bw_comm)]
    delays = [r - min(ready) for r in ready]
    fw_comm, _ = _comm(dims, delays, profile, bench)
    mem = [b / C.GB for b in device_memory_bytes(task, plan)]
    devices = tuple(DeviceCost(g, fw_c[g], bw_c[g], fw_comm[g], bw_comm[g], mem[g]) for g in range(plan.ngpu))
    bound = measure_lower_bound(task, profile, bench) if lower_bound else None
    return Evaluation(task.name, plan.method, f"measured:{profile.name}", devices, bound)


def measure_lower_bound(task: Task, profile: str | HardwareProfile = "cpu", bench: Any | None = None,
                        max_gb: float = 8.0) -> float | None:
    """Measured lower bound (ms): fused cost of all tables / G + fw and bw all-to-all of
    balanced dim sums (the cheapest rank's). None when all tables exceed ``max_gb`` GB."""
    profile = get_profile(profile)
    if sum(t.memory_bytes(profile.weights_precision, profile.optimizer) for t in task.tables) > max_gb * C.GB:
        return None
    whole = measure_compute(list(task.tables), profile, max_gb=max_gb)
    fw, bw = _comm(balanced_dims(task), None, profile, bench)
    return whole.total_ms / task.ngpu + min(f + b for f, b in zip(fw, bw))


def measure_plans(task: Task, plans: Mapping[str, Plan], profile: str | HardwareProfile = "cpu",
                  lower_bound: bool = True, progress: bool = True) -> dict[str, Evaluation]:
    """Measure several plans of one task (:func:`measure_plan` each) with one set of G ranks and
    ONE measured lower bound shared by all, so ratios to the bound compare plans, not the noise
    of repeated bound measurements. Returns method -> Evaluation, in ``plans``' order."""
    from contextlib import ExitStack

    from tqdm.auto import tqdm

    profile = get_profile(profile)
    with ExitStack() as stack:
        bench = None
        if task.ngpu > 1:
            from shardlab.profile.comm import CommBench

            bench = stack.enter_context(CommBench.for_profile(task.ngpu, profile))
        out = {m: measure_plan(task, p, profile, bench, lower_bound=False)
               for m, p in tqdm(plans.items(), desc="measuring plans", disable=not progress)}
        bound = measure_lower_bound(task, profile, bench) if lower_bound else None
    return {m: Evaluation(e.task, e.method, e.source, e.per_device, bound) for m, e in out.items()}


def balanced_dims(task: Task) -> list[int]:
    """The task's total dim spread as evenly as integers allow over its G devices (the
    communication term of the lower bound)."""
    total, g = sum(t.dim for t in task.tables), task.ngpu
    return [total // g + (1 if i < total % g else 0) for i in range(g)]


def estimate_plan(task: Task, plan: Plan, model: Any, lower_bound: bool = True) -> Evaluation:
    """A plan's cost predicted by a cost-model bundle
    (:class:`~shardlab.costmodel.bundle.CostModelBundle`), labelled with the model's ``source``
    (``model:...`` or ``analytic:...``). The bound: the model's cost of all tables fused / G
    plus the comm of balanced dim sums. A model is only asked about shards of at most
    ``BOUND_CHUNK`` tables (the size the compute campaigns train on), so "all tables fused" is
    the sum over chunks of that size -- near-additive on the measured data (datasets/cpu/NOTES.md);
    a model's bound is only as good as the model."""
    validate_plan(task, plan)
    per_dev = device_tables(task, plan)
    comm_model, comm_label = model.comm_for(plan.ngpu)
    sim = model.simulate(per_dev)
    mem = [b / C.GB for b in device_memory_bytes(task, plan)]
    devices = tuple(DeviceCost(g, float(sim.fw_compute[g]), float(sim.bw_compute[g]), float(sim.fw_comm[g]),
                               float(sim.bw_comm[g]), mem[g]) for g in range(plan.ngpu))
    bound = None
    if lower_bound:
        chunks = [list(task.tables[i:i + BOUND_CHUNK]) for i in range(0, len(task.tables), BOUND_CHUNK)]
        whole = float(np.asarray(model.compute.predict(chunks)).sum())
        comm = 0.0
        if task.ngpu > 1:
            c = np.asarray(comm_model.predict([balanced_dims(task)], None))[0]
            comm = float((c[:, 0] + c[:, 1]).min())
        bound = whole / task.ngpu + comm
    return Evaluation(task.name, plan.method, model.source + comm_label, devices, bound)


def fused_and_summed(samples: Iterable[Mapping[str, Any]], singles: Mapping[str, Mapping[str, Any]]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fused total ms, sum of single-table totals ms, number of tables) for every measured
    compute sample whose tables were all measured alone (``singles`` by
    :func:`~shardlab.profile.campaign.singles_of`); arrays of equal length."""
    fused, summed, n = [], [], []
    for s in samples:
        alone = singles_of(s, singles)
        if alone is not None:
            fused.append(s["total_ms"])
            summed.append(sum(x["total_ms"] for x in alone))
            n.append(len(alone))
    return np.asarray(fused), np.asarray(summed), np.asarray(n)


def subadditivity(samples: Sequence[Mapping[str, Any]], singles: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """How far measured fused costs are subadditive: ratio = fused / sum of the same tables
    measured alone, over samples of 2+ tables. A sample *violates* when its ratio exceeds
    1 + its relative noise (the fused total's (p75 - p25) / median plus the singles' median
    of the same). Returns counts, ratio quantiles, and the violation rate by tables per shard."""
    rows = []
    for s in samples:
        alone = singles_of(s, singles)
        if alone is None or len(alone) < 2:
            continue
        summed = sum(x["total_ms"] for x in alone)
        noise = (s["total_spread_ms"][1] - s["total_spread_ms"][0]) / s["total_ms"]
        noise += float(np.median([(x["total_spread_ms"][1] - x["total_spread_ms"][0]) / x["total_ms"] for x in alone]))
        rows.append((s["total_ms"] / summed, noise, len(alone), s["total_ms"]))
    if not rows:
        return {"compared": 0}
    r = np.array(rows)
    ratio, noise, n = r[:, 0], r[:, 1], r[:, 2].astype(int)
    viol = ratio > 1.0 + noise
    by_n = {}
    for lo, hi in ((2, 4), (5, 8), (9, 12), (13, 15)):
        m = (n >= lo) & (n <= hi)
        if m.any():
            by_n[f"{lo}-{hi}"] = {"samples": int(m.sum()), "median_ratio": float(np.median(ratio[m])),
                                  "above_1": float((ratio[m] > 1).mean()), "violations": float(viol[m].mean())}
    return {"compared": int(len(r)), "median_ratio": float(np.median(ratio)),
            "p05_ratio": float(np.quantile(ratio, 0.05)), "p95_ratio": float(np.quantile(ratio, 0.95)),
            "max_ratio": float(ratio.max()), "above_1": float((ratio > 1).mean()),
            "violations": float(viol.mean()), "by_tables": by_n}
