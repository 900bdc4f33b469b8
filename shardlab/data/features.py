"""Table features (``docs/methods.md``, "Table features"): reuse bins from raw lookups and the 21-number
feature vector shared by all three methods.

Feature order (``constants.FEATURE_NAMES``): dim, rows, pooling_factor, size (rows x dim),
then the 17 reuse bins. :class:`FeatureScaler` standardises rows, size and pooling factor
with the mean and std of a training pool; dim and the bins stay raw, as in the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.tables import Table

#: Columns of the feature matrix that are standardised.
STANDARDISED = (1, 2, 3)


def reuse_bin_of_counts(counts: np.ndarray) -> np.ndarray:
    """Bin index of each access count (int array, counts >= 1): bin i holds (2**(i-1), 2**i],
    bin 0 holds exactly 1, the last bin everything above 2**15."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.size and counts.min() < 1:
        raise ValueError("access counts must be >= 1")
    # ceil(log2(c)) computed exactly: the bit length of (c - 1), frexp's exponent (exact in
    # float64 for counts below 2**53; 0 for c = 1).
    bins = np.frexp((counts - 1).astype(np.float64))[1].astype(np.int64)
    return np.minimum(bins, C.N_REUSE_BINS - 1)


def reuse_histograms(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Reuse histograms of one table's lookups in one batch.

    Returns ``(unique_rows_hist, accesses_hist, n_unique)``: fractions (shape [17]) of the
    unique rows, and of all lookups, by the access count of the row; both all-zero when
    ``indices`` is empty.
    """
    indices = np.asarray(indices)
    if indices.size == 0:
        return np.zeros(C.N_REUSE_BINS), np.zeros(C.N_REUSE_BINS), 0
    if indices.dtype.kind in "iu" and indices.min() >= 0 and indices.max() < 4 * indices.size + 65536:
        counts = np.bincount(indices)  # same counts as np.unique, in row order, much faster
        counts = counts[counts > 0]
    else:
        _, counts = np.unique(indices, return_counts=True)
    bins = reuse_bin_of_counts(counts)
    unique_hist = np.bincount(bins, minlength=C.N_REUSE_BINS).astype(np.float64)
    access_hist = np.bincount(bins, weights=counts, minlength=C.N_REUSE_BINS)
    return unique_hist / counts.size, access_hist / indices.size, int(counts.size)


def table_stats_from_lookups(indices: np.ndarray, lengths: np.ndarray) -> dict[str, Any]:
    """Rows, pooling factor and reuse bins of one table from its raw lookups (section 2).

    ``indices``: all row ids the table saw in the batch; ``lengths``: bag length per sample,
    shape [B]. rows = max(100, max index + 1); pooling_factor = mean of lengths.
    """
    indices = np.asarray(indices)
    lengths = np.asarray(lengths)
    rows = max(100, int(indices.max()) + 1) if indices.size else 100
    unique_hist, access_hist, n_unique = reuse_histograms(indices)
    return {"rows": rows, "pooling_factor": float(lengths.mean()) if lengths.size else 0.0,
            "reuse_bins": unique_hist, "access_bins": access_hist, "n_unique": n_unique,
            "n_lookups": int(indices.size)}


def table_features(tables: Sequence[Table]) -> np.ndarray:
    """Raw feature matrix, shape [len(tables), 21], float64, in ``FEATURE_NAMES`` order."""
    out = np.empty((len(tables), C.N_TABLE_FEATURES), dtype=np.float64)
    for i, t in enumerate(tables):
        out[i, 0] = t.dim
        out[i, 1] = t.rows
        out[i, 2] = t.pooling_factor
        out[i, 3] = t.size
        out[i, 4:] = t.reuse_bins
    return out


@dataclass(frozen=True)
class FeatureScaler:
    """Standardisation of rows, pooling factor and size (mean/std of a training pool)."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    @classmethod
    def fit(cls, tables: Sequence[Table]) -> "FeatureScaler":
        """Fit on the training pool's tables."""
        raw = table_features(tables)[:, STANDARDISED]
        std = raw.std(axis=0)
        std[std == 0] = 1.0
        return cls(tuple(float(x) for x in raw.mean(axis=0)), tuple(float(x) for x in std))

    def transform(self, tables: Sequence[Table]) -> np.ndarray:
        """Standardised feature matrix, shape [len(tables), 21], float32."""
        out = table_features(tables)
        out[:, STANDARDISED] = (out[:, STANDARDISED] - np.asarray(self.mean)) / np.asarray(self.std)
        return out.astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (stored with every model that uses the features)."""
        return {"columns": [C.FEATURE_NAMES[i] for i in STANDARDISED],
                "mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FeatureScaler":
        """Inverse of :meth:`to_dict`."""
        return cls(tuple(data["mean"]), tuple(data["std"]))
