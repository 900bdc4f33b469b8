"""The reference rule: which plan the others are judged against, how it was chosen, and every
plan's :class:`~shardlab.evaluate.evaluation.Comparison` against it (the verdict rule itself is
:func:`~shardlab.evaluate.stats.verdict`)."""

from __future__ import annotations

from typing import Any, Mapping

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.evaluate.evaluation import Comparison, Evaluation
from shardlab.evaluate.stats import CONFIDENCE, MIN_ROUNDS, check_margin, paired_ratio_ci, verdict


#: How the reference was chosen: the words a Comparison's ``chosen`` and the reports carry
#: (:func:`choose_reference`; :data:`SELECTED` by the measured evaluators, :func:`selects_reference`).
NAMED, CHEAPEST_BASELINE, FIRST_PLAN = ("named", "cheapest baseline by these same costs",
                                        "the first plan (no baseline among the plans)")
SELECTED = f"best baseline in a separate selection sitting of {C.SELECTION_ROUNDS} rounds"


def baseline_names(methods: Mapping[str, Any]) -> list[str]:
    """The keys of ``methods`` (name -> Plan or Evaluation) whose method is a baseline
    (:data:`~shardlab.constants.BASELINE_METHODS`), in order."""
    return [k for k, v in methods.items() if v.method in C.BASELINE_METHODS]


def selects_reference(reference: str | None, baselines: list[str], rounds: int) -> bool:
    """Whether a measuring evaluator picks its reference in a separate selection sitting first:
    none named, two or more (distinct) ``baselines`` to choose among, and enough ``rounds`` for
    verdicts (:data:`~shardlab.evaluate.stats.MIN_ROUNDS`)."""
    return reference is None and len(baselines) >= 2 and int(rounds) >= MIN_ROUNDS


def resolve_reference(evaluations: Mapping[str, Evaluation], reference: str | None) -> str:
    """The name of the reference plan (:func:`choose_reference`)."""
    return choose_reference(evaluations, reference)[0]


def choose_reference(evaluations: Mapping[str, Evaluation], reference: str | None) -> tuple[str, str]:
    """The name of the reference plan and how it was chosen: ``reference`` when given (one-line
    error if it is not among the plans; :data:`NAMED`), else the best baseline -- the cheapest
    plan whose method is one of :data:`~shardlab.constants.BASELINE_METHODS`
    (:data:`CHEAPEST_BASELINE`: for a measured comparison a winner's curse, which the measured
    evaluators avoid by naming the reference they picked in a separate selection sitting) --
    else the first plan (:data:`FIRST_PLAN`)."""
    if reference is not None:
        if reference not in evaluations:
            raise ShardlabError(f"evaluate: field 'reference' = {reference!r} is not one of the plans "
                                f"({', '.join(evaluations)})")
        return reference, NAMED
    base = baseline_names(evaluations)
    if base:
        return min(base, key=lambda k: evaluations[k].cost_ms), CHEAPEST_BASELINE
    return next(iter(evaluations)), FIRST_PLAN


def compare_to_reference(evaluations: Mapping[str, Evaluation], reference: str | None = None,
                         seed: int = 0, margin: float = C.EQUIVALENCE_MARGIN, sitting_sd: float | None = None,
                         chosen: str | None = None, confidence: float = CONFIDENCE) -> dict[str, Evaluation]:
    """Every evaluation with its :class:`Comparison` against the reference plan
    (:func:`choose_reference`; ``chosen`` replaces its word for how, e.g. when the caller
    picked ``reference`` in a selection sitting). Evaluations measured in rounds are compared
    round by round, sitting by sitting (paired ratios, hierarchical bootstrap interval widened
    by the between-sitting log-sd ``sitting_sd`` -- None: the one the reference's evaluation
    recorded from its profile's data, ``Evaluation.sitting_log_sd``, 0 where it has none -- and a verdict with equivalence ``margin``, both dimensionless:
    :func:`~shardlab.evaluate.stats.paired_ratio_ci`) at ``confidence`` (0.95 unless a sequential
    look asks for more); others by the ratio of their costs alone (no interval, no verdict). Same
    order as ``evaluations``."""
    margin = check_margin(margin)
    ref_name, how = choose_reference(evaluations, reference)
    how = chosen or how
    ref = evaluations[ref_name]
    sitting_sd = (ref.sitting_log_sd or 0.0) if sitting_sd is None else sitting_sd
    out = {}
    for k, e in evaluations.items():
        paired = e.sittings and [len(x) for x in e.sittings] == [len(x) for x in ref.sittings]
        if paired:
            ratio, ci = paired_ratio_ci(e.sittings, ref.sittings, seed=seed, sitting_sd=sitting_sd, confidence=confidence)
            said = verdict(ci, margin)
            comp = Comparison(ref_name, ratio, ci, said, margin if said is not None else None, how,
                              None if confidence == CONFIDENCE else float(confidence))
        else:
            comp = Comparison(ref_name, e.cost_ms / ref.cost_ms if ref.cost_ms > 0 else float("nan"), chosen=how)
        out[k] = e.with_comparison(comp)
    return out
