"""Synthetic DLRM-like embedding tables and their lookup streams, calibrated to Meta's published
aggregate locality statistics (dlrm_datasets ``locality_stats.txt``; targets in the presets).

Per-table lookup model (``distribution["model"] == "zipf-nb-v1"``; hyperparameters in
:class:`GeneratorPreset`, per-table draws in :func:`draw_params`):

- **pooling** L (mean bag length, lookups per sample): a fraction ``light_frac`` of tables is
  light, L log-uniform in [light_min, light_max] (1e-4 .. 1: near-empty features); the others are
  lognormal (log-sd ``pooling_log_sd``), capped at ``pooling_max``. Each draw is rescaled so that
  the mean over its tables is exactly the preset's ``pooling_mean``.
- **bag lengths**: per sample, negative binomial with mean L and dispersion k = ``bag_k``
  (variance L + L^2/k, k log-uniform per table), so some samples have empty bags.
- **kind and rows** N (hash size, clipped to [100, ~5e7]): a *skewed* table has log10 N ~
  Normal(rows_log10_mean + rows_pool_slope z_pool, rows_log10_sd); a *flat* table (fraction
  ``flat_frac``; ``flat2_frac`` for a second group) is sized from its lookups, N = L x batch /
  reuse with log10 reuse ~ Normal (flat: ~10 lookups per row, e.g. small-vocabulary features).
- **popularity**: each lookup is, with probability ``hot`` (a default row, in a fraction
  ``hot_table_frac`` of tables), rank 0; otherwise rank r = floor(x) - 1 where y = x + q has
  density ~ y^-alpha on x in [1, N+1) (a truncated Zipf-Mandelbrot law: alpha = tail exponent,
  q = size of the flattened head), sampled by inverse CDF from one uniform per lookup. alpha is
  Normal per table (its own mean/sd for flat tables; slopes couple it to pooling and rows).
- **row ids**: ranks are scattered over the table by the bijection row = (r P + offset) mod N
  with P coprime to N; P and offset come from ``index_seed``.

Draws are Latin-hypercube stratified; the secondary variables are stratified within blocks of
tables of similar pooling, so the few heavy tables that dominate lookup-weighted aggregates do
not decide them by chance. Lookups are regenerated exactly from (index_seed, distribution, rows,
batch_size, batch_index) with ``np.random.default_rng``; a pool stores parameters and measured
stats, never lookups.

Calibration (``studies/tools/build_pool.py --calibrate``): a table's expected 17-bin histograms
follow without sampling (ranks in buckets, Poisson access counts per row); the preset
hyperparameters are fitted by gradient descent on a torch twin of that model, averaged over
several pool-sized draws, and the shipped pools are then verified by real sampling.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.data.features import table_stats_from_lookups
from shardlab.errors import ShardlabError
from shardlab.tables import Table

MODEL = C.GENERATOR_MODEL
from shardlab.data.presets import (PRESETS, STATS_SOURCE, GeneratorPreset,  # noqa: F401
                                  compare_histograms, get_preset, l1_distance, published_target)


def _sig(x: float, digits: int = 6) -> float:
    """``x`` rounded to ``digits`` significant digits (so JSON round trips are exact)."""
    return float(f"{float(x):.{digits}g}")


# ----------------------------------------------------------------------------- sampling
def _log_g(alpha: float, log_x: np.ndarray | float) -> np.ndarray:
    """g(x) = (x^(1-alpha) - 1) / (1-alpha) (= ln x at alpha = 1), from ln x; any shape."""
    s = 1.0 - np.asarray(alpha, dtype=np.float64)
    small = np.abs(s) < 1e-9
    s_safe = np.where(small, 1.0, s)
    return np.where(small, log_x, np.expm1(s_safe * log_x) / s_safe)


def _sample_ranks(rng: np.random.Generator, n: int, rows: int, alpha: float, q: float,
                  hot: float) -> np.ndarray:
    """``n`` popularity ranks in [0, rows) (int64): with probability ``hot`` rank 0 (a default
    row), else y = x + q with density ~ y^-alpha for x in [1, rows+1) (a Zipf-Mandelbrot law;
    q > 0 flattens the head) and rank = floor(x) - 1. One uniform per lookup."""
    u = rng.random(n)
    if hot > 0:
        u = np.maximum((u - hot) / (1.0 - hot), 0.0)
    s = 1.0 - alpha
    g0 = float(_log_g(alpha, math.log1p(q)))
    g_n = float(_log_g(alpha, math.log(rows + 1.0 + q)))
    g = g0 + (g_n - g0) * u
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_y = g if abs(s) < 1e-9 else np.log1p(s * g) / s
        x = np.exp(log_y) - q
    # a steep law (large alpha) can round s * g to -1 at the tail: x overflows; that draw is the
    # last row (before this guard the non-finite x became rank 0)
    x = np.where(np.isfinite(x), np.minimum(x, rows + 1.0), rows + 1.0)
    r = x.astype(np.int64) - 1
    return np.clip(r, 0, rows - 1, out=r)


@lru_cache(maxsize=4096)
def _scatter(index_seed: int, rows: int) -> tuple[int, int]:
    """(P, offset) of the rank -> row bijection row = (r * P + offset) % rows; gcd(P, rows) = 1."""
    rng = np.random.default_rng([index_seed, 0x5EED, 0])
    p = int(rng.integers(max(1, rows // 3), max(2, rows)))
    while math.gcd(p, rows) != 1:
        p += 1
    return p, int(rng.integers(0, rows))


#: (parameter, lowest, highest) of a generator distribution: Zipf exponent, its shift q, the hot
#: share, mean lookups per sample (pooling, bounded as a table's pooling factor) and the
#: negative-binomial bag shape.
_PARAM_RANGES = (("alpha", 0.0, 10.0), ("q", 0.0, 1e9), ("hot", 0.0, 1.0), ("pooling", 0.0, C.MAX_POOLING_FACTOR),
                 ("bag_k", 1e-9, 1e9))


def _params(table: Table) -> dict[str, Any]:
    """The table's generator parameters, checked; one-line error naming the table otherwise."""
    d = table.distribution_params
    if table.index_seed is None or d.get("model") != MODEL:
        raise ShardlabError(f"table '{table.name}': no generator distribution/index_seed (field "
                            f"'distribution' must have model '{MODEL}'), cannot generate lookups")
    for key in ("alpha", "pooling", "bag_k"):  # q and hot default to 0 (a plain Zipf law)
        if key not in d:
            raise ShardlabError(f"table '{table.name}': field 'distribution' lacks '{key}'")
    for key, low, high in _PARAM_RANGES:
        value = d.get(key, 0.0)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or not low <= value <= high:
            raise ShardlabError(f"table '{table.name}': field 'distribution.{key}' = {value!r} must be a finite "
                                f"number in [{low:g}, {high:g}]")
    if table.rows >= 2**31:
        raise ShardlabError(f"table '{table.name}': field 'rows' = {table.rows} too large to "
                            "generate")
    return d


def generate_lookups(table: Table, batch_size: int, batch_index: int = 0
                     ) -> tuple[np.ndarray, np.ndarray]:
    """One batch of lookups of a generated table, as FBGEMM TBE inputs for this table alone.

    Returns ``(indices, offsets)``: int64 row ids, shape [N] with every id in [0, table.rows), and
    int64 bag offsets, shape [batch_size + 1] (bag b is ``indices[offsets[b]:offsets[b+1]]``).
    Deterministic in (table.index_seed, table.distribution, table.rows, batch_size, batch_index);
    different ``batch_index`` values give independent batches.
    """
    ranks, offsets = _ranks(table, batch_size, batch_index)
    p, off = _scatter(int(table.index_seed), table.rows)
    ranks *= p
    ranks += off
    np.remainder(ranks, table.rows, out=ranks)
    return ranks, offsets


def _ranks(table: Table, batch_size: int, batch_index: int) -> tuple[np.ndarray, np.ndarray]:
    """(popularity ranks, offsets) of :func:`generate_lookups`' batch before the rank -> row
    bijection: the same bags and the same access counts (reuse statistics need no more)."""
    d = _params(table)
    if batch_size < 1 or batch_index < 0:
        raise ShardlabError(f"table '{table.name}': batch_size must be >= 1 and batch_index >= 0")
    rng = np.random.default_rng([table.index_seed, 0x5EED, 1, batch_index])
    mean, k = float(d["pooling"]), float(d["bag_k"])
    if d.get("fixed"):      # every bag exactly round(pooling) long: one-hot (1) or fixed multi-hot
        lengths = np.full(batch_size, int(round(mean)), dtype=np.int64)
    elif mean > 0:
        lengths = rng.negative_binomial(k, k / (k + mean), size=batch_size)
    else:
        lengths = np.zeros(batch_size, dtype=np.int64)
    offsets = np.zeros(batch_size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ranks = _sample_ranks(rng, int(offsets[-1]), table.rows, float(d["alpha"]),
                          float(d.get("q", 0.0)), float(d.get("hot", 0.0)))
    return ranks, offsets


def lookup_stats(name: str, indices: np.ndarray, offsets: np.ndarray) -> dict[str, Any]:
    """Per-table stats of one batch: ``n_lookups``, ``n_unique`` (distinct rows), ``batch_size``,
    ``unique_counts`` / ``access_counts`` (17 ints: unique rows / lookups per reuse bin), and
    ``reuse_bins`` / ``pooling_factor`` for the Table (via features.table_stats_from_lookups)."""
    s = table_stats_from_lookups(indices, np.diff(offsets))
    n_u, n = s["n_unique"], s["n_lookups"]
    return {"name": name, "batch_size": int(len(offsets) - 1), "n_lookups": n, "n_unique": n_u,
            "unique_counts": [int(round(x * n_u)) for x in s["reuse_bins"]],
            "access_counts": [int(round(x * n)) for x in s["access_bins"]],
            "reuse_bins": [_sig(x) for x in s["reuse_bins"]],
            "pooling_factor": _sig(s["pooling_factor"])}


def table_from_params(name: str, params: Mapping[str, Any], dim: int, batch_size: int,
                      index_seed: int, source: str | None = None) -> tuple[Table, dict[str, Any]]:
    """Build a Table from generator parameters by generating one batch and measuring it.

    ``params``: ``rows`` (int) and the distribution keys ``alpha``, ``pooling`` (mean bag
    length), ``bag_k`` and optionally ``q`` and ``hot`` (default 0: a plain Zipf law) and
    ``fixed`` (true: every bag exactly ``round(pooling)`` long -- one-hot features and fixed-size
    multi-hot ones such as MLPerf DLRM-DCNv2's; the default draws negative-binomial lengths); other
    keys such as ``model`` are ignored. Returns
    (table, stats): ``table.rows`` is the declared rows, ``pooling_factor`` the measured mean bag
    length of batch 0 (``batch_size`` samples) and ``reuse_bins`` its unique-row histogram (all
    in bin 0, one access per row, where the batch holds no lookup, and ``source`` says so);
    stats as :func:`lookup_stats` (without the Table fields). To augment a table, change its
    parameters and rebuild: ``table_from_params(name, {"rows": t.rows, **t.distribution_params,
    "pooling": 2 * L}, dim, batch_size, t.index_seed)`` regenerates the lookups and the bins.
    """
    dist = {"model": MODEL, "alpha": _sig(params["alpha"]), "q": _sig(params.get("q", 0.0)),
            "hot": _sig(params.get("hot", 0.0)), "pooling": _sig(params["pooling"]),
            "bag_k": _sig(params["bag_k"])}
    if params.get("fixed"):
        dist["fixed"] = 1
    probe = Table(name, int(params["rows"]), dim, 0.0, (0.0,) * C.N_REUSE_BINS, None,
                  int(index_seed), dist)
    idx, off = _ranks(probe, batch_size, 0)      # the bijection to rows changes no access count
    stats = lookup_stats(name, idx, off)
    bins, source = stats.pop("reuse_bins"), source or f"synthetic:{MODEL}"
    if not stats["n_lookups"]:        # a table looked up so rarely that the batch holds no lookup
        bins = [1.0] + [0.0] * (C.N_REUSE_BINS - 1)
        source += f"; no lookup in the measured batch of {batch_size}: every row it touches is touched once (bin 0)"
    table = Table(name, probe.rows, dim, stats.pop("pooling_factor"), bins, source, int(index_seed), dist)
    return table, stats


# ----------------------------------------------------------------------------- population
def _stratified(rng: np.random.Generator, n: int) -> np.ndarray:
    """n stratified uniforms in (0, 1), one per stratum [i/n, (i+1)/n), in random order."""
    return (rng.permutation(n) + rng.uniform(0.01, 0.99, n)) / n


def _normal_ppf(u: np.ndarray) -> np.ndarray:
    nd = NormalDist()
    return np.array([nd.inv_cdf(float(x)) for x in u])


def _stratified_by(rng: np.random.Generator, order: np.ndarray, block: int = 8) -> np.ndarray:
    """Uniforms stratified within consecutive blocks of ``order`` (indices sorted by pooling):
    each block of ``block`` tables spans [0, 1) evenly, so heavy tables see every stratum."""
    u = np.empty(len(order))
    for start in range(0, len(order), block):
        idx = order[start:start + block]
        u[idx] = (rng.permutation(len(idx)) + rng.uniform(0.01, 0.99, len(idx))) / len(idx)
    return u


def base_draws(n_tables: int, seed: int) -> dict[str, np.ndarray]:
    """The preset-independent random numbers behind :func:`draw_params`, each shape [n_tables]:
    standard normals ``z_pool`` (Latin-hypercube stratified), ``z_rows``, ``z_alpha``, ``z_q``,
    ``z_hot`` and uniforms ``u_light``, ``u_hot``, ``u_flat`` (stratified within blocks of 8
    tables of similar ``z_pool``, which keeps the few heaviest tables from deciding the
    aggregate by chance), ``u_k``, ``u_light_level``; and ``index_seed`` (ints)."""
    rng = np.random.default_rng([seed, 0xD1A5])
    out = {"z_pool": _normal_ppf(_stratified(rng, n_tables))}
    order = np.argsort(out["z_pool"], kind="stable")
    out |= {f"z_{k}": _normal_ppf(_stratified_by(rng, order))
            for k in ("rows", "alpha", "q", "hot")}
    out |= {f"u_{k}": _stratified_by(rng, order) for k in ("light", "hot", "flat")}
    out |= {"u_k": rng.random(n_tables), "u_light_level": _stratified(rng, n_tables)}
    out["index_seed"] = rng.integers(0, 2**31 - 1, size=n_tables)
    return out


def draw_params(preset: str | GeneratorPreset, n_tables: int, seed: int) -> list[dict[str, Any]]:
    """Per-table parameters of ``n_tables`` tables (Latin-hypercube stratified draws).

    Each dict: ``rows`` (int), ``alpha`` (tail exponent), ``q`` (head offset, ranks), ``hot``
    (fraction of lookups on the default row), ``pooling`` (mean bag length, lookups/sample),
    ``bag_k`` (bag-length dispersion), ``index_seed`` (int); floats rounded to 6 significant
    digits. The pooling values are rescaled so that their mean is exactly ``preset.pooling_mean``.
    """
    p = get_preset(preset)
    d = base_draws(n_tables, seed)
    z_rows, z_pool = d["z_rows"], d["z_pool"]
    flat2 = (d["u_flat"] >= p.flat_frac) & (d["u_flat"] < p.flat_frac + p.flat2_frac)
    flat = (d["u_flat"] < p.flat_frac) | flat2
    alpha = np.clip(np.where(flat, p.flat_alpha_mean + p.flat_alpha_sd * d["z_alpha"],
                             p.alpha_mean + p.alpha_sd * d["z_alpha"] + p.alpha_pool_slope * z_pool
                             + p.alpha_rows_slope * z_rows), p.alpha_min, p.alpha_max)
    hot = np.where(d["u_hot"] < p.hot_table_frac,
                   np.minimum(10 ** (p.hot_log10_mean + p.hot_log10_sd * d["z_hot"]
                                     + p.hot_pool_slope * z_pool), 0.9), 0.0)
    q = 10 ** (p.q_log10_mean + p.q_log10_sd * d["z_q"])
    light = d["u_light"] < p.light_frac
    lo, hi = math.log10(p.light_min), math.log10(p.light_max)
    pool = np.where(light, 10 ** (lo + (hi - lo) * d["u_light_level"]),
                    np.exp(p.pooling_log_sd * z_pool))
    target = p.pooling_mean * n_tables - pool[light].sum()
    for _ in range(50):  # rescale the bulk tables to the target mean, respecting the cap
        free = ~light & (pool < p.pooling_max)
        rest = target - pool[~light & ~free].sum()
        if not free.any() or rest <= 0:
            break
        pool[free] *= rest / pool[free].sum()
        pool = np.where(light, pool, np.minimum(pool, p.pooling_max))
    reuse = np.where(flat2, p.flat2_reuse_log10_mean + p.flat2_reuse_log10_sd * z_rows,
                     p.flat_reuse_log10_mean + p.flat_reuse_log10_sd * z_rows
                     + p.flat_reuse_pool_slope * z_pool)
    log_rows = np.where(flat, np.log10(pool * p.batch_size) - reuse,
                        p.rows_log10_mean + p.rows_log10_sd * z_rows + p.rows_pool_slope * z_pool)
    rows = np.round(10 ** np.clip(log_rows, p.rows_log10_min, p.rows_log10_max)).astype(np.int64)
    bag_k = np.exp(np.log(p.bag_k_min) + np.log(p.bag_k_max / p.bag_k_min) * d["u_k"])
    return [{"rows": int(rows[i]), "alpha": _sig(alpha[i]), "q": _sig(q[i]), "hot": _sig(hot[i]),
             "pooling": _sig(pool[i]), "bag_k": _sig(bag_k[i]),
             "index_seed": int(d["index_seed"][i])} for i in range(n_tables)]


def generate_tables_with_stats(preset: str | GeneratorPreset, n_tables: int, seed: int,
                               dim: int = 64, name_prefix: str = "t"
                               ) -> tuple[list[Table], list[dict[str, Any]]]:
    """Draw ``n_tables`` tables from a preset and measure one batch (preset batch size) of each.

    Returns (tables, stats): tables named ``f"{name_prefix}{i}"`` with ``dim`` columns; stats
    per table as :func:`lookup_stats`.
    """
    p = get_preset(preset)
    out = [table_from_params(f"{name_prefix}{i}", prm, dim, p.batch_size, prm["index_seed"],
                             pool_source(p, seed))
           for i, prm in enumerate(draw_params(p, n_tables, seed))]
    return [t for t, _ in out], [s for _, s in out]


def pool_source(preset: str | GeneratorPreset, seed: int) -> str:
    """The ``source`` string of tables drawn from ``preset`` with ``seed``."""
    return f"synthetic:{MODEL}:preset={get_preset(preset).name}:seed={seed}"


def generate_tables(preset: str | GeneratorPreset, n_tables: int, seed: int, dim: int = 64,
                    name_prefix: str = "t") -> list[Table]:
    """Like :func:`generate_tables_with_stats`, returning only the tables."""
    return generate_tables_with_stats(preset, n_tables, seed, dim, name_prefix)[0]


def aggregate_histograms(stats: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Dataset-level numbers from per-table stats, as the published stats define them.

    Pools all (table, row) pairs: ``unique_hist`` (fraction of distinct pairs per reuse bin),
    ``access_hist`` (fraction of all lookups per bin of the row they hit), ``unique_fraction``
    (distinct pairs / lookups), ``avg_pooling`` (lookups / (tables x batch_size)),
    ``n_lookups``, ``n_unique``, ``n_tables``. Stats need ``unique_counts``, ``access_counts``,
    ``n_lookups``, ``n_unique``, ``batch_size``.
    """
    if not stats:
        raise ShardlabError("aggregate_histograms: no table stats given")
    u = np.sum([s["unique_counts"] for s in stats], axis=0, dtype=np.float64)
    a = np.sum([s["access_counts"] for s in stats], axis=0, dtype=np.float64)
    n = float(sum(s["n_lookups"] for s in stats))
    nu = float(sum(s["n_unique"] for s in stats))
    pf = float(np.mean([s["n_lookups"] / s["batch_size"] for s in stats]))
    return {"unique_hist": (u / max(nu, 1.0)).tolist(), "access_hist": (a / max(n, 1.0)).tolist(),
            "unique_fraction": nu / max(n, 1.0), "avg_pooling": pf, "n_lookups": int(n),
            "n_unique": int(nu), "n_tables": len(stats)}


def compare_to_target(agg: Mapping[str, Any], preset: str | GeneratorPreset) -> dict[str, float]:
    """L1 distances (accesses, unique rows) and relative errors (pooling, unique fraction) of an
    aggregate (:func:`aggregate_histograms`) against the preset's published target."""
    return compare_histograms(agg, published_target(preset))
