"""Statistics of paired measurement rounds: medians, bootstrap confidence intervals, verdicts.

On a shared machine one timing drifts by tens of percent between rounds while the ratio of two
ops timed back to back stays steady, so plans are compared by the **paired per-round ratio**
plan / reference: its median is the point estimate and a percentile bootstrap gives the 95%
interval of that median. With fewer than :data:`MIN_ROUNDS` rounds no interval (and no verdict)
is given: a percentile bootstrap of a median of 1-2 values says nothing. With 5 rounds or fewer
the 95% interval's ends are the extreme rounds themselves, so one disturbed round decides the
verdict; from about 8 rounds on the ends are inner rounds. ``shardlab compare`` defaults to 8.

**Sittings.** A sitting is one run of paired rounds, at one time, on one machine; a machine
drifts between sittings, so rounds of different sittings are not exchangeable.
:func:`hierarchical_median_ci` takes rounds grouped by sitting and resamples sittings with
replacement, then rounds within each resampled sitting (``n_boot`` times, seeded); with one
sitting that is the ordinary bootstrap over rounds (:func:`bootstrap_median_ci`), and every
interval shardlab reports goes through it. Pooling rounds of several sittings as if they were
one sitting understates the interval when sittings differ (``studies/statistics``). A few
sittings cannot show how far sittings differ, so a paired ratio's interval
(:func:`paired_ratio_ci`) is at least as wide as the within-sitting interval widened by the
profile's known between-sitting spread tau (``sitting_log_sd`` of its profile folder): in log
space each half-width is at least sqrt(w^2 + (z tau)^2 / S), w the half-width with the sittings
held fixed, z = 1.96, S the sittings measured.

**Verdicts** (:func:`verdict`) follow the interval of the ratio alone, with a stated
**equivalence margin** m (:data:`~shardlab.constants.EQUIVALENCE_MARGIN`, 5% by default):
``faster`` when the interval lies wholly below 1, ``slower`` wholly above 1, ``equivalent``
when it contains 1 and lies inside [1/(1+m), 1+m], ``inconclusive`` otherwise.

**Subadditivity** of measured fused costs, the premise of the lower bound
(:mod:`shardlab.schedule`): :func:`subadditivity` checks it on any store or dataset of compute
and single-table samples.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from shardlab.constants import EQUIVALENCE_MARGIN
from shardlab.errors import ShardlabError, field_error
from shardlab.measure.records import singles_of

#: Bootstrap resamples per interval.
N_BOOT = 4000

#: Fewest rounds for which an interval and a verdict are reported.
MIN_ROUNDS = 3

#: Coverage of the reported intervals (the ``*_ci95`` fields).
CONFIDENCE = 0.95

#: Verdicts of a plan against a reference, from the interval of their paired ratio (:func:`verdict`).
VERDICTS = ("faster", "slower", "equivalent", "inconclusive")

#: Verdict words of earlier versions, as files written then may hold them: "within noise" was
#: an interval containing 1, now ``equivalent`` or ``inconclusive`` depending on the margin.
OLD_VERDICTS = ("within noise",)


def _sitting_arrays(sittings: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """``sittings`` as finite 1-D float arrays, each with at least one round (one-line error else)."""
    if isinstance(sittings, np.ndarray) and sittings.ndim == 1:
        raise ShardlabError("bootstrap: field 'sittings' must be a sequence of sittings (each a sequence of rounds), "
                            "got one flat array")
    out = []
    for k, s in enumerate(sittings):
        x = np.asarray(s, dtype=float)
        if x.ndim != 1 or not np.all(np.isfinite(x)):
            what = "values" if len(sittings) == 1 else f"sittings[{k}]"
            raise ShardlabError(f"bootstrap: field '{what}' must be a finite 1-D sequence, got shape {x.shape}")
        if len(x) == 0:
            raise ShardlabError(f"bootstrap: field 'sittings[{k}]' has no rounds")
        out.append(x)
    if not out:
        raise ShardlabError("bootstrap: field 'sittings' is empty")
    return out


def hierarchical_median_ci(sittings: Sequence[Sequence[float]], seed: int = 0, n_boot: int = N_BOOT,
                           confidence: float = CONFIDENCE, resample_sittings: bool = True
                           ) -> tuple[float, tuple[float, float] | None]:
    """The median of all rounds pooled and its percentile-bootstrap ``confidence`` interval
    (low, high) from a **hierarchical bootstrap** over sittings.

    ``sittings``: one sequence of per-round values per sitting (any unit: paired ratios plan /
    reference, dimensionless, or costs in ms); sittings may hold different numbers of rounds.
    Each of ``n_boot`` resamples draws as many sittings as there are, with replacement, then
    within every drawn sitting as many rounds as it holds, with replacement, and takes the
    median of all rounds drawn; the interval is the resampled medians' ``(1 - confidence) / 2``
    and ``(1 + confidence) / 2`` quantiles. Seeded: sittings are drawn by
    ``numpy.random.default_rng([seed, 0xB007, 0x5177])``, rounds by
    ``numpy.random.default_rng([seed, 0xB007])``, so one sitting gives exactly the bootstrap
    over rounds of earlier versions. ``resample_sittings=False`` keeps every sitting once and
    resamples only rounds within each (the within-sitting interval). The interval is None with
    fewer than :data:`MIN_ROUNDS` rounds in all."""
    xs = _sitting_arrays(sittings)
    pooled = np.concatenate(xs)
    centre = float(np.median(pooled))
    if len(pooled) < MIN_ROUNDS:
        return centre, None
    rng = np.random.default_rng([seed, 0xB007])
    tail = (1.0 - confidence) / 2.0
    sizes = np.array([len(x) for x in xs])
    s = len(xs)
    if s == 1 or not resample_sittings:
        picked = np.tile(np.arange(s), (n_boot, 1))
    else:
        picked = np.random.default_rng([seed, 0xB007, 0x5177]).integers(0, s, size=(n_boot, s))
    if np.all(sizes == sizes[0]):                          # every sitting the same length: one gather
        n = int(sizes[0])
        rounds = rng.integers(0, n, size=(n_boot, s, n))
        medians = np.median(np.stack(xs)[picked[:, :, None], rounds].reshape(n_boot, s * n), axis=1)
    else:                                                  # ragged: pad with nan, draw within each size
        width = int(sizes.max())
        padded = np.full((s, width), np.nan)
        for k, x in enumerate(xs):
            padded[k, :len(x)] = x
        size = sizes[picked][:, :, None]                   # (n_boot, s, 1) rounds of each drawn sitting
        rounds = np.minimum((rng.random((n_boot, s, width)) * size).astype(int), size - 1)
        drawn = padded[picked[:, :, None], rounds]
        drawn[np.arange(width)[None, None, :] >= size] = np.nan
        medians = np.nanmedian(drawn.reshape(n_boot, s * width), axis=1)
    lo, hi = np.quantile(medians, [tail, 1.0 - tail])
    return centre, (float(lo), float(hi))


def bootstrap_median_ci(values: Sequence[float], seed: int = 0, n_boot: int = N_BOOT,
                        confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Percentile-bootstrap ``confidence`` interval (low, high) of the median of ``values``
    (any unit), the rounds of one sitting: :func:`hierarchical_median_ci` of that one sitting
    (rounds resampled with replacement, seeded). None with fewer than :data:`MIN_ROUNDS` values."""
    return hierarchical_median_ci([values], seed=seed, n_boot=n_boot, confidence=confidence)[1]


def paired_ratios(rounds_ms: Sequence[float], reference_rounds_ms: Sequence[float]) -> np.ndarray:
    """Per-round ratios plan / reference (the two sequences paired by round), shape (R,)."""
    a, b = np.asarray(rounds_ms, dtype=float), np.asarray(reference_rounds_ms, dtype=float)
    if a.shape != b.shape:
        raise ShardlabError(f"paired ratios: field 'rounds_ms' has {a.shape} rounds, the reference {b.shape}")
    if np.any(b <= 0):
        raise ShardlabError("paired ratios: field 'reference_rounds_ms' must be > 0 in every round")
    return a / b


def with_sitting_spread(centre: float, ci: tuple[float, float], within: tuple[float, float], sitting_sd: float,
                        sittings: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """``ci`` widened, if need be, so that in log space each side's half-width is at least
    sqrt(w^2 + (z sitting_sd)^2 / sittings): w that side's half-width of the ``within``-sitting
    interval, z the normal quantile of ``confidence`` (1.96 at 95%). Ratios, dimensionless."""
    extra = (NormalDist().inv_cdf((1.0 + confidence) / 2.0) * sitting_sd) ** 2 / sittings
    low = max(0.0, np.log(centre / within[0]))
    high = max(0.0, np.log(within[1] / centre))
    return (min(ci[0], float(centre * np.exp(-np.sqrt(low ** 2 + extra)))),
            max(ci[1], float(centre * np.exp(np.sqrt(high ** 2 + extra)))))


def at_level(centre: float, ci: tuple[float, float], confidence: float) -> tuple[float, float]:
    """The :data:`CONFIDENCE` (95%) interval ``ci`` of a ratio around ``centre`` carried to
    ``confidence``: each side's log half-width times z(confidence) / z(0.95), z the two-sided
    normal quantile (a repeated confidence interval's z at a sequential look is 2.5-8). A percentile
    bootstrap cannot be read that far out: with :data:`N_BOOT` resamples its 1 - 1e-5 quantile is
    the most extreme resample, which does not widen as z grows, so high levels come from the
    bootstrap's 95% ends and the normal scale the looks' boundaries assume. Ratios, dimensionless."""
    q = NormalDist().inv_cdf((1.0 + confidence) / 2.0) / NormalDist().inv_cdf((1.0 + CONFIDENCE) / 2.0)
    low, high = max(0.0, np.log(centre / ci[0])), max(0.0, np.log(ci[1] / centre))
    return float(centre * np.exp(-q * low)), float(centre * np.exp(q * high))


def paired_ratio_ci(plan_sittings: Sequence[Sequence[float]], reference_sittings: Sequence[Sequence[float]],
                    seed: int = 0, n_boot: int = N_BOOT, sitting_sd: float = 0.0, confidence: float = CONFIDENCE
                    ) -> tuple[float, tuple[float, float] | None]:
    """The median paired ratio plan / reference (dimensionless) and its ``confidence`` (95%) interval from rounds
    grouped by sitting: per sitting the plan's and the reference's per-round costs (ms, paired
    by round, :func:`paired_ratios`), then :func:`hierarchical_median_ci`. ``sitting_sd``: the
    known between-sitting log-sd tau of the machine (``sitting_log_sd`` of its profile folder);
    when > 0 the interval is at least the within-sitting one widened by it
    (:func:`with_sitting_spread`; module docstring), except where every round's ratio is exactly
    1 (a plan against its own measurements, which cannot drift apart). One sitting and
    ``sitting_sd`` 0: the ordinary bootstrap over that sitting's rounds. The bootstrap is read at
    95%; another ``confidence`` scales that interval (:func:`at_level`)."""
    if len(plan_sittings) != len(reference_sittings):
        raise ShardlabError(f"paired ratios: {len(plan_sittings)} sittings of the plan, "
                            f"{len(reference_sittings)} of the reference")
    if not np.isfinite(sitting_sd) or sitting_sd < 0:
        raise field_error("paired ratios", "sitting_sd", sitting_sd, "must be a number >= 0")
    if not 0.0 < float(confidence) < 1.0:
        raise field_error("paired ratios", "confidence", confidence, "must be in (0, 1)")
    ratios = [paired_ratios(a, b) for a, b in zip(plan_sittings, reference_sittings)]
    centre, ci = hierarchical_median_ci(ratios, seed=seed, n_boot=n_boot)
    if ci is not None and sitting_sd > 0 and not all(np.all(r == 1.0) for r in ratios):  # same measurements: no drift
        _, within = hierarchical_median_ci(ratios, seed=seed, n_boot=n_boot, resample_sittings=False)
        ci = with_sitting_spread(centre, ci, within, sitting_sd, len(ratios))
    if ci is None or float(confidence) == CONFIDENCE:
        return centre, ci
    return centre, at_level(centre, ci, float(confidence))


def check_margin(margin: float, owner: str = "verdict") -> float:
    """``margin`` as a float (dimensionless, e.g. 0.05 = 5%); one-line error unless finite and >= 0."""
    try:
        m = float(margin)
    except (TypeError, ValueError):
        raise field_error(owner, "margin", margin, "must be a number >= 0 (0.05 = 5%)") from None
    if not np.isfinite(m) or m < 0:
        raise field_error(owner, "margin", margin, "must be a number >= 0 (0.05 = 5%)")
    return m


def equivalence_band(margin: float = EQUIVALENCE_MARGIN) -> tuple[float, float]:
    """The ratios (dimensionless) a plan equivalent to the reference may have: [1/(1+m), 1+m]."""
    m = check_margin(margin)
    return 1.0 / (1.0 + m), 1.0 + m


def verdict(ci: tuple[float, float] | None, margin: float = EQUIVALENCE_MARGIN) -> str | None:
    """The verdict of a ratio plan / reference from its interval ``ci`` (None without one):
    ``faster`` when the interval lies wholly below 1, ``slower`` wholly above 1 (a difference
    shown, however small), ``equivalent`` when it contains 1 and lies inside [1/(1+m), 1+m]
    (ends included; m = ``margin``, e.g. 0.05), ``inconclusive`` otherwise."""
    low, high = equivalence_band(margin)
    if ci is None:
        return None
    lo, hi = ci
    if hi < 1.0:
        return "faster"
    if lo > 1.0:
        return "slower"
    return "equivalent" if low <= lo and hi <= high else "inconclusive"


def read_verdict(said: str | None, ci: tuple[float, float] | None,
                 margin: float = EQUIVALENCE_MARGIN) -> str | None:
    """A verdict as a file holds it, in today's words: one of :data:`VERDICTS` as it is, an old
    one (:data:`OLD_VERDICTS`, an interval containing 1) as :func:`verdict` of its interval
    ``ci`` with ``margin`` (``equivalent`` or ``inconclusive``; ``inconclusive`` without an
    interval), None as None; a one-line error for any other word."""
    if said is None or said in VERDICTS:
        return said
    if said in OLD_VERDICTS:
        return verdict(None if ci is None else (float(ci[0]), float(ci[1])), margin) or "inconclusive"
    raise field_error("verdict", "verdict", said, f"must be one of {list(VERDICTS)}")


def relative_half_width(ci: tuple[float, float] | None, centre: float) -> float:
    """Half the interval's width relative to ``centre`` (e.g. 0.03 = +-3%); nan without one."""
    if ci is None or centre == 0:
        return float("nan")
    return (ci[1] - ci[0]) / 2.0 / abs(centre)


def fused_and_summed(samples: Iterable[Mapping[str, Any]], singles: Mapping[str, Mapping[str, Any]]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fused total ms, sum of single-table totals ms, number of tables) for every measured
    compute sample whose tables were all measured alone (``singles`` by
    :func:`~shardlab.measure.records.singles_of`); arrays of equal length."""
    fused, summed, n = [], [], []
    for s in samples:
        alone = singles_of(s, singles)
        if alone is not None:
            fused.append(s["total_ms"])
            summed.append(sum(x["total_ms"] for x in alone))
            n.append(len(alone))
    return np.asarray(fused), np.asarray(summed), np.asarray(n)


def subadditivity(samples: Sequence[Mapping[str, Any]], singles: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """How far measured fused costs are subadditive: ratio = fused / sum of the same tables
    measured alone, over samples of 2+ tables. A sample *violates* when its ratio exceeds
    1 + its relative noise (the fused total's (p75 - p25) / median plus the singles' median
    of the same). Returns counts, ratio quantiles, and the violation rate by tables per shard."""
    rows = []
    for s in samples:
        alone = singles_of(s, singles)
        if alone is None or len(alone) < 2:
            continue
        summed = sum(x["total_ms"] for x in alone)
        noise = (s["total_spread_ms"][1] - s["total_spread_ms"][0]) / s["total_ms"]
        noise += float(np.median([(x["total_spread_ms"][1] - x["total_spread_ms"][0]) / x["total_ms"] for x in alone]))
        rows.append((s["total_ms"] / summed, noise, len(alone), s["total_ms"]))
    if not rows:
        return {"compared": 0}
    r = np.array(rows)
    ratio, noise, n = r[:, 0], r[:, 1], r[:, 2].astype(int)
    viol = ratio > 1.0 + noise
    by_n = {}
    for lo, hi in ((2, 4), (5, 8), (9, 12), (13, 15)):
        m = (n >= lo) & (n <= hi)
        if m.any():
            by_n[f"{lo}-{hi}"] = {"samples": int(m.sum()), "median_ratio": float(np.median(ratio[m])),
                                  "above_1": float((ratio[m] > 1).mean()), "violations": float(viol[m].mean())}
    return {"compared": int(len(r)), "median_ratio": float(np.median(ratio)),
            "p05_ratio": float(np.quantile(ratio, 0.05)), "p95_ratio": float(np.quantile(ratio, 0.95)),
            "max_ratio": float(ratio.max()), "above_1": float((ratio > 1).mean()),
            "violations": float(viol.mean()), "by_tables": by_n}
