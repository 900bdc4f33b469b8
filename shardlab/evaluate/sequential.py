"""Measuring with a time budget: sittings are added while any verdict against the reference is
still ``inconclusive``, and measuring stops when every verdict is decisive, the budget is spent,
or the looks decided in advance are used up.

**Why the intervals stay honest.** Stopping when the data look decisive would make a 95%
interval cover less than 95% of the time. So the number of looks K
(:data:`~shardlab.constants.SEQUENTIAL_LOOKS`, one after each sitting) is fixed before anything
is measured, and every look's interval is at confidence 1 - 0.05 / K (:func:`look_confidence`).
By the union bound (Bonferroni over the K looks: the simplest alpha-spending rule of a
group-sequential design, spending 0.05 / K at each look; Jennison & Turnbull, *Group Sequential
Methods with Applications to Clinical Trials*, 2000) the chance that ANY look's interval misses
the true ratio is at most 0.05, so a verdict taken at the first decisive look errs at most as often
as a fixed-size comparison's would. It costs width: each look's interval is wider than a 95% one
of the same rounds. ``studies/statistics/sequential.py`` simulates the rate of wrong decisive
verdicts and the sittings a verdict takes.

**Decided plans drop out.** After a look, a plan with a decisive verdict is not measured in later
sittings; the reference and the plans still open are, in paired rounds as before. A plan's
Evaluation holds the sittings it was measured in (a prefix of the reference's), and its
comparison pairs it with the reference's rounds of those sittings only.

**Why each plan stopped** (the Comparison's ``stopped``): ``decided after S of at most K
sittings``; ``budget spent after S sittings``; or ``not decided in K sittings`` (its paired
ratio is too close to the margin's edge for this machine's noise to settle).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from shardlab import constants as C
from shardlab.errors import field_error
from shardlab.evaluate.stats import CONFIDENCE
from shardlab.evaluate.values import Evaluation, compare_to_reference

#: Verdicts that end a plan's measuring.
DECISIVE = ("faster", "slower", "equivalent")


def look_confidence(looks: int = C.SEQUENTIAL_LOOKS, confidence: float = CONFIDENCE) -> float:
    """The coverage of each look's interval: 1 - (1 - ``confidence``) / ``looks``."""
    if isinstance(looks, bool) or int(looks) != looks or looks < 1:
        raise field_error("sequential comparison", "looks", looks, "must be a whole number >= 1")
    return 1.0 - (1.0 - confidence) / int(looks)


def check_budget(budget_s: Any) -> float:
    """``budget_s`` (s) as a float; one line unless a finite number > 0."""
    try:
        b = float(budget_s)
    except (TypeError, ValueError):
        raise field_error("measured evaluator", "budget_s", budget_s, "must be a number of seconds > 0") from None
    if not b > 0 or b == float("inf"):
        raise field_error("measured evaluator", "budget_s", budget_s, "must be a number of seconds > 0")
    return b


def compare_at_look(plan: Evaluation, reference: Evaluation, name: str, ref_name: str, seed: int, margin: float,
                    sitting_sd: float | None, chosen: str | None, level: float) -> Evaluation:
    """``plan`` compared with ``reference`` (both measured in the same sittings) at ``level``."""
    return compare_to_reference({name: plan, ref_name: reference}, ref_name, seed, margin, sitting_sd, chosen,
                                confidence=level)[name]


def run_sequential(sitting: Callable[[int, Sequence[str]], Mapping[str, list]],
                   evaluation: Callable[[str, Sequence[Mapping[str, list]]], Evaluation],
                   plans: Sequence[str], reference: str, budget_s: float, looks: int, seed: int, margin: float,
                   sitting_sd: float | None, chosen: str | None, clock: Callable[[], float] = time.perf_counter,
                   started: float | None = None) -> tuple[dict[str, Evaluation], list[Mapping[str, list]]]:
    """Measure in sittings until every plan is decided, the budget is spent or ``looks`` sittings
    are done (module docstring).

    ``sitting(s, names)``: measures sitting ``s`` of ``names`` (the reference first) in paired
    rounds and returns name -> per-round measurements; ``evaluation(name, sittings)``: the
    Evaluation of plan ``name`` from its measurements of those sittings; ``plans``: the distinct
    plans (the reference among them); ``budget_s``: seconds in all, counted from ``started`` (a
    ``clock`` reading: when the evaluation began, so a selection sitting counts too; default: this
    call), and a sitting is not started when the last one's length would overrun it. Returns every
    plan's Evaluation compared with the reference (``stopped`` says why, ``confidence`` the
    looks' level) and the sittings measured."""
    budget = check_budget(budget_s)
    level = look_confidence(looks)
    start = clock() if started is None else started
    open_ = [p for p in plans if p != reference]
    stopped: dict[str, str] = {}
    done: list[Mapping[str, list]] = []
    compared: dict[str, Evaluation] = {}
    for s in range(int(looks)):
        began = clock()
        done.append(sitting(s, [reference, *open_]))
        ref_now = evaluation(reference, done)
        for p in list(open_):
            compared[p] = compare_at_look(evaluation(p, done), ref_now, p, reference, seed, margin, sitting_sd,
                                          chosen, level)
            if compared[p].verdict in DECISIVE:
                open_.remove(p)
                stopped[p] = f"decided after {s + 1} of at most {looks} sittings"
        if not open_:
            break
        now = clock()
        if s + 1 < looks and now - start + (now - began) > budget:
            for p in open_:
                stopped[p] = f"budget spent after {s + 1} sittings ({budget:g} s)"
            break
    for p in open_:
        stopped.setdefault(p, f"not decided in {looks} sittings: too close to the margin for this noise")
    ref_all = evaluation(reference, done)
    out = {reference: compare_at_look(ref_all, ref_all, reference, reference, seed, margin, sitting_sd, chosen, level)}
    out.update({p: compared[p].with_comparison(replace(compared[p].comparison, stopped=stopped[p]))
                for p in plans if p != reference})
    return out, done
