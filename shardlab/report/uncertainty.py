"""How a report states the uncertainty of a plan cost: text for a cost and its 95% interval,
for a ratio to the reference plan and for the verdict, and the sentence that explains them.

Three kinds of Evaluation, told apart by what they carry (:class:`~shardlab.evaluate.Evaluation`):

- **measured in paired rounds** (``rounds_ms`` with an interval ``ci95_ms``): the cost is the
  median over rounds with its 95% bootstrap interval; against the reference plan the median
  paired per-round ratio, its interval and a verdict (``faster`` / ``slower`` / ``equivalent`` /
  ``inconclusive``, with the equivalence margin the comparison records: :func:`margin_text`);
- **measured without an interval** (one round, or fewer than 3): a cost and a ratio, no interval,
  no verdict -- said so, never presented as a verdict;
- **predicted** by a cost model (``model:...`` / ``analytic:...``): a cost and a ratio, and the
  words :data:`NO_UNCERTAINTY` where a verdict would be.
"""

from __future__ import annotations

import math

from typing import Mapping

from shardlab.constants import EQUIVALENCE_MARGIN
from shardlab.evaluate import Comparison, Evaluation, compare_to_reference
from shardlab.evaluate.reference import SELECTED

#: What a prediction shows where a measured plan shows its verdict.
NO_UNCERTAINTY = "predicted, no uncertainty"

#: What a measured plan without an interval shows where a verdict would be.
NO_INTERVAL = "measured, no interval (< 3 rounds)"

#: What the reference plan shows in the verdict column.
REFERENCE = "reference"


def is_measured(ev: Evaluation) -> bool:
    """True when ``ev``'s numbers were measured (its ``source`` starts with ``measured``)."""
    return ev.source.startswith("measured")


def with_comparisons(evaluations: Mapping[str, Evaluation], seed: int = 0) -> dict[str, Evaluation]:
    """``evaluations`` as they are when any carries a comparison, else each compared to the
    default reference (the best baseline: :func:`~shardlab.evaluate.compare_to_reference`,
    bootstrap ``seed``). Statistics only: nothing is measured again."""
    if not evaluations or any(e.comparison is not None for e in evaluations.values()):
        return dict(evaluations)
    return compare_to_reference(evaluations, seed=seed)


def reference_of(evaluations: Mapping[str, Evaluation]) -> str | None:
    """The name of the reference plan of the first evaluation with a comparison (None if none)."""
    return next((e.comparison.reference for e in evaluations.values() if e.comparison is not None), None)


def rounds_text(ev: Evaluation, what: str = "rounds") -> str:
    """``"8 rounds"``, or ``"2 sittings x 8 rounds"`` when measured in several sittings."""
    sittings = ev.sittings
    if len(sittings) > 1:
        sizes = sorted({len(s) for s in sittings})
        per = str(sizes[0]) if len(sizes) == 1 else "/".join(str(len(s)) for s in sittings)
        return f"{len(sittings)} sittings x {per} {what}"
    return f"{len(ev.rounds_ms or ())} {what}"


def cost_text(ev: Evaluation) -> str:
    """``"12.345 ms [12.100, 12.600] (5 rounds)"`` when measured with an interval, else
    ``"12.345 ms"`` (cost in ms, interval = 95% CI of the median over rounds)."""
    if ev.ci95_ms is None:
        return f"{ev.cost_ms:.3f} ms"
    lo, hi = ev.ci95_ms
    return f"{ev.cost_ms:.3f} ms [{lo:.3f}, {hi:.3f}] ({rounds_text(ev)})"


def ci_text(ev: Evaluation) -> str:
    """The cost's 95% interval as ``"[lo, hi]"`` (ms), or what stands in for it."""
    if ev.ci95_ms is not None:
        return f"[{ev.ci95_ms[0]:.3f}, {ev.ci95_ms[1]:.3f}]"
    return NO_INTERVAL if is_measured(ev) else NO_UNCERTAINTY


def ratio_text(name: str, ev: Evaluation) -> str:
    """Ratio to the reference plan: ``"0.953 [0.941, 0.966]"`` (paired, with its 95% CI),
    ``"0.953"`` (no interval), ``"1 (reference)"`` for the reference itself, ``""`` without a
    comparison."""
    c = ev.comparison
    if c is None:
        return ""
    if c.reference == name:
        return "1 (reference)"
    if c.ratio_ci95 is None:
        return f"{c.ratio:.3f}"
    return f"{c.ratio:.3f} [{c.ratio_ci95[0]:.3f}, {c.ratio_ci95[1]:.3f}]"


def verdict_text(name: str, ev: Evaluation) -> str:
    """``reference``, the paired verdict, or :data:`NO_UNCERTAINTY` / :data:`NO_INTERVAL`
    where there is none; ``""`` without a comparison."""
    c = ev.comparison
    if c is None:
        return ""
    if c.reference == name:
        return REFERENCE
    if c.verdict is not None:
        return c.verdict
    return NO_INTERVAL if is_measured(ev) else NO_UNCERTAINTY


def level_text(confidence: float) -> str:
    """An interval's coverage as a percentage with the digits that tell it from 100%:
    ``"96.18%"``, ``"99.999999543%"``."""
    decimals = max(1, math.ceil(-math.log10(max(1.0 - float(confidence), 1e-15))))
    return f"{100 * float(confidence):.{decimals}f}%"


def comparison_text(name: str, ev: Evaluation) -> str:
    """One line for a plan: cost (with its interval), ratio to the reference (with its
    interval) and verdict, e.g. ``"neuroshard: 12.345 ms [12.100, 12.600] (5 rounds); x0.953
    [0.941, 0.966] vs torchrec: faster"``."""
    line = f"{name}: {cost_text(ev)}"
    c = ev.comparison
    if c is None:
        return line + ("" if is_measured(ev) else f" ({NO_UNCERTAINTY})")
    if c.reference == name:
        return line + "; the reference"
    level = f" ({level_text(c.confidence)} interval)" if c.confidence is not None else ""
    why = f" ({c.stopped})" if c.stopped else ""
    return line + f"; x{ratio_text(name, ev)}{level} vs {c.reference}: {verdict_text(name, ev)}{why}"


def margin_text(evaluations: Mapping[str, Evaluation]) -> str:
    """The equivalence margin(s) the comparisons in ``evaluations`` used, as a percentage
    (``"5%"``; ``"5% / 10%"`` when they differ); ``""`` when no comparison has a verdict."""
    margins = sorted({e.comparison.margin for e in evaluations.values()
                      if e.comparison is not None and e.comparison.margin is not None})
    return " / ".join(f"{100 * m:g}%" for m in margins)


def verdict_rule(margin: str = "m") -> str:
    """The verdict rule in one sentence (plain text), with the margin as given (``"5%"``)."""
    return ("the verdict is 'faster' or 'slower' when that interval lies wholly below or above 1, 'equivalent' when "
            f"it contains 1 and lies inside [1/(1+m), 1+m] (equivalence margin m = {margin}), else 'inconclusive'")


def uncertainty_note(evaluations: Mapping[str, Evaluation]) -> str:
    """One or two sentences (plain text) that say how sure the costs in ``evaluations`` are."""
    evs = list(evaluations.values())
    ref = reference_of(evaluations)
    vs = f" the reference plan, {ref}," if ref else " the reference plan"
    parts = []
    if any(e.ci95_ms is not None for e in evs):
        rounds = sorted({rounds_text(e, "").strip() for e in evs if e.ci95_ms is not None})
        several = any(len(e.sittings) > 1 for e in evs)
        chosen = next((e.comparison.chosen for e in evs if e.comparison is not None and e.comparison.chosen), None)
        looks = sorted({e.comparison.confidence for e in evs if e.comparison is not None and e.comparison.stopped})
        ratio_ci = (f"its {' / '.join(map(level_text, looks))} interval (measured with a time budget: sittings were "
                    "added while a verdict was inconclusive and each plan stopped once decided, at the level of the "
                    "look it stopped at: a repeated confidence interval by alpha spending on the budget's time, "
                    "wider than 95% before the last look, which keeps the 5% error rate under that stopping)"
                    if looks else "its 95% interval")
        parts.append(f"Measured in {' / '.join(rounds)} paired, shuffled rounds: a plan's cost is the median "
                     "over rounds and its error bar / [interval] the 95% bootstrap confidence interval of that "
                     + ("median, resampling sittings and then rounds within them" if several else "median")
                     + f". The ratio to{vs} is the median of the per-round paired ratios with {ratio_ci}, "
                     "widened by the machine's known spread between sittings where the profile has one; "
                     f"{verdict_rule(margin_text(evaluations) or 'm')}."
                     + (f" The reference is the {chosen}." if chosen == SELECTED else
                        " The reference was named." if chosen == "named" else ""))
    if any(is_measured(e) and e.ci95_ms is None for e in evs):
        parts.append("Measured with fewer than 3 rounds: no interval and no verdict, one measurement can be off by "
                     "tens of percent on a shared machine.")
    if any(not is_measured(e) for e in evs):
        parts.append(f"Predicted by a cost model ({NO_UNCERTAINTY}): ratios to{vs} are ratios of predictions, "
                     "without an interval or a verdict.")
    return " ".join(parts)


def pair_text(a: str, ev_a: Evaluation, b: str, ev_b: Evaluation, seed: int = 0, margin: float | None = None) -> str:
    """Plan ``b`` against plan ``a`` in one line (:func:`comparison_text` of ``b`` with ``a`` as
    the reference): paired per-round ratio, its 95% interval and the verdict when both were
    measured in the same rounds; the ratio of the costs alone otherwise. ``margin``: the
    equivalence margin (dimensionless); default the one ``ev_b``'s comparison used, else
    :data:`~shardlab.constants.EQUIVALENCE_MARGIN`."""
    if a == b:
        return f"{b}: {cost_text(ev_b)}; the same plan on both sides"
    if ev_a.rounds_ms and ev_b.rounds_ms and len(ev_a.rounds_ms) != len(ev_b.rounds_ms):   # not paired
        ratio = ev_b.cost_ms / ev_a.cost_ms if ev_a.cost_ms > 0 else float("nan")
        return comparison_text(b, ev_b.with_comparison(Comparison(a, ratio)))
    if margin is None:
        used = ev_b.comparison.margin if ev_b.comparison is not None else None
        margin = EQUIVALENCE_MARGIN if used is None else used
    return comparison_text(b, compare_to_reference({a: ev_a, b: ev_b}, reference=a, seed=seed, margin=margin)[b])
