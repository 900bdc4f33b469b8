"""The evaluation stage's contract: one protocol, :class:`Evaluator`, that turns a task's plans
into :class:`~shardlab.evaluate.evaluation.Evaluation` values, and what every evaluator checks
and says of them (the plans it accepts, the words of its ``source`` notes, the label of its
costs in a report).

Implementations: :class:`~shardlab.evaluate.model.ModelEvaluator` (a cost model's prediction,
or the analytic model), :class:`~shardlab.evaluate.measured.MeasuredEvaluator` (real kernels
and real ranks, in paired rounds) and :class:`~shardlab.torchrec.evaluator.TorchRecEvaluator`
(real training steps): anything that costs plans -- the CLI, the notebooks, the benchmark --
takes an ``Evaluator`` and never branches on how.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

from shardlab.data.lookups import lookup_origin
from shardlab.errors import ShardlabError
from shardlab.evaluate.evaluation import Evaluation
from shardlab.plan import Plan
from shardlab.tables import Task


@runtime_checkable
class Evaluator(Protocol):
    """Costs every plan of one task. ``evaluate`` returns method -> Evaluation in ``plans``'
    order (keys are the caller's names for the plans); each Evaluation's ``source`` says how
    its numbers were obtained, and carries a comparison against the reference plan."""

    def evaluate(self, task: Task, plans: Mapping[str, Plan]) -> dict[str, Evaluation]:
        """Evaluations of ``plans`` (a non-empty mapping name -> Plan of ``task``)."""


def costs_label(evaluator: Any) -> str:
    """What an evaluator's costs are, for a report's reader: ``"predicted for profile h100 by
    neuroshard"`` for a cost model (it has ``model``), else ``"measured on this machine under
    profile cpu"`` (the measured and TorchRec evaluators)."""
    profile = getattr(evaluator, "profile", "?")
    profile = getattr(profile, "name", profile)
    model = getattr(evaluator, "model", None)
    if model is not None:
        name = model if isinstance(model, str) else getattr(model, "source", type(model).__name__)
        return f"predicted for profile {profile} by {name}"
    return f"measured on this machine under profile {profile}"


def row_lookup_note(task: Task, plans: Mapping[str, Plan]) -> str:
    """The ``source`` note of a predicted evaluation whose plans split by rows tables with only
    the Task JSON fields: their row blocks' loads come from lookups fitted to the tables' reuse
    bins (:func:`~shardlab.data.fit_lookups.fit_table_lookups`), e.g. ``" (row-block lookups fitted
    for 1/7 tables)"``; ``""`` when there are none."""
    split = {p.table for plan in plans.values() for p in plan.placements if p.rows != task.table(p.table).rows}
    fitted = [name for name in split if lookup_origin(task.table(name)) == "none"]
    return f" (row-block lookups fitted for {len(fitted)}/{len(task.tables)} tables)" if fitted else ""


def sequence_note(task: Task) -> str:
    """The ``source`` note of a predicted evaluation of a task with sequence tables: no model
    was fitted to sequence ops, so their outputs are extrapolated (the analytic models' write
    term; a learned model's range sends their devices to its analytic fallback), e.g.
    ``" (2/7 sequence tables: outputs extrapolated from pooled ops)"``; ``""`` when none."""
    n = sum(not t.pooled for t in task.tables)
    return f" ({n}/{len(task.tables)} sequence tables: outputs extrapolated from pooled ops)" if n else ""


def check_plans(task: Task, plans: Mapping[str, Plan]) -> None:
    """One-line errors for an empty mapping or a plan of another task / device count."""
    if not plans:
        raise ShardlabError("evaluate: field 'plans' is empty")
    for name, p in plans.items():
        if p.task != task.name:
            raise ShardlabError(f"evaluate: plan '{name}': field 'task' = {p.task!r} is not the task {task.name!r}")
        if p.ngpu != task.ngpu:
            raise ShardlabError(f"evaluate: plan '{name}': field 'ngpu' = {p.ngpu} is not the task's {task.ngpu}")
