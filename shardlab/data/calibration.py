"""Calibration of generator presets to the published aggregate statistics.

The expected 17-bin histograms of a table follow semi-analytically from the generator's model
(:mod:`shardlab.data.generator`): ranks are grouped into buckets, each row's access count is
Poisson with the bucket's rate, and Poisson bin probabilities come from a precomputed grid.
:func:`calibrate` minimises L1(accesses) + 0.5 L1(unique rows) + |log(unique fraction / target)|
of that expectation with Adam on a differentiable torch twin, over the free hyperparameters
(``FREE``, within ``BOUNDS``). No sampling happens here; pools built from a fitted preset are
verified by real sampling (``studies/tools/build_pool.py``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

from shardlab.constants import N_REUSE_BINS
from shardlab.data import generator as G

# ----------------------------------------------------------------------------- expected model
def _rank_cdf(alpha: Any, q: Any, rows: Any, x: Any) -> Any:
    """P(rank < x - 1) of the sampler: x may be an array; alpha, q, rows broadcast with it."""
    g0 = G._log_g(alpha, np.log1p(q))
    return (G._log_g(alpha, np.log(x + q)) - g0) / (G._log_g(alpha, np.log(rows + 1.0 + q)) - g0)


#: Lower edges of the 17 reuse bins: bin b holds counts in (E[b], E[b+1]], the last (32768, inf).
_EDGES = np.array([0] + [2**i for i in range(N_REUSE_BINS - 1)], dtype=np.float64)


@lru_cache(maxsize=1)
def _poisson_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log lambda grid [G], P(X in bin)/lambda [G, 17], E[X; X in bin]/lambda [G, 17]) for
    X ~ Poisson(lambda), from the regularised incomplete gamma function (torch)."""
    import torch

    log_lam = np.linspace(math.log(1e-7), math.log(1e10), 1701)
    lam = torch.tensor(np.exp(log_lam), dtype=torch.float64)[None, :]
    e = torch.tensor(_EDGES, dtype=torch.float64)[:, None]
    ones = np.ones((1, lam.shape[1]))
    cdf_x = torch.special.gammaincc(e + 1.0, lam).numpy()                    # P(X <= e)
    cdf_y = np.vstack([np.zeros_like(ones), torch.special.gammaincc(e[1:], lam).numpy()])
    uniq = np.diff(np.vstack([cdf_x, ones]), axis=0)                        # P(e_b < X <= e_b+1)
    acc = np.diff(np.vstack([cdf_y, ones]), axis=0)                         # P(e_b <= Y < e_b+1)
    return log_lam, (uniq / lam.numpy()).T.copy(), acc.T.copy()


def _bucket_rates(rows: Sequence[int], alpha: Sequence[float], q: Sequence[float],
                  hot: Sequence[float], lookups: Sequence[float]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rank buckets of T tables (48 single ranks, then 200 geometric buckets up to ``rows``):
    returns (rows per bucket m, Poisson rate per row lam, lookup mass per bucket, lookups n),
    each [T, 249] except n [T, 1]. Arguments as :func:`expected_table_counts`."""
    rows = np.asarray(rows, dtype=np.float64)[:, None]
    a = np.asarray(alpha, dtype=np.float64)[:, None]
    q = np.asarray(q, dtype=np.float64)[:, None]
    n = np.asarray(lookups, dtype=np.float64)[:, None]
    lin = np.minimum(np.arange(48.0)[None, :], rows)
    geo = np.exp(np.linspace(math.log(48.0), np.log(np.maximum(rows, 48.0))[:, 0], 200).T)
    edges = np.maximum.accumulate(np.concatenate([lin, np.minimum(np.round(geo), rows), rows],
                                                 axis=1), axis=1)
    m = np.diff(edges, axis=1)
    cdf = _rank_cdf(a, q, rows, edges + 1.0)
    hot = np.asarray(hot, dtype=np.float64)[:, None]
    mass = np.maximum(np.diff(cdf, axis=1), 0.0) * (1.0 - hot)
    mass[:, :1] += hot
    lam = np.maximum(n * mass / np.maximum(m, 1.0), 1e-300)
    return m, lam, mass, n


def _grid_position(lam: np.ndarray, n_grid: int, log_lam0: float, step: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(lower grid index, interpolation weight) of each rate on the log-lambda grid."""
    t = np.clip((np.log(lam) - log_lam0) / step, 0, n_grid - 1.001)
    i = t.astype(np.int64)
    return i, t - i


def expected_table_counts(rows: Sequence[int], alpha: Sequence[float], q: Sequence[float],
                          hot: Sequence[float], lookups: Sequence[float]
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Expected per-bin counts of T tables under the model, for one batch (semi-analytic).

    ``rows``, ``alpha``, ``q``, ``hot``, ``lookups`` (in the batch = pooling x batch size): [T].
    Returns (unique rows per bin, lookups per bin), float arrays of shape [T, 17].
    """
    m, lam, mass, n = _bucket_rates(rows, alpha, q, hot, lookups)
    log_lam, u_grid, a_grid = _poisson_grid()
    i, w = _grid_position(lam, len(log_lam), log_lam[0], log_lam[1] - log_lam[0])
    w = w[..., None]
    u_r = u_grid[i] * (1 - w) + u_grid[i + 1] * w
    a_r = a_grid[i] * (1 - w) + a_grid[i + 1] * w
    uniq = np.einsum("tk,tkb->tb", m * lam * (m > 0), u_r)
    acc = np.einsum("tk,tkb->tb", n * mass, a_r)
    return uniq, acc


def expected_unique_counts(rows: Sequence[int], alpha: Sequence[float], q: Sequence[float],
                           hot: Sequence[float], lookups: Sequence[float]) -> np.ndarray:
    """The first half of :func:`expected_table_counts` (expected unique rows per bin, [T, 17])
    computed faster for many candidate tables: each bucket's weight is spread onto its two
    grid points, then one product with the grid per table (the same linear interpolation)."""
    m, lam, _, _ = _bucket_rates(rows, alpha, q, hot, lookups)
    log_lam, u_grid, _ = _poisson_grid()
    i, w = _grid_position(lam, len(log_lam), log_lam[0], log_lam[1] - log_lam[0])
    used = np.zeros(len(log_lam) + 1, dtype=bool)  # only the grid points in use: small arrays
    used[i.ravel()] = True
    used[i.ravel() + 1] = True
    cols = np.flatnonzero(used)
    j = (np.cumsum(used) - 1)[i] + (np.arange(len(m)) * len(cols))[:, None]
    c = m * lam * (m > 0)
    size = len(m) * len(cols)
    spread = np.bincount(j.ravel(), (c * (1 - w)).ravel(), minlength=size)
    spread += np.bincount((j + 1).ravel(), (c * w).ravel(), minlength=size)
    return spread.reshape(len(m), len(cols)) @ u_grid[cols]


def expected_aggregate(preset: str | G.GeneratorPreset, n_tables: int = 4096, seed: int = 0
                       ) -> dict[str, Any]:
    """Expected dataset-level numbers (as G.aggregate_histograms) of ``n_tables`` tables
    drawn from ``preset`` with ``seed``, from :func:`expected_table_counts` (no sampling)."""
    p = G.get_preset(preset)
    prm = G.draw_params(p, n_tables, seed)
    n = np.array([x["pooling"] for x in prm]) * p.batch_size
    uniq, acc = expected_table_counts([x["rows"] for x in prm], [x["alpha"] for x in prm],
                                      [x["q"] for x in prm], [x["hot"] for x in prm], n)
    u, a = uniq.sum(0), acc.sum(0)
    return {"unique_hist": (u / u.sum()).tolist(), "access_hist": (a / a.sum()).tolist(),
            "unique_fraction": float(u.sum() / n.sum()),
            "avg_pooling": float(n.mean() / p.batch_size),
            "n_lookups": float(n.sum()), "n_unique": float(u.sum()), "n_tables": n_tables}


# ----------------------------------------------------------------------------- calibration
#: Hyperparameters the calibration moves (rows_log10_sd and the bounds stay fixed for realism).
#: pooling_log_sd >= 0.8 keeps the pooling factors heavy-tailed (max ~10x the median).
BOUNDS = {"rows_log10_mean": (3.0, 6.5), "pooling_log_sd": (0.8, 2.5), "light_frac": (0.0, 0.7),
          "rows_pool_slope": (-1.0, 1.0), "alpha_mean": (0.0, 2.0), "alpha_sd": (0.05, 1.2),
          "alpha_pool_slope": (-1.0, 1.0), "alpha_rows_slope": (-1.0, 1.0),
          "q_log10_mean": (-1.0, 3.5), "q_log10_sd": (0.05, 2.5), "hot_table_frac": (0.0, 1.0),
          "hot_log10_mean": (-4.0, -0.3), "hot_log10_sd": (0.05, 1.5),
          "hot_pool_slope": (-1.5, 1.5),
          "flat_frac": (0.0, 0.9), "flat_alpha_mean": (0.0, 1.0), "flat_alpha_sd": (0.02, 0.6),
          "flat_reuse_log10_mean": (-0.5, 3.0), "flat_reuse_log10_sd": (0.05, 1.0),
          "flat_reuse_pool_slope": (-1.5, 1.5), "flat2_frac": (0.0, 0.5),
          "flat2_reuse_log10_mean": (1.5, 5.0), "flat2_reuse_log10_sd": (0.05, 1.0)}
FREE = tuple(BOUNDS)


def _rank_cdf_t(alpha: Any, q: Any, rows: Any, x: Any) -> Any:
    """Torch version of generator._rank_cdf (differentiable in alpha, q and rows)."""
    import torch

    def g(log_x):
        s = 1.0 - alpha
        small = s.abs() < 1e-6
        s_safe = torch.where(small, torch.ones_like(s), s)
        return torch.where(small, log_x, torch.expm1(s_safe * log_x) / s_safe)

    g0 = g(torch.log1p(q))
    return (g(torch.log(x + q)) - g0) / (g(torch.log(rows + 1.0 + q)) - g0)


def _torch_loss(h: dict[str, Any], p: G.GeneratorPreset, d: dict[str, Any]) -> Any:
    """Differentiable twin of G.draw_params + G.expected_aggregate + the loss, for
    hyperparameters ``h`` (torch scalars) and base draws ``d`` (torch tensors). The stratified
    thresholds (light / hot / flat tables) become mixture weights (2 x 2 x 3 evaluations of
    every draw), so the loss is smooth in light_frac, hot_table_frac and flat*_frac too."""
    import torch

    z_rows, z_pool = d["z_rows"], d["z_pool"]
    skew_rows = h["rows_log10_mean"] + p.rows_log10_sd * z_rows + h["rows_pool_slope"] * z_pool
    skew_alpha = torch.clamp(h["alpha_mean"] + h["alpha_sd"] * d["z_alpha"] + h["alpha_pool_slope"]
                             * z_pool + h["alpha_rows_slope"] * z_rows, p.alpha_min, p.alpha_max)
    flat_alpha = torch.clamp(h["flat_alpha_mean"] + h["flat_alpha_sd"] * d["z_alpha"],
                             p.alpha_min, p.alpha_max)
    q = (10 ** (h["q_log10_mean"] + h["q_log10_sd"] * d["z_q"]))[:, None]
    hot = torch.clamp(10 ** (h["hot_log10_mean"] + h["hot_log10_sd"] * d["z_hot"]
                             + h["hot_pool_slope"] * z_pool), max=0.9)
    lo, hi = math.log10(p.light_min), math.log10(p.light_max)
    light = 10 ** (lo + (hi - lo) * d["u_light_level"])
    bulk = torch.exp(h["pooling_log_sd"] * z_pool)
    rest = (p.pooling_mean - h["light_frac"] * light.mean()) / (1 - h["light_frac"])
    c = rest / bulk.mean()
    cap = torch.tensor(p.pooling_max, dtype=torch.float64)
    for _ in range(30):  # scale so that mean(min(c * bulk, cap)) = rest
        c = c * rest / torch.minimum(c * bulk, cap).mean()
    bulk = torch.minimum(c * bulk, cap)
    log_lam, u_grid, a_grid = (torch.tensor(x) for x in _poisson_grid())
    step = log_lam[1] - log_lam[0]
    t = torch.linspace(0, 1, 200, dtype=torch.float64)[None, :]
    uniq = acc = n_tot = 0.0
    for w1, pool in ((1 - h["light_frac"], bulk), (h["light_frac"], light)):
        for w2, hh in ((1 - h["hot_table_frac"], 0 * hot), (h["hot_table_frac"], hot)):
            for w3, kind in ((torch.clamp(1 - h["flat_frac"] - h["flat2_frac"], min=0), 0),
                             (h["flat_frac"], 1), (h["flat2_frac"], 2)):
                flat = kind > 0
                n = (pool * p.batch_size)[:, None]
                reuse = h["flat_reuse_log10_mean"] + h["flat_reuse_log10_sd"] * z_rows \
                    + h["flat_reuse_pool_slope"] * z_pool if kind == 1 else \
                    h["flat2_reuse_log10_mean"] + h["flat2_reuse_log10_sd"] * z_rows
                log_rows = torch.log10(pool * p.batch_size) - reuse if flat else skew_rows
                r = (10 ** torch.clamp(log_rows, p.rows_log10_min, p.rows_log10_max))[:, None]
                alpha = (flat_alpha if flat else skew_alpha)[:, None]
                lin = torch.minimum(torch.arange(48.0)[None, :], r)
                geo = torch.minimum(48.0 * torch.exp(t * torch.log(torch.clamp(r, min=48.0) / 48)),
                                    r)
                edges = torch.cat([lin, geo, r], dim=1)
                m = torch.clamp(edges[:, 1:] - edges[:, :-1], min=0.0)
                cdf = _rank_cdf_t(alpha, q, r, edges + 1.0)
                mass = torch.clamp(cdf[:, 1:] - cdf[:, :-1], min=0.0) * (1 - hh[:, None])
                mass = torch.cat([mass[:, :1] + hh[:, None], mass[:, 1:]], dim=1)
                lam = torch.clamp(n * mass / torch.clamp(m, min=1e-9), min=1e-300)
                tt = torch.clamp((torch.log(lam) - log_lam[0]) / step, 0, len(log_lam) - 1.001)
                tt = tt.flatten()
                i = tt.detach().long()
                wt = tt - i
                # Linear interpolation on the lambda grid summed over buckets: spread each
                # bucket's weight onto its two grid points, then one product per histogram.
                cu, ca = (m * lam).flatten(), (n * mass).flatten()
                z = torch.zeros(len(log_lam), dtype=torch.float64)
                gu = z.index_add(0, i, cu * (1 - wt)).index_add(0, i + 1, cu * wt)
                ga = z.index_add(0, i, ca * (1 - wt)).index_add(0, i + 1, ca * wt)
                w = w1 * w2 * w3
                uniq, acc = uniq + w * (gu @ u_grid), acc + w * (ga @ a_grid)
                n_tot = n_tot + w * n.sum()
    a_t = torch.tensor(p.target_access_hist, dtype=torch.float64)
    u_t = torch.tensor(p.target_unique_hist, dtype=torch.float64)
    uf = uniq.sum() / n_tot
    return ((acc / acc.sum() - a_t).abs().sum() + 0.5 * (uniq / uniq.sum() - u_t).abs().sum()
            + torch.log(uf / p.target_unique_fraction).abs())


def calibration_loss(preset: G.GeneratorPreset, n_tables: int | None = None,
                     seeds: Sequence[int] = (100, 101, 102, 103)) -> float:
    """The calibration objective from the numpy model, averaged over pools of ``n_tables``
    (default: the preset's count) drawn with ``seeds``:
    L1(accesses) + 0.5 L1(unique rows) + |log(unique fraction / target)|."""
    out = []
    for seed in seeds:
        c = G.compare_to_target(expected_aggregate(preset, n_tables or preset.n_tables, seed),
                                preset)
        out.append(c["l1_access"] + 0.5 * c["l1_unique"]
                   + abs(math.log1p(c["unique_fraction_rel_err"])))
    return float(np.mean(out))


def calibrate(preset: str | G.GeneratorPreset, free: Sequence[str] = FREE,
              n_tables: int | None = None, seeds: Sequence[int] = tuple(range(8)), steps: int = 300,
              lr: float = 0.05, log: Callable[[str], None] = print
              ) -> tuple[G.GeneratorPreset, float]:
    """Fit the ``free`` hyperparameters of ``preset`` to its published target by Adam on the
    differentiable expected model, clamped to BOUNDS. The loss is the mean over pools of
    ``n_tables`` (default: the preset's count) drawn with ``seeds``, so what is fitted is what a
    pool of that size gets, sampling spread included.

    Returns (fitted preset, :func:`calibration_loss` of it on other seeds).
    """
    import torch

    torch.set_num_threads(1)
    base = G.get_preset(preset)
    draws = [{k: torch.tensor(np.asarray(v, dtype=np.float64))
              for k, v in G.base_draws(n_tables or base.n_tables, s).items() if k != "index_seed"}
             for s in seeds]
    x = {k: torch.tensor(float(np.clip(getattr(base, k), *BOUNDS[k])), dtype=torch.float64,
                         requires_grad=True) for k in free}
    fixed = {k: torch.tensor(float(getattr(base, k)), dtype=torch.float64)
             for k in BOUNDS if k not in free}
    opt = torch.optim.Adam(list(x.values()), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    best = (math.inf, {})
    for step in range(steps):
        loss = sum(_torch_loss(x | fixed, base, d) for d in draws) / len(draws)
        if loss.item() < best[0]:
            best = (loss.item(), {k: v.item() for k, v in x.items()})
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            for k, v in x.items():
                v.clamp_(*BOUNDS[k])
        if step % 25 == 0:
            log(f"  step {step}: loss {loss.item():.4f} (best {best[0]:.4f})")
    fitted = replace(base, **best[1])
    return fitted, calibration_loss(fitted)
