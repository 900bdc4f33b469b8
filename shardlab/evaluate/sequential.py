"""Measuring with a time budget: sittings are added while any verdict against the reference is
still ``inconclusive``, and measuring stops when every verdict is decisive, the budget is spent,
or the most sittings (:data:`~shardlab.constants.SEQUENTIAL_LOOKS`) are measured.

**Why the intervals stay honest.** Stopping when the data look decisive would make a 95%
interval cover less than 95% of the time. So every look's interval (one after each sitting) is a
**repeated confidence interval** (Jennison & Turnbull, *Group Sequential Methods with
Applications to Clinical Trials*, 2000, ch. 9) at a normal quantile z_k set by **alpha spending on
the time scale** (Lan & DeMets, *Biometrika* 70, 1983): with t_k the share of the budget spent
when look k is taken, the looks up to k may together miss the true ratio with probability
alpha(t_k), where alpha(t) is the spending function :data:`~shardlab.constants.SEQUENTIAL_SPENDING`
(:func:`spent`), rising from 0 to 0.05 at t = 1. The last look -- the one after which no sitting
would fit the budget, or the most sittings -- spends all that is left. z_k is found from the
earlier looks' z (:func:`next_boundary`: the distribution of the cumulative sums of independent
normal increments, one per sitting, carried through each look's continuation region on a grid;
Armitage, McPherson & Rowe, 1969), so the chance that ANY look's interval misses is 0.05 however
many looks the budget allows, and a verdict read off any look -- the first decisive one or the
last -- is wrong at most 5% of the time.

- ``obrien-fleming`` (the default): alpha(t) = 2 - 2 Phi(z_0.975 / sqrt(t)). Early looks are
  strict (only clear differences stop there), and the last look is nearly a plain 95% interval
  of all the sittings measured, so the close calls that measure longest lose little width; a
  budget that holds one sitting gives exactly one 95% look.
- ``pocock``: alpha(t) = 0.05 ln(1 + (e - 1) t), nearly equal z at every look.

Each look's interval is the 95% interval of the sittings so far (the hierarchical bootstrap
widened by the profile's between-sitting spread: :func:`~shardlab.evaluate.stats.paired_ratio_ci`)
with its log half-widths scaled by z_k / 1.96 (:func:`~shardlab.evaluate.stats.at_level`): a
bootstrap's percentiles cannot be read at the 1 - 1e-5 levels of early looks.

**No verdict on one sitting when the budget holds more.** The looks before
:data:`~shardlab.constants.SEQUENTIAL_MIN_SITTINGS` sittings spend no error probability and
decide nothing, however clear the difference looks, unless the budget holds no more sittings: a
sitting can sit apart from the others as a whole (an op built slow for the sitting, 20-40% off in
set 1's runs), which its own rounds cannot show and only a second sitting can. So does any look
that spends nothing (a budget so long that its share is still ~0).

The looks' times t_k depend on how long sittings took, which depends on how many plans were
still open; they never depend on the comparison being judged at look k (the last look is
declared before its verdicts are read). ``studies/statistics/sequential.py`` simulates the rate
of wrong decisive verdicts and the sittings a verdict takes, with this machine's noise.

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

import math
import time
from dataclasses import replace
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.errors import field_error
from shardlab.evaluate.stats import CONFIDENCE
from shardlab.evaluate.evaluation import Evaluation
from shardlab.evaluate.reference import compare_to_reference

#: Verdicts that end a plan's measuring.
DECISIVE = ("faster", "slower", "equivalent")


#: The spending functions of :func:`spent` (module docstring).
SPENDING = ("obrien-fleming", "pocock")

#: Grid step of :func:`crossing_probability` (in units of one sitting's standard deviation; each
#: edge cell weighted by its share inside the region): the Pocock and O'Brien-Fleming constants
#: it gives are within 0.001 of the published ones (tests).
GRID_STEP = 0.004

#: The largest z a look's interval is given (a look that spends nothing): beyond it the normal
#: tail is below 1e-15, so the interval is as good as infinite.
Z_MOST = 8.0


def check_looks(looks: Any) -> int:
    """``looks`` as an int; one line unless a whole number >= 1."""
    if isinstance(looks, bool) or not isinstance(looks, (int, float, np.integer)) or int(looks) != looks or looks < 1:
        raise field_error("sequential comparison", "looks", looks, "must be a whole number >= 1")
    return int(looks)


def check_spending(spending: Any) -> str:
    """``spending`` if it names a spending function of :data:`SPENDING`; one line otherwise."""
    if spending not in SPENDING:
        raise field_error("sequential comparison", "spending", spending, f"must be one of {list(SPENDING)}")
    return spending


def spent(t: float, spending: str = C.SEQUENTIAL_SPENDING, alpha: float = 1.0 - CONFIDENCE) -> float:
    """alpha(t): the error probability the looks taken by budget share ``t`` (0-1) may spend
    together (module docstring); 0 at t = 0, ``alpha`` at t >= 1."""
    check_spending(spending)
    t = min(max(float(t), 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    return 2.0 * (1.0 - NormalDist().cdf(NormalDist().inv_cdf(1.0 - alpha / 2.0) / math.sqrt(t)))


def crossing_probability(z: Sequence[float], step: float = GRID_STEP) -> float:
    """P(|Z_k| >= z[k] at some look k), Z_k = S_k / sqrt(k) with S_k the sum of k independent
    standard normals (one per sitting, no true difference). Computed by carrying the density of
    S_k on a grid of ``step`` through each look's continuation region |S_k| < z[k] sqrt(k) (the
    recursive integration of Armitage, McPherson & Rowe, 1969); a z above 9 counts as 9 (the
    density beyond is below 1e-18)."""
    z = np.minimum(np.asarray(z, dtype=float), 9.0)
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


@lru_cache(maxsize=4096)
def next_boundary(previous: tuple[float, ...], spend: float) -> float:
    """z of the next look, given the earlier looks' z (``previous``, one per sitting), so that
    the chance of a first miss at this look is ``spend``; :data:`Z_MOST` when ``spend`` is too
    small to buy a narrower interval."""
    before = crossing_probability(previous) if previous else 0.0
    if spend <= 0 or crossing_probability((*previous, Z_MOST)) - before >= spend:
        return Z_MOST
    lo, hi = 0.0, Z_MOST                               # the miss chance falls as z grows
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if crossing_probability((*previous, mid)) - before > spend else (lo, mid)
    return float(hi)


def level_of(z: float) -> float:
    """An interval's coverage at normal quantile ``z``: 2 Phi(z) - 1."""
    return 2.0 * NormalDist().cdf(z) - 1.0


#: How a run of several tasks shares its time budget (:func:`task_budget`), as run records say it.
BUDGET_SHARING = "the run's budget (per task x tasks) shared: each task gets what is left over the tasks left"


def task_budget(budget_s: float | None, ntasks: int, done: int, spent_s: float) -> float | None:
    """The time budget (s) of the next task of a run of ``ntasks`` tasks whose ``done`` tasks so
    far measured for ``spent_s`` seconds: the run's budget (``budget_s`` per task x ``ntasks``)
    less what was spent, over the tasks left, so that the time a quickly decided task leaves
    goes to the tasks after it (and a task that overran takes it from them); never below a tenth
    of ``budget_s`` (a task is measured for at least one sitting whatever its budget). It is
    fixed before the task is measured, so the task's stopping never depends on its own data.
    None without a budget."""
    if budget_s is None:
        return None
    left = float(budget_s) * ntasks - float(spent_s)
    return max(0.1 * float(budget_s), left / max(1, ntasks - done))


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
                   started: float | None = None, spending: str = C.SEQUENTIAL_SPENDING,
                   min_sittings: int = C.SEQUENTIAL_MIN_SITTINGS
                   ) -> tuple[dict[str, Evaluation], list[Mapping[str, list]]]:
    """Measure in sittings until every plan is decided, the budget is spent or ``looks`` sittings
    are done (module docstring).

    ``sitting(s, names)``: measures sitting ``s`` of ``names`` (the reference first) in paired
    rounds and returns name -> per-round measurements; ``evaluation(name, sittings)``: the
    Evaluation of plan ``name`` from its measurements of those sittings; ``plans``: the distinct
    plans (the reference among them); ``budget_s``: seconds in all, counted from ``started`` (a
    ``clock`` reading: when the evaluation began, so a selection sitting counts too; default: this
    call), and a sitting is not started when the last one's length would overrun it (the look
    before it is then the last); ``spending``: the spending function (:func:`spent`);
    ``min_sittings``: looks before this many sittings spend nothing unless last. Returns
    every plan's Evaluation compared with the reference (``stopped`` says why, ``confidence`` the
    level of the look it stopped at) and the sittings measured."""
    budget = check_budget(budget_s)
    most = check_looks(looks)
    check_spending(spending)
    start = clock() if started is None else started
    open_ = [p for p in plans if p != reference]
    stopped: dict[str, str] = {}
    done: list[Mapping[str, list]] = []
    compared: dict[str, Evaluation] = {}
    zs: list[float] = []                  # each look's z
    used, level = 0.0, CONFIDENCE         # the error probability spent so far; the last look's level
    for s in range(most):
        began = clock()
        done.append(sitting(s, [reference, *open_]))
        now = clock()
        last = s + 1 == most or now - start + (now - began) > budget      # declared before any verdict is read
        share = 1.0 if last else min(1.0, (now - start) / budget)
        spend = spent(share, spending) - used if last or s + 1 >= min_sittings else 0.0
        used += spend
        zs.append(next_boundary(tuple(zs), spend))
        if spend <= 0.0 and not last:     # a look that spends nothing decides nothing (module docstring)
            continue
        level = level_of(zs[-1])
        ref_now = evaluation(reference, done)
        for p in list(open_):
            compared[p] = compare_at_look(evaluation(p, done), ref_now, p, reference, seed, margin, sitting_sd,
                                          chosen, level)
            if compared[p].verdict in DECISIVE:
                open_.remove(p)
                stopped[p] = f"decided after {s + 1} of at most {most} sittings"
        if not open_:
            break
        if last:
            if s + 1 < most:
                for p in open_:
                    stopped[p] = f"budget spent after {s + 1} sittings ({budget:g} s)"
            break
    for p in open_:
        stopped.setdefault(p, f"not decided in {most} sittings: too close to the margin for this noise")
    ref_all = evaluation(reference, done)
    out = {reference: compare_at_look(ref_all, ref_all, reference, reference, seed, margin, sitting_sd, chosen, level)}
    out.update({p: compared[p].with_comparison(replace(compared[p].comparison, stopped=stopped[p]))
                for p in plans if p != reference})
    return out, done
