"""Row-wise comm cost, an **analytic** model fitted to measured samples.

Per rank, forward ms = the all-to-all regressors of
:class:`~shardlab.costmodel.analytic.AnalyticComm` (1, G-1, send / receive / max-rank bytes,
waiting) plus six row-wise ones: whether the plan has a reduce-scatter (1, and G-1: a
collective's fixed cost grows with the ranks it crosses), its bytes (G x b x dim partial sums in,
b x dim out, s bytes per value; b = ceil(B / G)), whether it has an index all-to-all (G-1), and
the rank's index bytes sent and received (8 each). Backward = the all-to-all's five plus the
all-gather's fixed costs and bytes (the reduce-scatter's volume). Coefficients are non-negative
least squares on relative error (:func:`~shardlab.costmodel.analytic.nnls_relative`), fitted on
``rowcomm:<G>`` samples (:func:`shardlab.measure.campaign.run_rowwise_comm_campaign`; its wide space holds samples
without row-wise traffic from the same sitting, so the fixed costs are told apart from the
all-to-all's). Linear in bytes: it says so in its ``source``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.analytic import AnalyticComm, nnls_relative
from shardlab.costmodel.bundle import models_dir
from shardlab.errors import ShardlabError

#: Bytes per index sent in the input dist.
INDEX_BYTES = 8
#: Columns of the (G, 12) regressors the forward uses (all) and the backward uses (the
#: all-to-all's first five, the all-gather's fixed costs and bytes).
FW_COLS = list(range(12))
BW_COLS = [0, 1, 2, 3, 4, 6, 7, 8]
#: Where the row-wise regressors start.
ROWWISE_START = 6


def rowwise_terms(world_size: int, batch_size: int, bytes_per_value: int, rowwise: Mapping[str, Any] | None
                  ) -> np.ndarray:
    """(G, 6) per-rank row-wise regressors of a pattern (``{"dim", "index_counts"}``; None or
    empty: zeros): [has reduce-scatter, its G-1, collective bytes, has index all-to-all x (G-1),
    index bytes sent, index bytes received]."""
    g = world_size
    out = np.zeros((g, 6))
    if not rowwise:
        return out
    b = -(-batch_size // g)
    dim = rowwise.get("dim", 0)
    if dim:
        out[:, 0], out[:, 1], out[:, 2] = 1.0, g - 1, g * b * dim * bytes_per_value
    counts = np.asarray(rowwise.get("index_counts") or np.zeros((g, g)), dtype=float)
    if counts.size and counts.any():
        off = counts * (1 - np.eye(g))
        out[:, 3] = g - 1
        out[:, 4] = off.sum(axis=1) * INDEX_BYTES
        out[:, 5] = off.sum(axis=0) * INDEX_BYTES
    return out


class RowWiseComm(AnalyticComm):
    """All-to-all plus row-wise collectives per rank (module docstring). ``fit`` sets
    ``coef_fw_`` (12,), ``coef_bw_`` (8,) and ``profile_``; ``predict(dim_sums, delays_ms,
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
        self.coef_fw_ = nnls_relative(x[:, FW_COLS], np.maximum(fw, 1e-3))
        self.coef_bw_ = nnls_relative(x[:, BW_COLS], np.maximum(bw, 1e-3))
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
            out[i, :, 0] = x[:, FW_COLS] @ self.coef_fw_
            out[i, :, 1] = x[:, BW_COLS] @ self.coef_bw_
        return out

    def increment(self, world_size: int, rowwise: Mapping[str, Any] | None, batch_size: int | None = None
                  ) -> np.ndarray:
        """(G, 2) forward and backward ms per rank that ``rowwise``'s collectives add to an
        all-to-all (the row-wise regressors' share of :meth:`predict`; zeros for none)."""
        self.check_fitted()
        assert self.coef_fw_ is not None and self.coef_bw_ is not None
        t = rowwise_terms(world_size, self.setting("batch_size", batch_size), self.setting("bytes_per_value"), rowwise)
        bw_rw = [i for i, c in enumerate(BW_COLS) if c >= ROWWISE_START]
        return np.column_stack([t @ self.coef_fw_[ROWWISE_START:],
                                t[:, [BW_COLS[i] - ROWWISE_START for i in bw_rw]] @ self.coef_bw_[bw_rw]])

    def increment_floor_ms(self, world_size: int, dim: float) -> float | None:
        """At most the fw + bw ms that row-wise collectives of ``dim`` reduce-scattered columns
        add on any rank, whatever their index traffic (its terms only add): the
        increment of ``{"dim": dim}``. A step at 0 plus a line, so concave in ``dim`` (what
        :func:`shardlab.evaluate.model.model_bound_ms` needs). None if a coefficient is negative."""
        self.check_fitted()
        assert self.coef_fw_ is not None and self.coef_bw_ is not None
        if (self.coef_fw_ < 0).any() or (self.coef_bw_ < 0).any():
            return None
        return float(self.increment(world_size, {"dim": dim}).sum(axis=1).mean()) if world_size > 1 else 0.0

    @property
    def source(self) -> str:
        """Evaluation label (analytic, linear in bytes, fitted to measured row-wise comm)."""
        return "analytic-rowwise(linear in bytes, fitted to measured row-wise comm):" + super().source


class WithRowWise:
    """A comm model for one plan's row-wise pattern: ``base`` (the all-to-all of any dim sums)
    asked about the dim sums less ``offset`` (G,: the columns of tables split over every device,
    which leave the all-to-all; floored at 0; default none), plus ``increment`` (G, 2: fw/bw ms,
    :meth:`RowWiseComm.increment`) on every rank. ``predict(dim_sums, delays_ms)`` -> (n, G, 2) ms."""

    def __init__(self, base: Any, increment: np.ndarray, offset: np.ndarray | None = None):
        self.base = base
        self.increment = np.asarray(increment, dtype=float)
        self.offset = None if offset is None else np.asarray(offset, dtype=float)

    def predict(self, dim_sums: Any, delays_ms: Any = None) -> np.ndarray:
        """(n, G, 2) forward and backward ms per rank."""
        d = dim_sums if self.offset is None else np.maximum(
            np.atleast_2d(np.asarray(dim_sums, dtype=float)) - self.offset[None], 0.0)
        return np.asarray(self.base.predict(d, delays_ms), dtype=float) + self.increment[None]


def load_rowwise_comm(spec: Any, profile: str = "cpu", own: Any = None) -> RowWiseComm | None:
    """The row-wise comm model named by ``spec``: ``"shipped"`` (the profile's
    ``datasets/<profile>/models/analytic_rowwise_comm.json`` where it exists, else ``own`` -- a
    bundle's comm model -- where it costs row-wise collectives itself (``increment``, as the
    analytic GPU-cluster model does), else None), None
    (no row-wise model: row blocks' columns count on their devices' all-to-all), a fitted
    :class:`RowWiseComm` (returned as is), a path, or a model name in the profile's models folder."""
    if spec is None or not isinstance(spec, (str, bytes)) and not hasattr(spec, "__fspath__"):
        return spec
    named = models_dir(profile) / f"{C.ROWWISE_COMM_MODEL if spec == 'shipped' else spec}.json"
    if spec == "shipped" and not named.exists():
        return own if hasattr(own, "increment") else None
    return RowWiseComm.load(str(named if named.exists() else spec))
