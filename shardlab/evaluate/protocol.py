"""The evaluation stage: one protocol, :class:`Evaluator`, that turns a task's plans into
Evaluations, and the reference-plan comparison every evaluator attaches.

Implementations: :class:`~shardlab.evaluate.model.ModelEvaluator` (a cost model's
prediction, or the analytic model) and :class:`~shardlab.evaluate.measured.MeasuredEvaluator`
(real kernels and real ranks, in paired rounds). A TorchRec-backed evaluator (real training
steps) is a third implementation of the same protocol: anything that costs plans -- the CLI,
the notebooks, the benchmark -- takes an ``Evaluator`` and never branches on how.
"""

from __future__ import annotations

from typing import Mapping, Protocol, runtime_checkable

import numpy as np

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.evaluate.stats import bootstrap_median_ci, paired_ratios, verdict
from shardlab.evaluate.values import Comparison, Evaluation
from shardlab.plan import Plan
from shardlab.tables import Task


@runtime_checkable
class Evaluator(Protocol):
    """Costs every plan of one task. ``evaluate`` returns method -> Evaluation in ``plans``'
    order (keys are the caller's names for the plans); each Evaluation's ``source`` says how
    its numbers were obtained, and carries a comparison against the reference plan."""

    def evaluate(self, task: Task, plans: Mapping[str, Plan]) -> dict[str, Evaluation]:
        """Evaluations of ``plans`` (a non-empty mapping name -> Plan of ``task``)."""


def check_plans(task: Task, plans: Mapping[str, Plan]) -> None:
    """One-line errors for an empty mapping or a plan of another task / device count."""
    if not plans:
        raise ShardlabError("evaluate: field 'plans' is empty")
    for name, p in plans.items():
        if p.task != task.name:
            raise ShardlabError(f"evaluate: plan '{name}': field 'task' = {p.task!r} is not the task {task.name!r}")
        if p.ngpu != task.ngpu:
            raise ShardlabError(f"evaluate: plan '{name}': field 'ngpu' = {p.ngpu} is not the task's {task.ngpu}")


def resolve_reference(evaluations: Mapping[str, Evaluation], reference: str | None) -> str:
    """The name of the reference plan: ``reference`` when given (one-line error if it is not
    among the plans), else the best baseline -- the cheapest plan whose method is one of
    :data:`~shardlab.constants.BASELINE_METHODS` -- else the first plan."""
    if reference is not None:
        if reference not in evaluations:
            raise ShardlabError(f"evaluate: field 'reference' = {reference!r} is not one of the plans "
                                f"({', '.join(evaluations)})")
        return reference
    base = [k for k, e in evaluations.items() if e.method in C.BASELINE_METHODS]
    if base:
        return min(base, key=lambda k: evaluations[k].cost_ms)
    return next(iter(evaluations))


def compare_to_reference(evaluations: Mapping[str, Evaluation], reference: str | None = None,
                         seed: int = 0) -> dict[str, Evaluation]:
    """Every evaluation with its :class:`Comparison` against the reference plan
    (:func:`resolve_reference`). Evaluations with ``rounds_ms`` are compared round by round
    (paired ratios, bootstrap interval, verdict: :mod:`shardlab.evaluate.stats`); others by the
    ratio of their costs alone (no interval, no verdict). Same order as ``evaluations``."""
    ref_name = resolve_reference(evaluations, reference)
    ref = evaluations[ref_name]
    out = {}
    for k, e in evaluations.items():
        if e.rounds_ms and ref.rounds_ms:
            r = paired_ratios(e.rounds_ms, ref.rounds_ms)
            ci = bootstrap_median_ci(r, seed=seed)
            comp = Comparison(ref_name, float(np.median(r)), ci, verdict(ci))
        else:
            comp = Comparison(ref_name, e.cost_ms / ref.cost_ms if ref.cost_ms > 0 else float("nan"))
        out[k] = e.with_comparison(comp)
    return out
