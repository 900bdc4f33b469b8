"""Generator presets: the hyperparameters of a synthetic table population and the published
aggregate statistics they were fitted to (see :mod:`shardlab.data.generator` for the model and
:mod:`shardlab.data.calibration` for the fit)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab.errors import ShardlabError

#: Where the published numbers copied into the presets come from.
STATS_SOURCE = ("facebookresearch/dlrm_datasets@6f46ba7906e47a2f6bab6499056480d07d784eb8 "
                "embedding_bag/{year}/locality_stats.txt, as transcribed in "
                "dlrm_locality_stats.json")


@dataclass(frozen=True)
class GeneratorPreset:
    """Hyperparameters of the table population plus the published target they were fitted to.

    ``batch_size`` in samples; ``pooling_*`` in lookups per sample; ``rows_log10_*`` in log10 of
    rows; ``target_*`` are the published dataset-level numbers (17-bin histograms as fractions).
    """

    name: str
    batch_size: int
    n_tables: int
    target_files: tuple[str, ...]
    target_year: int
    target_unique_hist: tuple[float, ...]
    target_access_hist: tuple[float, ...]
    target_unique_fraction: float
    pooling_mean: float
    rows_log10_mean: float = 5.0
    rows_log10_sd: float = 1.1
    rows_log10_min: float = 2.0
    rows_log10_max: float = 7.7
    pooling_log_sd: float = 0.8
    pooling_max: float = 400.0
    light_frac: float = 0.45
    light_min: float = 1e-4
    light_max: float = 1.0
    alpha_mean: float = 0.95
    alpha_sd: float = 0.55
    alpha_min: float = 0.0
    alpha_max: float = 2.5
    alpha_pool_slope: float = -0.2
    rows_pool_slope: float = 0.3
    alpha_rows_slope: float = 0.0
    hot_table_frac: float = 0.2
    flat_frac: float = 0.3
    flat_alpha_mean: float = 0.3
    flat_alpha_sd: float = 0.2
    flat_reuse_log10_mean: float = 1.2
    flat_reuse_log10_sd: float = 0.3
    flat_reuse_pool_slope: float = 0.0
    flat2_frac: float = 0.0
    flat2_reuse_log10_mean: float = 3.0
    flat2_reuse_log10_sd: float = 0.3
    hot_log10_mean: float = -2.0
    hot_log10_sd: float = 0.5
    hot_pool_slope: float = 0.0
    q_log10_mean: float = 1.1
    q_log10_sd: float = 1.3
    bag_k_min: float = 0.5
    bag_k_max: float = 20.0

    def hyperparameters(self) -> dict[str, Any]:
        """The hyperparameters (everything except the targets), as a JSON dict."""
        return {k: v for k, v in asdict(self).items() if not k.startswith("target_")}


# Targets copied from the transcribed published statistics (source: STATS_SOURCE; shardlab.data.stats).
# dlrm2021: the single file fbgemm_t856_bs65536.pt.gz (the one the seed papers used).
# dlrm2022: the mean over the 16 files fbgemm_t788_bs131072_{0..15}.pt.gz (they differ by <=0.001).
PRESETS: dict[str, GeneratorPreset] = {
    "dlrm2021": GeneratorPreset(
        name="dlrm2021", batch_size=65536, n_tables=856,
        target_files=("fbgemm_t856_bs65536.pt.gz",), target_year=2021,
        target_unique_hist=(0.473, 0.152, 0.139, 0.112, 0.072, 0.032, 0.011, 0.005, 0.002, 0.001,
                            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        target_access_hist=(0.069, 0.044, 0.068, 0.101, 0.121, 0.104, 0.073, 0.058, 0.052, 0.05,
                            0.049, 0.048, 0.048, 0.043, 0.031, 0.023, 0.019),
        target_unique_fraction=0.14479, pooling_mean=15.8117,
        # fitted by studies/tools/build_pool.py --calibrate (see datasets/dlrm_synth/PROVENANCE.md)
        rows_log10_mean=5.0392, pooling_log_sd=0.8, light_frac=0.0292, rows_pool_slope=0.2373,
        alpha_mean=1.0719, alpha_sd=0.1319, alpha_pool_slope=-0.3584, alpha_rows_slope=-0.8211,
        q_log10_mean=1.3479, q_log10_sd=0.3396, hot_table_frac=1.0, hot_log10_mean=-2.3782,
        hot_log10_sd=0.05, flat_frac=0.5553, flat_alpha_mean=0.7708, flat_alpha_sd=0.2423,
        flat_reuse_log10_mean=0.9628, flat_reuse_log10_sd=0.2154, flat_reuse_pool_slope=0.18,
        hot_pool_slope=-0.328, flat2_frac=0.0742, flat2_reuse_log10_mean=3.099,
        flat2_reuse_log10_sd=0.5797,
    ),
    "dlrm2022": GeneratorPreset(
        name="dlrm2022", batch_size=131072, n_tables=788,
        target_files=tuple(f"fbgemm_t788_bs131072_{i}.pt.gz" for i in range(16)), target_year=2022,
        target_unique_hist=(0.342, 0.144, 0.149, 0.138, 0.112, 0.068, 0.029, 0.01, 0.004, 0.002,
                            0.001, 0.001, 0.0, 0.0, 0.0, 0.0, 0.0),
        target_access_hist=(0.027, 0.023, 0.04, 0.068, 0.105, 0.12, 0.099, 0.07, 0.059, 0.054,
                            0.04, 0.07175, 0.064, 0.047, 0.021, 0.017125, 0.0750625),
        target_unique_fraction=0.0784525, pooling_mean=13.6075,
        # fitted by studies/tools/build_pool.py --calibrate (see datasets/dlrm_synth_2022/PROVENANCE.md)
        rows_log10_mean=4.8924, pooling_log_sd=0.8, light_frac=0.4712, rows_pool_slope=0.6225,
        alpha_mean=1.3234, alpha_sd=0.717, alpha_pool_slope=-0.4993, alpha_rows_slope=-0.5534,
        q_log10_mean=2.7869, q_log10_sd=1.1632, hot_table_frac=0.4232, hot_log10_mean=-1.7978,
        hot_log10_sd=0.05, flat_frac=0.6345, flat_alpha_mean=0.9164, flat_alpha_sd=0.4219,
        flat_reuse_log10_mean=1.0919, flat_reuse_log10_sd=0.2943, flat_reuse_pool_slope=0.2237,
        hot_pool_slope=0.6164, flat2_frac=0.1346, flat2_reuse_log10_mean=3.3393,
        flat2_reuse_log10_sd=0.2738,
    ),
}


def get_preset(preset: str | GeneratorPreset) -> GeneratorPreset:
    """The preset called ``preset`` (or ``preset`` itself); one-line error for unknown names."""
    if isinstance(preset, GeneratorPreset):
        return preset
    if preset not in PRESETS:
        raise ShardlabError(f"unknown generator preset '{preset}' (known: {', '.join(PRESETS)})")
    return PRESETS[preset]


def published_target(preset: str | GeneratorPreset) -> dict[str, Any]:
    """The published dataset-level numbers a preset targets (copied into the preset).

    Keys: ``unique_hist`` and ``access_hist`` (17 fractions each), ``unique_fraction`` (unique
    (table, row) pairs / lookups), ``avg_pooling`` (lookups per table per sample), ``files``,
    ``batch_size``, ``n_tables``, ``source``.
    """
    p = get_preset(preset)
    return {"unique_hist": list(p.target_unique_hist), "access_hist": list(p.target_access_hist),
            "unique_fraction": p.target_unique_fraction, "avg_pooling": p.pooling_mean,
            "files": list(p.target_files), "batch_size": p.batch_size, "n_tables": p.n_tables,
            "source": STATS_SOURCE.format(year=p.target_year)}


def l1_distance(a: Sequence[float], b: Sequence[float]) -> float:
    """Sum of absolute differences of two equally long histograms (0 .. 2 for distributions)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ShardlabError(f"l1_distance: histograms differ in shape {a.shape} vs {b.shape}")
    return float(np.abs(a - b).sum())


def compare_histograms(agg: Mapping[str, Any], ref: Mapping[str, Any]) -> dict[str, float]:
    """How far an aggregate is from a reference (both as :func:`published_target` lays them out):
    ``l1_access`` and ``l1_unique`` (sum of absolute differences, 0..2), ``pooling_rel_err`` and
    ``unique_fraction_rel_err`` (agg / ref - 1)."""
    return {"l1_access": l1_distance(agg["access_hist"], ref["access_hist"]),
            "l1_unique": l1_distance(agg["unique_hist"], ref["unique_hist"]),
            "pooling_rel_err": float(agg["avg_pooling"] / ref["avg_pooling"] - 1.0),
            "unique_fraction_rel_err": float(agg["unique_fraction"] / ref["unique_fraction"] - 1.0)}

