"""Held-out splits and error metrics for cost models.

Splits are by sample key (a stable hash), so the same sample lands in the same split on every
machine and run, and adding samples never moves old ones between splits.
"""

from __future__ import annotations

import hashlib
from typing import Sequence, TypeVar

import numpy as np

from shardlab.profile.records import sample_key

S = TypeVar("S")


def split_of(key: str, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> str:
    """``"train"``, ``"val"`` or ``"test"`` for a sample key (stable; default 80/10/10)."""
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    if h < fractions[0]:
        return "train"
    return "val" if h < fractions[0] + fractions[1] else "test"


def split_samples(samples: Sequence[S]) -> dict[str, list[S]]:
    """Samples (records or JSON rows) grouped by :func:`split_of` their key, in their order."""
    out: dict[str, list[S]] = {"train": [], "val": [], "test": []}
    for s in samples:
        out[split_of(sample_key(s))].append(s)  # type: ignore[arg-type]
    return out


def errors(pred: Sequence[float], true: Sequence[float]) -> dict[str, float]:
    """Error summary of predictions vs measurements (ms): ``mape`` (mean |rel. error|, a
    fraction), ``median_ape``, ``p90_ape``, ``mse`` (ms^2), ``rmse_ms``, and the rank
    correlations ``spearman`` and ``kendall``."""
    p = np.asarray(pred, dtype=float).ravel()
    t = np.asarray(true, dtype=float).ravel()
    if p.shape != t.shape or p.size == 0:
        raise ValueError(f"errors: pred and true need the same non-zero length, got {p.size} and {t.size}")
    ape = np.abs(p - t) / np.maximum(np.abs(t), 1e-9)
    return {"n": int(t.size), "mape": float(ape.mean()), "median_ape": float(np.median(ape)),
            "p90_ape": float(np.quantile(ape, 0.9)), "mse": float(np.mean((p - t) ** 2)),
            "rmse_ms": float(np.sqrt(np.mean((p - t) ** 2))), "spearman": spearman(p, t), "kendall": kendall(p, t)}


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two 1-D arrays (ties broken by order; nan if constant)."""
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-a of two 1-D arrays (pairs tied in either count as neither); O(n^2) memory
    in blocks, fine for the few thousand held-out samples here."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    n = len(a)
    if n < 2:
        return float("nan")
    total = 0.0
    for i in range(0, n, 512):
        da = np.sign(a[i:i + 512, None] - a[None, :])
        db = np.sign(b[i:i + 512, None] - b[None, :])
        total += float((da * db).sum())
    return total / (n * (n - 1))
