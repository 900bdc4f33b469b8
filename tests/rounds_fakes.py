"""Evaluations as if measured in paired rounds, made without measuring: a model's prediction
with per-round costs drawn around it (seeded), their 95% interval and the paired comparison --
the fields a :class:`~shardlab.evaluate.MeasuredEvaluator` fills -- so report tests need no
fbgemm kernels or gloo ranks."""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np

from shardlab.constants import EQUIVALENCE_MARGIN
from shardlab.evaluate import Evaluation, ModelEvaluator, bootstrap_median_ci, compare_to_reference
from shardlab.plan import Plan
from shardlab.tables import Task


def as_measured(evaluations: Mapping[str, Evaluation], rounds: int = 5, noise: float = 0.03,
                scale: Mapping[str, float] | None = None, seed: int = 0,
                reference: str | None = None, margin: float = EQUIVALENCE_MARGIN) -> dict[str, Evaluation]:
    """``evaluations`` relabelled ``measured:fake`` with ``rounds`` per-round costs (ms): the
    cost times ``scale[name]`` (default 1) times a per-round drift shared by every plan (paired
    rounds drift together) times ``1 + noise * N(0, 1)`` of its own; intervals and comparisons
    against ``reference`` (default: the best baseline; verdicts with equivalence ``margin``) as the
    measured evaluator computes them."""
    rng = np.random.default_rng(seed)
    drift = 1.0 + 0.2 * rng.random(rounds)
    out = {}
    for k, e in evaluations.items():
        r = e.cost_ms * (scale or {}).get(k, 1.0) * drift * (1.0 + noise * rng.standard_normal(rounds))
        out[k] = replace(e, source="measured:fake", rounds_ms=tuple(float(x) for x in r),
                         ci95_ms=bootstrap_median_ci(r, seed=seed), comparison=None)
    return compare_to_reference(out, reference, seed, margin)


class FakeMeasuredEvaluator:
    """An :class:`~shardlab.evaluate.Evaluator` that predicts with the analytic model and
    returns :func:`as_measured` of the predictions (deterministic for a seed); counts calls."""

    def __init__(self, rounds: int = 5, noise: float = 0.03, seed: int = 0):
        self.rounds, self.noise, self.seed, self.calls = rounds, noise, seed, 0

    def evaluate(self, task: Task, plans: Mapping[str, Plan]) -> dict[str, Evaluation]:
        self.calls += 1
        return as_measured(ModelEvaluator("analytic").evaluate(task, plans), self.rounds, self.noise, seed=self.seed)
