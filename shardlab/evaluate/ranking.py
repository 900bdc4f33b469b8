"""How well a cost model ranks plans: its predicted plan costs against one measured comparison
of the same plans (one task).

A search only needs the model to put plans in the right order, so the metric is the ranking:

- **Kendall's tau** (tau-b) of predicted against measured plan costs (ms) over the task's plans:
  1 when the two orders agree on every pair, -1 when they disagree on every pair. Tau-b, not
  tau-a, because identical plans are measured once and share their rounds, so measured ties are
  real and must not cap a perfect model's tau below 1.
- **Decisive pairs ordered right**: among the pairs of plans whose measured paired comparison is
  decisive -- verdict ``faster`` or ``slower`` of one plan against the other, from the paired
  per-round ratio's 95% interval with the equivalence margin of
  :data:`~shardlab.constants.EQUIVALENCE_MARGIN` (:func:`~shardlab.evaluate.reference.compare_to_reference`,
  :func:`~shardlab.evaluate.stats.verdict`) -- the share the model orders the same way. Pairs
  judged ``equivalent`` or ``inconclusive``, or with no verdict (fewer than 3 rounds, or rounds
  that do not pair), are not counted: the measurement does not say which is faster. A decisive
  pair the model predicts as a tie counts as wrong.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.evaluate.stats import check_margin
from shardlab.evaluate.evaluation import Evaluation
from shardlab.evaluate.reference import compare_to_reference

#: Verdicts that say which of two plans is faster.
DECISIVE = ("faster", "slower")


def kendall_tau_b(a: Any, b: Any) -> float:
    """Kendall's tau-b of two equal-length 1-D sequences (dimensionless, in [-1, 1]): pairs tied
    in either are neither concordant nor discordant and the denominator leaves out each
    sequence's ties; nan with fewer than 2 values or when either sequence is constant."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ShardlabError(f"kendall tau: field 'b' has shape {y.shape}, field 'a' {x.shape}")
    i, j = np.triu_indices(len(x), k=1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    denom = math.sqrt(float(np.count_nonzero(dx)) * float(np.count_nonzero(dy)))
    return float(np.sum(dx * dy) / denom) if denom > 0 else float("nan")


def pair_verdicts(measured: Mapping[str, Evaluation], seed: int = 0, margin: float = C.EQUIVALENCE_MARGIN,
                  sitting_sd: float | None = None) -> dict[tuple[str, str], str | None]:
    """The measured verdict of plan a against plan b for every pair (a, b), a before b in
    ``measured``'s order: ``faster`` when a is faster than b, ``slower``, ``equivalent``,
    ``inconclusive``, or None without one. Each b in turn is the named reference of
    :func:`~shardlab.evaluate.reference.compare_to_reference` (paired per-round ratios, sitting by
    sitting; ``sitting_sd`` None: the profile's between-sitting spread; ``margin``
    dimensionless). ``measured``: name -> measured Evaluation (rounds in ``rounds_ms``, by
    sitting in ``sittings_ms``)."""
    names = list(measured)
    out: dict[tuple[str, str], str | None] = {}
    for j, b in enumerate(names[1:], start=1):
        vs_b = compare_to_reference({k: measured[k] for k in names[:j + 1]}, b, seed, margin, sitting_sd)
        for a in names[:j]:
            out[(a, b)] = vs_b[a].comparison.verdict if vs_b[a].comparison else None
    return out


def _finite_costs(costs: Mapping[str, Any], field: str) -> dict[str, float]:
    """``costs`` as name -> float ms; one-line error naming ``field`` for a non-finite or negative one."""
    out = {}
    for k, v in costs.items():
        try:
            x = float(v)
        except (TypeError, ValueError):
            x = float("nan")
        if not math.isfinite(x) or x < 0:
            raise ShardlabError(f"ranking quality: field '{field}' has cost {v!r} for plan {k!r} (must be ms >= 0)")
        out[k] = x
    return out


def ranking_quality(predicted: Mapping[str, float], measured: Mapping[str, Evaluation],
                    verdicts: Mapping[tuple[str, str], str | None] | None = None, seed: int = 0,
                    margin: float = C.EQUIVALENCE_MARGIN) -> dict[str, Any]:
    """A model's ranking of one task's plans against their measured comparison (module docstring).

    ``predicted``: plan name -> predicted plan cost (ms); ``measured``: plan name -> measured
    Evaluation of the same plans (paired rounds; same names, any order). ``verdicts``: the
    measured pairs' verdicts from :func:`pair_verdicts` (computed here when None; pass them to
    score several models on one measurement without recomputing). Returns a dict:

    - ``n_plans``: plans ranked; ``pairs``: n (n - 1) / 2;
    - ``kendall_tau``: tau-b of predicted vs measured cost (nan below 2 plans or with a constant side);
    - ``decisive_pairs``: pairs whose measured verdict is ``faster`` or ``slower``;
      ``decisive_right``: those the model orders the same way; ``decisive_share``: their ratio
      (nan without a decisive pair);
    - ``equivalent_pairs``, ``inconclusive_pairs``, ``unjudged_pairs``: the pairs left out;
    - ``plan_cost_error_median``: median over plans of |predicted - measured| / measured
      (measured: the median over rounds, ms; a fraction);
    - ``margin``: the equivalence margin the verdicts used (dimensionless)."""
    margin = check_margin(margin, "ranking quality")
    if set(predicted) != set(measured):
        extra = sorted(set(predicted) ^ set(measured))
        raise ShardlabError(f"ranking quality: field 'predicted' and field 'measured' name different plans "
                            f"({', '.join(extra)})")
    names = list(measured)
    pred = _finite_costs(predicted, "predicted")
    meas = _finite_costs({k: e.cost_ms for k, e in measured.items()}, "measured")
    verdicts = pair_verdicts(measured, seed, margin) if verdicts is None else verdicts
    counts = {"equivalent": 0, "inconclusive": 0, None: 0}
    decisive = right = 0
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            said = verdicts.get((a, b)) if (a, b) in verdicts else _flipped(verdicts.get((b, a)))
            if said in DECISIVE:
                decisive += 1
                right += int((pred[a] < pred[b]) if said == "faster" else (pred[a] > pred[b]))
            else:
                counts[said if said in counts else None] += 1
    p = np.array([pred[k] for k in names])
    m = np.array([meas[k] for k in names])
    err = np.abs(p - m) / np.maximum(m, 1e-12)
    return {"n_plans": len(names), "pairs": len(names) * (len(names) - 1) // 2,
            "kendall_tau": kendall_tau_b(p, m) if len(names) >= 2 else float("nan"),
            "decisive_pairs": decisive, "decisive_right": right,
            "decisive_share": right / decisive if decisive else float("nan"),
            "equivalent_pairs": counts["equivalent"], "inconclusive_pairs": counts["inconclusive"],
            "unjudged_pairs": counts[None],
            "plan_cost_error_median": float(np.median(err)) if len(names) else float("nan"), "margin": margin}


def _flipped(said: str | None) -> str | None:
    """The verdict of b against a from that of a against b."""
    return {"faster": "slower", "slower": "faster"}.get(said or "", said)


def ranking_text(q: Mapping[str, Any]) -> str:
    """One line of a :func:`ranking_quality` result, e.g. ``"Kendall tau 0.733 over 6 plans;
    decisive pairs ordered right 9/10 (90%; 3 equivalent, 2 inconclusive left out)"``."""
    tau = q["kendall_tau"]
    share = f"{q['decisive_right']}/{q['decisive_pairs']}" + (
        f" ({q['decisive_share']:.0%}" if q["decisive_pairs"] else " (no decisive pair")
    left = [f"{q[k]} {w}" for k, w in (("equivalent_pairs", "equivalent"), ("inconclusive_pairs", "inconclusive"),
                                       ("unjudged_pairs", "without a verdict")) if q[k]]
    share += (f"; {', '.join(left)} left out)" if left else ")")
    return (f"Kendall tau {'n/a' if math.isnan(tau) else f'{tau:.3f}'} over {q['n_plans']} plans; "
            f"decisive pairs ordered right {share}")
