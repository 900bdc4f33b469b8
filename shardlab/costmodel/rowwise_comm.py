"""Row-wise comm cost, an **analytic** model fitted to measured samples (issue 18, must-show 2).

Per rank, forward ms = the all-to-all regressors of
:class:`~shardlab.costmodel.analytic.AnalyticComm` (1, G-1, send / receive / max-rank bytes,
waiting) plus row-wise terms: the reduce-scatter's bytes (G x b x dim partial sums in, b x dim
out, s bytes per value; b = ceil(B / G)) and the rank's index bytes sent and received (8 each);
backward = the all-to-all's five plus the all-gather's bytes (the same volume as the
reduce-scatter). Coefficients are non-negative least squares on relative error
(:func:`~shardlab.costmodel.analytic.nnls_relative`), fitted on ``rowcomm:<G>`` samples
(:mod:`shardlab.profile.rowwise_campaign`). Linear in bytes: it says so in its ``source``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from shardlab.costmodel.analytic import AnalyticComm, nnls_relative
from shardlab.errors import ShardlabError

#: Bytes per index sent in the input dist.
INDEX_BYTES = 8


def rowwise_terms(world_size: int, batch_size: int, bytes_per_value: int, rowwise: Mapping[str, Any] | None
                  ) -> np.ndarray:
    """(G, 3) per-rank [collective bytes, index bytes sent, index bytes received] of a row-wise
    pattern (``{"dim", "index_counts"}``; None or empty: zeros)."""
    g = world_size
    out = np.zeros((g, 3))
    if not rowwise:
        return out
    b = -(-batch_size // g)
    out[:, 0] = g * b * rowwise.get("dim", 0) * bytes_per_value
    counts = np.asarray(rowwise.get("index_counts") or np.zeros((g, g)), dtype=float)
    if counts.size:
        off = counts * (1 - np.eye(g))
        out[:, 1] = off.sum(axis=1) * INDEX_BYTES
        out[:, 2] = off.sum(axis=0) * INDEX_BYTES
    return out


class RowWiseComm(AnalyticComm):
    """All-to-all plus row-wise collectives per rank (module docstring). ``fit`` sets
    ``coef_fw_`` (9,), ``coef_bw_`` (6,) and ``profile_``; ``predict(dim_sums, delays_ms,
    rowwise)`` -> (n, G, 2) ms with ``rowwise`` a list of n patterns (or None)."""

    KIND = "analytic_rowwise_comm"

    def _rows(self, dim_sums: Sequence[int], delays_ms: Sequence[float] | None, rowwise: Mapping[str, Any] | None,
              b: int, s: int) -> np.ndarray:
        return np.hstack([self._features(dim_sums, delays_ms, b, s), rowwise_terms(len(dim_sums), b, s, rowwise)])

    def fit(self, samples: Sequence[Mapping[str, Any]], val_samples: Sequence[Mapping[str, Any]] | None = None
            ) -> "RowWiseComm":
        """Fit on measured comm samples (JSON rows with ``rowwise``; ``val_samples`` fitted on too).
        Returns self."""
        rows = list(samples) + list(val_samples or [])
        if not rows:
            raise ShardlabError("RowWiseComm.fit: no samples")
        self._reset()
        first = rows[0]
        s = 2 if first.get("dtype") in ("float16", "torch.float16", "bfloat16", "torch.bfloat16") else 4
        self.profile_ = {"name": first.get("profile", {}).get("name") or first["provenance"]["profile"]["name"],
                         "batch_size": first["batch_size"], "bytes_per_value": s}
        b = first["batch_size"]
        x = np.concatenate([self._rows(r["dim_sums"], r["delays_ms"], r.get("rowwise"), b, s) for r in rows])
        fw = np.concatenate([r["fw_comm_ms"] for r in rows])
        bw = np.concatenate([r["bw_comm_ms"] for r in rows])
        self.coef_fw_ = nnls_relative(x, np.maximum(fw, 1e-3))
        self.coef_bw_ = nnls_relative(x[:, [0, 1, 2, 3, 4, 6]], np.maximum(bw, 1e-3))
        return self

    def predict(self, dim_sums: Any, delays_ms: Any = None, rowwise: Sequence[Mapping[str, Any] | None] | None = None,
                batch_size: int | None = None) -> np.ndarray:
        """(n, G, 2) forward and backward ms per rank."""
        self.check_fitted()
        assert self.coef_fw_ is not None and self.coef_bw_ is not None
        d = np.atleast_2d(np.asarray(dim_sums, dtype=float))
        dl = None if delays_ms is None else np.atleast_2d(np.asarray(delays_ms, dtype=float))
        b, s = self.setting("batch_size", batch_size), self.setting("bytes_per_value")
        out = np.empty(d.shape + (2,))
        for i in range(len(d)):
            x = self._rows(d[i], None if dl is None else dl[i], None if rowwise is None else rowwise[i], b, s)
            out[i, :, 0] = x @ self.coef_fw_
            out[i, :, 1] = x[:, [0, 1, 2, 3, 4, 6]] @ self.coef_bw_
        return out

    @property
    def source(self) -> str:
        """Evaluation label (analytic, linear in bytes, fitted to measured row-wise comm)."""
        return "analytic-rowwise(linear in bytes, fitted to measured row-wise comm):" + super().source
