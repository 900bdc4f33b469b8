"""Predicted evaluation: a plan's costs from a cost model (learned from measurements, or the
analytic model, which says it is one), labelled with the model's ``source``, and the task's
lower bound under that model (:func:`model_bound_ms`; docs/measurement.md, "The lower bound").

**The bound** is at most the predicted cost of every valid plan of the task -- table-wise,
column blocks, row blocks or a mix, under the same model, comm models and schedule
(:func:`~shardlab.costmodel.base.simulate`) -- or None. Plan cost = max over devices >= the mean
over the n devices that hold blocks, so with floors on their summed compute (n x per-op + rest)
and on their mean comm it is per-op + rest / G + comm (:func:`~shardlab.schedule.floor_bound_ms`).
The floors are capabilities of the models that can prove them:

- compute: ``floor_ms(tables, lookup_batch)`` -> (per-op ms, rest ms) (the analytic model:
  additive over tables plus a per-op cost, non-negative terms that no split makes smaller;
  :meth:`~shardlab.costmodel.analytic.AnalyticCompute.floor_ms`);
- comm: ``floor_ms(G, total_dim)``, at most the mean fw + bw ms over any ranks that include
  every rank with a positive dim sum, for any dim sums adding up to >= total_dim and any delays,
  affine in total_dim (the analytic all-to-all and the GPU-cluster topology model);
- row-wise comm (when the evaluator costs row-wise collectives): ``increment_floor_ms(G, dim)``
  for ``dim`` reduce-scattered columns on any rank, concave in dim. A plan's columns go to the all-to-all
  (total D_a) or are reduce-scattered (D_r), D_a + D_r >= D, so the comm floor is the smaller
  of the two ends, min(floor(D), floor(0) + increment_floor(D)): a concave function of the
  split has its minimum at an end.

A learned (neural) model is neither additive nor monotone: a shard's predicted cost can fall
when a table is added or a table is split, so nothing it predicts for a few shards bounds what
it predicts for every plan, and it gives no bound (None; reports then show none).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.base import simulate
from shardlab.costmodel.bundle import load_bundle
from shardlab.costmodel.offload import offload_note
from shardlab.costmodel.rowwise_comm import WithRowWise, load_rowwise_comm
from shardlab.costmodel.valid_range import range_label, range_report
from shardlab.evaluate.evaluation import DeviceCost, Evaluation
from shardlab.evaluate.evaluator import check_plans, row_lookup_note, sequence_note
from shardlab.evaluate.exchange import comm_pattern
from shardlab.evaluate.reference import compare_to_reference
from shardlab.data.lookups import device_tables
from shardlab.plan import Plan, device_memory_bytes, validate_plan
from shardlab.schedule import floor_bound_ms
from shardlab.tables import Task


def comm_floor_ms(comm: Any, rowwise_comm: Any, ngpu: int, total_dim: int) -> float | None:
    """At most the mean fw + bw comm ms over the devices holding blocks of any plan over
    ``ngpu`` devices whose tables hold ``total_dim`` columns, costed with ``comm`` and, when
    given, ``rowwise_comm``'s increment (module docstring); 0 for one device; None when a model
    has no floor."""
    if ngpu < 2:
        return 0.0
    floor = getattr(comm, "floor_ms", None)
    full = floor(ngpu, total_dim) if floor is not None else None
    if full is None or rowwise_comm is None:
        return full
    rw = getattr(rowwise_comm, "increment_floor_ms", None)
    inc = rw(ngpu, total_dim) if rw is not None else None
    return None if inc is None else min(full, floor(ngpu, 0) + inc)


def model_bound_ms(task: Task, model: Any, rowwise_comm: Any = None) -> float | None:
    """The task's lower bound (ms) under cost-model bundle ``model`` (and ``rowwise_comm``, as
    :func:`estimate_plan` costs row-wise plans): at most every valid plan's predicted cost, or
    None when the compute or a comm model has no floor (module docstring)."""
    floor = getattr(model.compute, "floor_ms", None)
    compute = floor(task.tables, task.batch_size) if floor is not None else None
    if compute is None:
        return None
    comm = comm_floor_ms(model.comm_for(task.ngpu)[0], rowwise_comm, task.ngpu, sum(t.out_dim for t in task.tables))
    return None if comm is None else floor_bound_ms(compute[0], compute[1], task.ngpu, comm)


def estimate_plan(task: Task, plan: Plan, model: Any, lower_bound: bool = True, rowwise_comm: Any = None
                  ) -> Evaluation:
    """A plan's cost predicted by a cost-model bundle
    (:class:`~shardlab.costmodel.bundle.CostModelBundle`), labelled with the model's ``source``
    (``model:...`` or ``analytic:...``). ``lower_bound``: also the task's bound under the same
    models (:func:`model_bound_ms`; None where the model gives none).

    ``rowwise_comm``: a fitted :class:`~shardlab.costmodel.rowwise_comm.RowWiseComm`. Given, a
    plan with row-wise traffic (:func:`~shardlab.evaluate.exchange.comm_pattern`: tables split by
    rows) is costed with the pattern's all-to-all dim sums (a table split over every device
    leaves them) plus the row-wise collectives' predicted increment, and the source says so.
    Not given, or a plan without row blocks: every shard's columns on its device's all-to-all.
    Row blocks of tables with only the Task JSON fields are costed on lookups fitted to their
    reuse bins, and the source says for how many tables (:func:`~shardlab.evaluate.evaluator.row_lookup_note`).
    Devices or all-to-alls outside the models' valid range are costed by the bundle's fallback, and
    the source says how many and by what (:func:`~shardlab.costmodel.valid_range.range_label`)."""
    validate_plan(task, plan)
    per_dev = device_tables(task, plan)
    comm_model, comm_label = model.comm_for(plan.ngpu)
    comm = comm_model
    if rowwise_comm is not None and plan.ngpu > 1:
        dims, rw = comm_pattern(task, plan, int(rowwise_comm.setting("batch_size")))
        if not rw.empty:
            shard_dims = np.array([sum(t.out_dim for t in ts) for ts in per_dev])
            comm = WithRowWise(comm_model, rowwise_comm.increment(plan.ngpu, rw.to_dict()), shard_dims - dims)
            comm_label += "+" + rowwise_comm.source
    sim = simulate(per_dev, model.compute, comm)
    comm_label += range_label(range_report(model.compute, comm_model, per_dev))
    mem = [b / C.GB for b in device_memory_bytes(task, plan)]
    devices = tuple(DeviceCost(g, float(sim.fw_compute[g]), float(sim.bw_compute[g]), float(sim.fw_comm[g]),
                               float(sim.bw_comm[g]), mem[g]) for g in range(plan.ngpu))
    bound = model_bound_ms(task, model, rowwise_comm) if lower_bound else None
    note = row_lookup_note(task, {plan.method: plan}) + sequence_note(task) + offload_note(task.tables)
    return Evaluation(task.name, plan.method, model.source + comm_label + note, devices, bound,
                      bound_source=floor_label(model) if bound is not None else None)


def floor_label(model: Any) -> str:
    """What :func:`model_bound_ms` rests on, in one line."""
    return f"the floor over every plan under {model.source}"


class ModelEvaluator:
    """The :class:`~shardlab.evaluate.evaluator.Evaluator` of a cost model.

    ``model``: a cost-model bundle, or the name / manifest path of one (loaded for
    ``profile``, default ``constants.PLAN_PROFILE``); ``lower_bound``: also give the task's bound
    under the model (:func:`model_bound_ms`: None for a model that has none, e.g. a neural one);
    ``reference``: the plan to
    compare against (default: the best baseline, see
    :func:`~shardlab.evaluate.reference.resolve_reference`). Predictions carry no uncertainty,
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
        """Predicted Evaluations of ``plans``, one shared bound (:func:`model_bound_ms`, or None),
        compared to the reference."""
        check_plans(task, plans)
        model = self.bundle()
        rowwise = self.rowwise_model(model)
        bound = model_bound_ms(task, model, rowwise) if self.lower_bound else None
        out = {}
        for k, p in plans.items():
            e = estimate_plan(task, p, model, lower_bound=False, rowwise_comm=rowwise)
            out[k] = Evaluation(e.task, e.method, e.source, e.per_device, bound,
                                bound_source=floor_label(model) if bound is not None else None)
        return compare_to_reference(out, self.reference)
