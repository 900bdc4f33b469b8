"""Predicted evaluation: a plan's costs from a cost model (learned from measurements, or the
analytic model, which says it is one), labelled with the model's ``source``."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.base import simulate
from shardlab.costmodel.bundle import load_bundle
from shardlab.costmodel.rowwise_comm import WithRowWise, load_rowwise_comm
from shardlab.evaluate.values import (DeviceCost, Evaluation, check_plans, comm_pattern, compare_to_reference,
                                      device_tables)
from shardlab.plan import Plan, device_memory_bytes, validate_plan
from shardlab.schedule import balanced_dims, lower_bound_ms
from shardlab.tables import Task

#: Largest shard a model is asked to predict for the lower bound (the campaigns' max_tables).
BOUND_CHUNK = 15


def estimate_plan(task: Task, plan: Plan, model: Any, lower_bound: bool = True, rowwise_comm: Any = None
                  ) -> Evaluation:
    """A plan's cost predicted by a cost-model bundle
    (:class:`~shardlab.costmodel.bundle.CostModelBundle`), labelled with the model's ``source``
    (``model:...`` or ``analytic:...``). The bound (:func:`~shardlab.schedule.lower_bound_ms`):
    the model's cost of all tables fused / G plus the comm of balanced dim sums. A model is only
    asked about shards of at most ``BOUND_CHUNK`` tables (the size the compute campaigns train
    on), so "all tables fused" is the sum over chunks of that size -- near-additive on the
    measured data (datasets/cpu/NOTES.md); a model's bound is only as good as the model.

    ``rowwise_comm``: a fitted :class:`~shardlab.costmodel.rowwise_comm.RowWiseComm`. Given, a
    plan with row-wise traffic (:func:`~shardlab.evaluate.values.comm_pattern`: tables split by
    rows) is costed with the pattern's all-to-all dim sums (a table split over every device
    leaves them) plus the row-wise collectives' predicted increment, and the source says so.
    Not given, or a plan without row blocks: every shard's columns on its device's all-to-all."""
    validate_plan(task, plan)
    per_dev = device_tables(task, plan)
    comm_model, comm_label = model.comm_for(plan.ngpu)
    comm = comm_model
    if rowwise_comm is not None and plan.ngpu > 1:
        dims, rw = comm_pattern(task, plan, int(rowwise_comm.setting("batch_size")))
        if not rw.empty:
            shard_dims = np.array([sum(t.dim for t in ts) for ts in per_dev])
            comm = WithRowWise(comm_model, rowwise_comm.increment(plan.ngpu, rw.to_dict()), shard_dims - dims)
            comm_label += "+" + rowwise_comm.source
    sim = simulate(per_dev, model.compute, comm)
    mem = [b / C.GB for b in device_memory_bytes(task, plan)]
    devices = tuple(DeviceCost(g, float(sim.fw_compute[g]), float(sim.bw_compute[g]), float(sim.fw_comm[g]),
                               float(sim.bw_comm[g]), mem[g]) for g in range(plan.ngpu))
    bound = None
    if lower_bound:
        chunks = [list(task.tables[i:i + BOUND_CHUNK]) for i in range(0, len(task.tables), BOUND_CHUNK)]
        whole = float(np.asarray(model.compute.predict(chunks)).sum())
        comm = np.asarray(comm_model.predict([balanced_dims(task)], None))[0] if task.ngpu > 1 else None
        bound = lower_bound_ms(whole, task.ngpu, comm)
    return Evaluation(task.name, plan.method, model.source + comm_label, devices, bound)


class ModelEvaluator:
    """The :class:`~shardlab.evaluate.values.Evaluator` of a cost model.

    ``model``: a cost-model bundle, or the name / manifest path of one (loaded for
    ``profile``, default ``constants.PLAN_PROFILE``); ``lower_bound``: also predict the task's bound; ``reference``: the plan to
    compare against (default: the best baseline, see
    :func:`~shardlab.evaluate.values.resolve_reference`). Predictions carry no uncertainty,
    so their comparisons have a ratio but no interval and no verdict. ``rowwise_comm``: the
    row-wise comm model for plans with row blocks (:func:`estimate_plan`): a fitted
    :class:`~shardlab.costmodel.rowwise_comm.RowWiseComm`, a path, ``"shipped"`` (default: the
    profile's ``datasets/<profile>/models/analytic_rowwise_comm.json`` where it exists, else the
    bundle's own comm model where it costs row-wise collectives, as the analytic GPU-cluster
    model does) or None."""

    def __init__(self, model: Any = "analytic", profile: str = C.PLAN_PROFILE, lower_bound: bool = True,
                 reference: str | None = None, rowwise_comm: Any = "shipped"):
        self.model = model
        self.profile = profile
        self.lower_bound = lower_bound
        self.reference = reference
        self.rowwise_comm = rowwise_comm

    def rowwise_model(self, bundle: Any = None) -> Any:
        """The row-wise comm model (:func:`~shardlab.costmodel.rowwise_comm.load_rowwise_comm`;
        ``bundle``'s comm where the profile ships none and it costs row-wise collectives), or None."""
        return load_rowwise_comm(self.rowwise_comm, self.profile, getattr(bundle, "comm", None))

    def bundle(self) -> Any:
        """The cost-model bundle (loaded when a name or path was given)."""
        if isinstance(self.model, (str, bytes)) or hasattr(self.model, "__fspath__"):
            return load_bundle(self.model, self.profile)
        return self.model

    def evaluate(self, task: Task, plans: Mapping[str, Plan]) -> dict[str, Evaluation]:
        """Predicted Evaluations of ``plans``, one shared predicted bound, compared to the reference."""
        check_plans(task, plans)
        model = self.bundle()
        rowwise = self.rowwise_model(model)
        out, bound = {}, None
        for k, p in plans.items():
            e = estimate_plan(task, p, model, lower_bound=self.lower_bound and bound is None, rowwise_comm=rowwise)
            bound = e.lower_bound_ms if bound is None else bound
            out[k] = Evaluation(e.task, e.method, e.source, e.per_device, bound)
        return compare_to_reference(out, self.reference)
