"""Lookups for tables that carry only the Task JSON fields (name, rows, dim, pooling_factor,
reuse_bins): the zipf-nb-v1 generator (:mod:`shardlab.data.generator`) fitted to the table's
own reuse bins and pooling factor at its rows, so that every table can be measured.

The fit (:func:`fit_params`): ``pooling`` is the table's pooling factor and ``bag_k`` is
``FIT_BAG_K`` (near-Poisson bag lengths: the bins say nothing about them); alpha (tail
exponent), q (head offset) and hot (share of lookups on one default row) minimise the L1
distance between the expected unique-row histogram of one batch of ``batch_size`` samples
(:func:`shardlab.data.calibration.expected_unique_counts`, semi-analytic, no sampling),
normalised, and the table's reuse bins: a grid over (alpha, log10(1 + q), log10(hot + 1e-4)),
then Nelder-Mead from its best point. Fit at the batch the bins were measured at
(the task's ``batch_size``); the generator then generates at any batch.

The fit is then checked by generating one real batch (batch index 0, ``batch_size`` samples)
and measuring its bins; the table's ``distribution`` records the parameters with
``"fitted": true``, ``fit_batch_size``, ``fit_l1`` (L1 of the measured bins against the
table's, 0 .. 2), ``fit_expected_l1`` (the same for the expected histogram the search
minimised) and ``fit_pooling_rel_err`` (|measured - given| / given pooling factor), and its
``source`` says so. Everything else the user gave is kept exactly. Same table and batch
size -> same fit; fits are cached.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import replace
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.data.calibration import expected_unique_counts
from shardlab.data.features import reuse_histograms
from shardlab.data.generator import MODEL, generate_lookups
from shardlab.data.origin import lookup_origin
from shardlab.errors import ShardlabError
from shardlab.tables import Table, Task

__all__ = ["FIT_BAG_K", "fit_params", "fit_table_lookups", "with_lookups"]

#: Dispersion of fitted tables' bag lengths (negative binomial; large = near Poisson), as for
#: imported tables (:data:`shardlab.data.importers.IMPORT_BAG_K`).
FIT_BAG_K = 1000.0

_HOT_EPS = 1e-4
#: Search box of (alpha: tail exponent, u = log10(1 + q), w = log10(hot + 1e-4)).
_BOX = np.array([(0.0, 4.0), (0.0, 5.0), (-4.0, math.log10(0.9 + _HOT_EPS))])
#: Nelder-Mead's first simplex: the best grid point plus these steps along each coordinate.
_SCALE = np.array([0.125, 0.5, 0.5])
#: The starting grid: alpha x u x w (11 x 7 x 3 candidates).
_GRID = np.array([(a, u, w) for a in np.arange(0.0, 2.51, 0.25)
                  for u in (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0) for w in (-4.0, -2.5, -1.0)])
_CHUNK = 96


def _sig(x: float, digits: int = 6) -> float:
    """``x`` rounded to ``digits`` significant digits (exact JSON round trips)."""
    return float(f"{float(x):.{digits}g}")


def _hot(w: np.ndarray) -> np.ndarray:
    """hot from its search coordinate w = log10(hot + 1e-4) (w = -4: no hot row)."""
    return np.maximum(10.0 ** w - _HOT_EPS, 0.0)


def _losses(rows: int, lookups: float, target: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """L1 of the normalised expected unique-row histogram of each candidate (rows of ``cand``:
    alpha, u = log10(1 + q), w = log10(hot + 1e-4)) against ``target`` [17]; shape [len(cand)]."""
    if len(cand) > _CHUNK:  # small batches stay in cache: ~3x faster per candidate
        return np.concatenate([_losses(rows, lookups, target, cand[i:i + _CHUNK])
                               for i in range(0, len(cand), _CHUNK)])
    k = len(cand)
    uniq = expected_unique_counts(np.full(k, rows), cand[:, 0], np.expm1(cand[:, 1] * math.log(10)),
                                  _hot(cand[:, 2]), np.full(k, lookups))
    total = uniq.sum(axis=1, keepdims=True)
    hist = uniq / np.where(total > 0, total, 1.0)
    return np.abs(hist - target).sum(axis=1)


def _nelder_mead(f: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, scale: np.ndarray,
                 iterations: int) -> tuple[np.ndarray, float]:
    """Minimise ``f`` (candidates [k, 3] -> losses [k]) inside ``_BOX`` by Nelder-Mead from
    ``x0`` (initial simplex: ``x0`` plus ``scale`` along each axis). Each round evaluates the
    reflected, expanded and contracted points together (one call). Returns (x, loss)."""
    lo, hi = _BOX[:, 0], _BOX[:, 1]
    pts = np.clip(np.vstack([x0, x0 + np.diag(scale)]), lo, hi)
    vals = f(pts)
    for _ in range(iterations):
        order = np.argsort(vals, kind="stable")
        pts, vals = pts[order], vals[order]
        if vals[-1] - vals[0] < 1e-5:
            break
        c = pts[:-1].mean(axis=0)
        trial = np.clip(c + np.outer((1.0, 2.0, -0.5), c - pts[-1]), lo, hi)
        fr, fe, fc = f(trial)
        if fr < vals[0] and fe < fr:
            pts[-1], vals[-1] = trial[1], fe
        elif fr < vals[-2]:
            pts[-1], vals[-1] = trial[0], fr
        elif fc < vals[-1]:
            pts[-1], vals[-1] = trial[2], fc
        else:  # shrink towards the best point
            pts[1:] = pts[0] + 0.5 * (pts[1:] - pts[0])
            vals[1:] = f(pts[1:])
    i = int(np.argmin(vals))
    return pts[i], float(vals[i])


def fit_params(rows: int, pooling_factor: float, reuse_bins: Sequence[float], batch_size: int,
               iterations: int = 80) -> dict[str, float]:
    """Generator parameters fitted to one table (module docstring).

    ``rows``: hash size; ``pooling_factor``: mean lookups per sample; ``reuse_bins``: the 17
    unique-row fractions measured on one batch of ``batch_size`` samples. A grid over (alpha,
    u = log10(1 + q), w = log10(hot + 1e-4)) (``_GRID``), then Nelder-Mead (at most
    ``iterations`` rounds) from its best point. Returns ``alpha``, ``q``, ``hot``, ``pooling``,
    ``bag_k`` and ``expected_l1`` (the L1 of the expected histogram; the sampled one is
    measured by :func:`fit_table_lookups`). Deterministic.
    """
    target = np.asarray(reuse_bins, dtype=np.float64)
    base = {"pooling": float(pooling_factor), "bag_k": FIT_BAG_K}
    lookups = float(pooling_factor) * batch_size
    if lookups <= 0 or target.sum() <= 0:  # empty bags: the popularity law never matters
        return {"alpha": 1.0, "q": 0.0, "hot": 0.0, **base,
                "expected_l1": float(target.sum()) if lookups <= 0 else 1.0}

    def f(cand: np.ndarray) -> np.ndarray:
        return _losses(rows, lookups, target, cand)

    x, loss = _nelder_mead(f, _GRID[int(np.argmin(f(_GRID)))], _SCALE, iterations)
    return {"alpha": float(x[0]), "q": float(np.expm1(x[1] * math.log(10))),
            "hot": float(_hot(x[2])), **base, "expected_l1": loss}


def _fit_source(source: str | None, l1: float, batch_size: int) -> str:
    note = (f"lookups from {MODEL} fitted to its reuse_bins (L1 {l1:.3f} at batch {batch_size}) "
            "and pooling_factor")
    return f"{source}; {note}" if source else note


@lru_cache(maxsize=8192)
def _fit(name: str, rows: int, pooling_factor: float, reuse_bins: tuple[float, ...],
         batch_size: int, index_seed: int) -> tuple[tuple[str, Any], ...]:
    """The fitted, verified ``distribution`` of one table (cached; see fit_table_lookups)."""
    p = fit_params(rows, pooling_factor, reuse_bins, batch_size)
    dist: dict[str, Any] = {"model": MODEL, "alpha": _sig(p["alpha"]), "q": _sig(p["q"]),
                            "hot": _sig(p["hot"]), "pooling": _sig(p["pooling"]),
                            "bag_k": _sig(p["bag_k"])}
    probe = Table(name, rows, C.DIM_MULTIPLE, pooling_factor, reuse_bins, None, index_seed, dist)
    idx, off = generate_lookups(probe, batch_size, 0)
    hist = reuse_histograms(idx)[0]
    l1 = float(np.abs(hist - np.asarray(reuse_bins)).sum())
    measured = float(idx.size) / batch_size
    rel = abs(measured - pooling_factor) / pooling_factor if pooling_factor > 0 else 0.0
    dist |= {"fitted": True, "fit_batch_size": int(batch_size), "fit_l1": _sig(l1, 4),
             "fit_expected_l1": _sig(p["expected_l1"], 4), "fit_pooling_rel_err": _sig(rel, 4)}
    return tuple(sorted(dist.items()))


def fit_table_lookups(table: Table, batch_size: int = C.DEFAULT_BATCH_SIZE) -> Table:
    """``table`` made measurable: a table that already has lookups (a generator, a trace or a
    row block's parent: :func:`~shardlab.data.origin.lookup_origin` not ``"none"``) is returned
    unchanged; otherwise a copy with the
    same name, rows, dim, pooling_factor and reuse_bins, an ``index_seed`` (its own if set,
    else crc32 of the name), the fitted ``distribution`` and a ``source`` that says so (module
    docstring). ``batch_size``: samples per batch the table's reuse bins were measured at
    (the task's batch size). Cached: the same table and batch size fit once per process."""
    if lookup_origin(table) != "none":
        return table
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or batch_size < 1:
        raise ShardlabError(f"table '{table.name}': field 'batch_size' = {batch_size!r} must be an "
                            "integer >= 1 (the batch its reuse_bins were measured at)")
    if table.rows >= 2**31:
        raise ShardlabError(f"table '{table.name}': field 'rows' = {table.rows} too large to "
                            "generate lookups for")
    seed = table.index_seed if table.index_seed is not None else zlib.crc32(table.name.encode())
    dist = _fit(table.name, table.rows, table.pooling_factor, table.reuse_bins, int(batch_size),
                seed)
    l1 = float(dict(dist)["fit_l1"])
    return Table(table.name, table.rows, table.dim, table.pooling_factor, table.reuse_bins,
                 _fit_source(table.source, l1, batch_size), seed, dist, table.pooled, table.hbm_share)


def with_lookups(task: Task, batch_size: int | None = None) -> Task:
    """``task`` with every table made measurable (:func:`fit_table_lookups`), fitted at
    ``batch_size`` (default: the task's own batch size, the batch its bins refer to)."""
    bs = task.batch_size if batch_size is None else batch_size
    return replace(task, tables=tuple(fit_table_lookups(t, bs) for t in task.tables))
