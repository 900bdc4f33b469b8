"""Table augmentation for pre-training data (ALGORITHMS.md section 4).

NeuroShard copies every base table at each dim in {128, 64, 32, 16, 8, 4}; lookups do not
depend on dim, so the copies keep their reuse bins. Optionally (each switchable) a table also
gets random variants with scaled rows, scaled pooling factor or a shifted Zipf exponent; those
change the lookups, so each variant's lookups are regenerated with the synthetic generator and
its bins measured again -- features always describe the lookups the profiler will replay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.tables import Table


@dataclass(frozen=True)
class Augmentation:
    """What to vary. ``dims``: copy each table at each of these dims (None keeps its dim).
    ``rows`` / ``pooling`` / ``distribution``: make ``variants`` random variants per table with
    rows x U_log(rows_scale), pooling x U_log(pooling_scale), alpha + U(alpha_shift)."""

    dims: tuple[int, ...] | None = tuple(sorted(C.SEED_DIMS, reverse=True))
    rows: bool = False
    pooling: bool = False
    distribution: bool = False
    variants: int = 1
    rows_scale: tuple[float, float] = (0.25, 4.0)
    pooling_scale: tuple[float, float] = (0.5, 2.0)
    alpha_shift: tuple[float, float] = (-0.15, 0.15)

    @property
    def changes_lookups(self) -> bool:
        """Whether variants need regenerated lookups."""
        return self.rows or self.pooling or self.distribution


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _variant(table: Table, aug: Augmentation, rng: np.random.Generator, k: int,
             batch_size: int) -> Table:
    from shardlab.data.generator import table_from_params

    d = table.distribution_params
    if table.index_seed is None or "alpha" not in d:
        raise ShardlabError(f"table '{table.name}': field 'distribution' is missing, so its rows, "
                            f"pooling or distribution cannot be augmented (only dims can)")
    params = {**d, "rows": table.rows}
    if aug.rows:
        params["rows"] = int(min(2**31 - 1, max(100, round(table.rows * _log_uniform(rng, *aug.rows_scale)))))
    if aug.pooling:
        params["pooling"] = float(d["pooling"]) * _log_uniform(rng, *aug.pooling_scale)
    if aug.distribution:
        params["alpha"] = max(0.0, float(d["alpha"]) + float(rng.uniform(*aug.alpha_shift)))
    seed = int(rng.integers(0, 2**31 - 1))
    out, _ = table_from_params(f"{table.name}~v{k}", params, table.dim, batch_size, seed,
                               source=f"augmented from {table.name} ({table.source or 'unknown'})")
    return out


def augment_tables(tables: Sequence[Table], aug: Augmentation = Augmentation(), seed: int = 0,
                   batch_size: int = C.DEFAULT_BATCH_SIZE) -> list[Table]:
    """Augmented copies of ``tables``: for each base table, its lookup variants (if any are
    switched on; else the table itself), each at every dim of ``aug.dims``. Names get ``~vK``
    (variant K) and ``@dD`` (dim D) suffixes. ``batch_size`` (samples) is the batch at which
    variants' bins are measured. Deterministic in ``seed``."""
    if aug.dims is not None and any(d % C.DIM_MULTIPLE or d <= 0 for d in aug.dims):
        raise ShardlabError(f"augmentation: field 'dims' = {list(aug.dims)} must be positive multiples of 4")
    rng = np.random.default_rng(seed)
    out: list[Table] = []
    for t in tables:
        bases = [_variant(t, aug, rng, k, batch_size) for k in range(aug.variants)] \
            if aug.changes_lookups else [t]
        for b in bases:
            if aug.dims is None:
                out.append(b)
            else:
                out.extend(b.with_dim(d, name=f"{b.name}@d{d}") for d in aug.dims)
    return out
