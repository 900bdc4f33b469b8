"""Statistics of paired measurement rounds: medians, bootstrap confidence intervals, verdicts.

On a shared machine one timing drifts by tens of percent between rounds while the ratio of two
ops timed back to back stays steady, so plans are compared by the **paired per-round ratio**
plan / reference: its median is the point estimate and a percentile bootstrap over rounds (the
rounds resampled with replacement, ``n_boot`` times, seeded) gives the 95% interval of that
median. The verdict follows the interval alone: ``faster`` when it lies wholly below 1,
``slower`` wholly above 1, else ``within noise``. With fewer than :data:`MIN_ROUNDS` rounds no
interval (and no verdict) is given: a percentile bootstrap of a median of 1-2 values says nothing.
With 5 rounds or fewer the 95% interval's ends are the extreme rounds themselves (the smallest
and largest per-round ratio), so one disturbed round decides the verdict; from about 8 rounds
on the ends are inner rounds. ``shardlab compare`` defaults to 8.

**Subadditivity** of measured fused costs, the premise of the lower bound
(:mod:`shardlab.schedule`): :func:`subadditivity` checks it on any store or dataset of compute
and single-table samples.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from shardlab.errors import ShardlabError
from shardlab.profile.records import singles_of

#: Bootstrap resamples per interval.
N_BOOT = 4000

#: Fewest rounds for which an interval and a verdict are reported.
MIN_ROUNDS = 3

#: Coverage of the reported intervals (the ``*_ci95`` fields).
CONFIDENCE = 0.95


def bootstrap_median_ci(values: Sequence[float], seed: int = 0, n_boot: int = N_BOOT,
                        confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Percentile-bootstrap ``confidence`` interval (low, high) of the median of ``values``
    (any unit; resampling rounds with replacement, ``numpy.random.default_rng(seed)``).
    None with fewer than :data:`MIN_ROUNDS` values."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or not np.all(np.isfinite(x)):
        raise ShardlabError(f"bootstrap: field 'values' must be a finite 1-D sequence, got shape {x.shape}")
    if len(x) < MIN_ROUNDS:
        return None
    rng = np.random.default_rng([seed, 0xB007])
    medians = np.median(x[rng.integers(0, len(x), size=(n_boot, len(x)))], axis=1)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(medians, [tail, 1.0 - tail])
    return float(lo), float(hi)


def paired_ratios(rounds_ms: Sequence[float], reference_rounds_ms: Sequence[float]) -> np.ndarray:
    """Per-round ratios plan / reference (the two sequences paired by round), shape (R,)."""
    a, b = np.asarray(rounds_ms, dtype=float), np.asarray(reference_rounds_ms, dtype=float)
    if a.shape != b.shape:
        raise ShardlabError(f"paired ratios: field 'rounds_ms' has {a.shape} rounds, the reference {b.shape}")
    if np.any(b <= 0):
        raise ShardlabError("paired ratios: field 'reference_rounds_ms' must be > 0 in every round")
    return a / b


def verdict(ci: tuple[float, float] | None) -> str | None:
    """``faster`` / ``slower`` / ``within noise`` from a ratio's interval (None without one)."""
    if ci is None:
        return None
    lo, hi = ci
    return "faster" if hi < 1.0 else "slower" if lo > 1.0 else "within noise"


def relative_half_width(ci: tuple[float, float] | None, centre: float) -> float:
    """Half the interval's width relative to ``centre`` (e.g. 0.03 = +-3%); nan without one."""
    if ci is None or centre == 0:
        return float("nan")
    return (ci[1] - ci[0]) / 2.0 / abs(centre)


def fused_and_summed(samples: Iterable[Mapping[str, Any]], singles: Mapping[str, Mapping[str, Any]]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fused total ms, sum of single-table totals ms, number of tables) for every measured
    compute sample whose tables were all measured alone (``singles`` by
    :func:`~shardlab.profile.records.singles_of`); arrays of equal length."""
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
