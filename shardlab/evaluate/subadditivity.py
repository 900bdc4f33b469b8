"""Subadditivity of measured fused costs: the premise of the lower bound
(:mod:`shardlab.schedule`), checked on any store or dataset of compute and single samples."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from shardlab.profile.campaign import singles_of


def fused_and_summed(samples: Iterable[Mapping[str, Any]], singles: Mapping[str, Mapping[str, Any]]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fused total ms, sum of single-table totals ms, number of tables) for every measured
    compute sample whose tables were all measured alone (``singles`` by
    :func:`~shardlab.profile.campaign.singles_of`); arrays of equal length."""
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
