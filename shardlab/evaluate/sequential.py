"""Measuring with a time budget: sittings are added while any verdict against the reference is
still ``inconclusive``, and measuring stops when every verdict is decisive, the budget is spent,
or the looks decided in advance are used up.

**Why the intervals stay honest.** Stopping when the data look decisive would make a 95%
interval cover less than 95% of the time. So the number of looks K
(:data:`~shardlab.constants.SEQUENTIAL_LOOKS`, one after each sitting) and the width of every
look's interval are fixed before anything is measured: look k's interval is a **repeated
confidence interval** (Jennison & Turnbull, *Group Sequential Methods with Applications to
Clinical Trials*, 2000, ch. 9) at the normal quantile c_k of a group-sequential boundary
(:func:`boundary_z`), chosen so that the chance that ANY of the K intervals misses the true ratio
is 0.05 when each sitting adds the same information. A verdict read off any look's interval --
the first decisive one, or the last before the budget ran out -- is then wrong at most 5% of the
time, whatever made measuring stop. The boundary's shape is
:data:`~shardlab.constants.SEQUENTIAL_BOUNDARY`:

- ``obrien-fleming`` (the default): c_k = C sqrt(K / k). Early looks are strict (only clear
  differences stop there), and the last look is nearly as narrow as one fixed 95% look of the
  same sittings (C = 2.024 at K = 4, 2.073 at K = 8, against 1.96), so the close calls that
  measure longest lose little width.
- ``pocock``: one c for every look (2.361 at K = 4).
- ``bonferroni``: c_k = z of 1 - 0.05 / K at every look (2.498 at K = 4), the union bound;
  valid for any dependence between looks and the widest.

C is found numerically (the distribution of the cumulative sums of K independent standard
normal increments, integrated on a grid; :func:`crossing_probability`) and reproduces the
published constants (tested). ``studies/statistics/sequential.py`` simulates the rate of wrong
decisive verdicts and the sittings a verdict takes, with this machine's noise.

**Decided plans drop out.** After a look, a plan with a decisive verdict is not measured in later
sittings; the reference and the plans still open are, in paired rounds as before. A plan's
Evaluation holds the sittings it was measured in (a prefix of the reference's), and its
comparison pairs it with the reference's rounds of those sittings only, at the level of the look
it stopped at (the Comparison's ``confidence``).

**Why each plan stopped** (the Comparison's ``stopped``): ``decided after S of at most K
sittings``; ``budget spent after S sittings``; or ``not decided in K sittings`` (its paired
ratio is too close to the margin's edge for this machine's noise to settle).
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.errors import field_error
from shardlab.evaluate.stats import CONFIDENCE
from shardlab.evaluate.values import Evaluation, compare_to_reference

#: Verdicts that end a plan's measuring.
DECISIVE = ("faster", "slower", "equivalent")


#: The boundary shapes of :func:`boundary_z` (module docstring).
BOUNDARIES = ("obrien-fleming", "pocock", "bonferroni")

#: Grid step of :func:`crossing_probability` (in units of one sitting's standard deviation; each
#: edge cell weighted by its share inside the region): the constants it gives are within 0.001 of
#: the published ones.
GRID_STEP = 0.004


def check_looks(looks: Any) -> int:
    """``looks`` as an int; one line unless a whole number >= 1."""
    if isinstance(looks, bool) or not isinstance(looks, (int, float, np.integer)) or int(looks) != looks or looks < 1:
        raise field_error("sequential comparison", "looks", looks, "must be a whole number >= 1")
    return int(looks)


def crossing_probability(z: Sequence[float], step: float = GRID_STEP) -> float:
    """P(|Z_k| >= z[k] at some look k), Z_k = S_k / sqrt(k) with S_k the sum of k independent
    standard normals (equal information per look, no true difference). Computed by carrying the
    density of S_k on a grid of ``step`` through each look's continuation region |S_k| <
    z[k] sqrt(k) (the recursive integration of Armitage, McPherson & Rowe, 1969)."""
    z = np.asarray(z, dtype=float)
    edge = float(max(zk * np.sqrt(k + 1) for k, zk in enumerate(z)))
    x = np.arange(-edge - step, edge + 1.5 * step, step)
    t = np.arange(-9.0, 9.0 + step / 2, step)
    kernel = np.exp(-t ** 2 / 2) / np.sqrt(2 * np.pi) * step

    def inside(k: int) -> np.ndarray:         # each grid cell's share inside look k's continuation region
        return np.clip((z[k] * np.sqrt(k + 1) - np.abs(x)) / step + 0.5, 0.0, 1.0)

    f = np.exp(-x ** 2 / 2) / np.sqrt(2 * np.pi) * step * inside(0)
    n = 1 << (len(x) + len(t) - 2).bit_length()
    kf = np.fft.rfft(kernel, n)
    for k in range(1, len(z)):
        g = np.fft.irfft(np.fft.rfft(f, n) * kf, n)[len(t) // 2:len(t) // 2 + len(x)]
        f = np.maximum(g, 0.0) * inside(k)
    return float(1.0 - f.sum())


def boundary_z(looks: int = C.SEQUENTIAL_LOOKS, shape: str = C.SEQUENTIAL_BOUNDARY,
               alpha: float = 1.0 - CONFIDENCE) -> tuple[float, ...]:
    """The normal quantile c_k of each of ``looks`` looks' intervals, shape (looks,): the
    boundary of ``shape`` (:data:`BOUNDARIES`) whose K intervals all cover with probability
    1 - ``alpha`` (module docstring)."""
    k = check_looks(looks)
    if shape not in BOUNDARIES:
        raise field_error("sequential comparison", "boundary", shape, f"must be one of {list(BOUNDARIES)}")
    return _boundary(k, shape, float(alpha))


@lru_cache(maxsize=None)
def _boundary(k: int, shape: str, alpha: float) -> tuple[float, ...]:
    """:func:`boundary_z` of checked arguments, solved once per process."""
    if shape == "bonferroni" or k == 1:
        return (NormalDist().inv_cdf(1.0 - alpha / (2 * k)),) * k
    weights = np.sqrt(k / np.arange(1, k + 1)) if shape == "obrien-fleming" else np.ones(k)
    lo, hi = NormalDist().inv_cdf(1.0 - alpha / 2), NormalDist().inv_cdf(1.0 - alpha / (2 * k))
    for _ in range(40):                                    # bisection: the crossing chance falls as C grows
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if crossing_probability(mid * weights) > alpha else (lo, mid)
    return tuple(float(hi * w) for w in weights)


def look_levels(looks: int = C.SEQUENTIAL_LOOKS, shape: str = C.SEQUENTIAL_BOUNDARY) -> tuple[float, ...]:
    """Each look's interval coverage, 2 Phi(c_k) - 1 (:func:`boundary_z`), shape (looks,)."""
    return tuple(2.0 * NormalDist().cdf(z) - 1.0 for z in boundary_z(looks, shape))


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
                   started: float | None = None, boundary: str = C.SEQUENTIAL_BOUNDARY) -> tuple[dict[str, Evaluation], list[Mapping[str, list]]]:
    """Measure in sittings until every plan is decided, the budget is spent or ``looks`` sittings
    are done (module docstring).

    ``sitting(s, names)``: measures sitting ``s`` of ``names`` (the reference first) in paired
    rounds and returns name -> per-round measurements; ``evaluation(name, sittings)``: the
    Evaluation of plan ``name`` from its measurements of those sittings; ``plans``: the distinct
    plans (the reference among them); ``budget_s``: seconds in all, counted from ``started`` (a
    ``clock`` reading: when the evaluation began, so a selection sitting counts too; default: this
    call), and a sitting is not started when the last one's length would overrun it;
    ``boundary``: the shape of the looks' boundary (:func:`boundary_z`). Returns every plan's
    Evaluation compared with the reference (``stopped`` says why, ``confidence`` the level of the
    look it stopped at) and the sittings measured."""
    budget = check_budget(budget_s)
    levels = look_levels(looks, boundary)
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
                                          chosen, levels[s])
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
    out = {reference: compare_at_look(ref_all, ref_all, reference, reference, seed, margin, sitting_sd, chosen,
                                      levels[len(done) - 1])}
    out.update({p: compared[p].with_comparison(replace(compared[p].comparison, stopped=stopped[p]))
                for p in plans if p != reference})
    return out, done
