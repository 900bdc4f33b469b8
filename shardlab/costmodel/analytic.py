"""Analytic cost models (TorchRec-style bandwidth models), labelled ``analytic:<profile>``.

These are *analytic*: costs are bytes moved divided by a bandwidth plus fixed overheads, in
the shape of TorchRec's EmbeddingPerfEstimator (TORCHREC_PLANNER.md section 2). Instead of
TorchRec's hard-coded bandwidths, the few constants are fitted to measured samples by
non-negative least squares on relative error, so each constant keeps its physical meaning
(ms per byte, ms per call, ms per table). Per table (global batch B, pooling L, dim D, s bytes
per weight):

- read = 8 B L (int64 ids), lookup = B L max(D, 32) s, write = B D s (pooled output);
  TorchRec's block penalty p(D) = 1 (D >= 128), 1.15 (64 <= D < 128), 1.75 (D < 64);
- forward  = c_call + c_table * T + k_f * sum p(D) (read + lookup + write);
- backward = c_call' + c_table' * T + k_b * sum p(D) (read + lookup + write) + k_u * sum U D s,
  where U = min(rows, B L / m) are the rows touched and m the mean accesses per touched row
  from the reuse bins (an addition to TorchRec: backward follows the rows touched).

Comm, per rank g of G (dim sums d, delays delta, s bytes per value):
  bw_g = c0 + c_peer (G-1) + k_send B d_g s (G-1)/G + k_recv B sum(d) s (G-1)/G^2 + k_max B max(d) s / G;
  fw_g = the same terms fitted separately + k_wait (max(delta) - delta_g): a collective ends
  after the last rank arrives, so waiting is part of the forward cost.
Bytes scale with the batch size, so these models extrapolate to other batches and to G no
machine here can run -- which is what they are for; they are additive across tables, which the
measured fused costs are not.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.io import read_json, write_json_atomic
from shardlab.tables import Table

FORMAT = "shardlab-analytic-v1"

#: Access count standing for each reuse bin: 1 for bin 0, the middle of (2^(i-1), 2^i] else.
BIN_ACCESSES = np.array([1.0] + [0.75 * 2.0**i for i in range(1, C.N_REUSE_BINS)])


def block_penalty(dim: int) -> float:
    """TorchRec's narrow-dim penalty on TW lookups (unitless)."""
    return 1.0 if dim >= 128 else (1.15 if dim >= 64 else 1.75)


def touched_rows(table: Table, batch_size: int) -> float:
    """Expected distinct rows touched in one batch: min(rows, B L / mean accesses per row)."""
    mean_accesses = float(np.dot(np.asarray(table.reuse_bins), BIN_ACCESSES))
    return min(float(table.rows), batch_size * table.pooling_factor / max(mean_accesses, 1.0))


def nnls_relative(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising sum ((x @ w - y) / y)^2 (x: (n, k), y: (n,) > 0);
    active-set: drop the most negative coefficient and re-solve until none is negative."""
    xs = x / y[:, None]
    active = list(range(x.shape[1]))
    w = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(xs[:, active], np.ones(len(y)), rcond=None)
        if (sol >= 0).all():
            w[:] = 0.0
            w[active] = sol
            return w
        active.pop(int(np.argmin(sol)))
    return w


class _AnalyticModel:
    """Shared parameters, (de)serialisation and file I/O of the analytic models: the constructor
    arguments named in ``CONFIG`` plus the fitted ``coef_fw_`` / ``coef_bw_``."""

    KIND = ""
    CONFIG: tuple[str, ...] = ()
    coef_fw_: np.ndarray | None
    coef_bw_: np.ndarray | None

    def _unfitted(self) -> None:
        self.coef_fw_ = None
        self.coef_bw_ = None
        self.provenance_: dict[str, Any] = {}
        self.metrics_: dict[str, Any] = {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        return {"kind": self.KIND, **{k: getattr(self, k) for k in self.CONFIG},
                "coef_fw": None if self.coef_fw_ is None else self.coef_fw_.tolist(),
                "coef_bw": None if self.coef_bw_ is None else self.coef_bw_.tolist()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Any:
        """Inverse of :meth:`to_dict`."""
        m = cls(*(d[k] for k in cls.CONFIG))
        m.coef_fw_ = None if d["coef_fw"] is None else np.array(d["coef_fw"])
        m.coef_bw_ = None if d["coef_bw"] is None else np.array(d["coef_bw"])
        return m

    def save(self, path: str) -> None:
        """See :func:`save_analytic`."""
        save_analytic(self, path)

    @classmethod
    def load(cls, path: str) -> Any:
        """See :func:`load_analytic`; the file must hold this class's model."""
        m = load_analytic(path)
        if not isinstance(m, cls):
            raise ShardlabError(f"analytic model '{path}': holds a {m.target} model, not a {cls.target} model")
        return m


class AnalyticCompute(_AnalyticModel):
    """TorchRec-style fused-op compute model (module docstring); ``fit`` sets ``coef_fw_``
    (3,) and ``coef_bw_`` (4,) and the batch size and precision it was fitted at."""

    target = "compute"
    KIND = "analytic_compute"
    CONFIG = ("batch_size", "weights_precision", "profile")

    def __init__(self, batch_size: int | None = None, weights_precision: str = "fp32", profile: str = "cpu"):
        self.batch_size = batch_size
        self.weights_precision = weights_precision
        self.profile = profile
        self._unfitted()

    @property
    def source(self) -> str:
        """Evaluation label."""
        return f"analytic:{self.profile}[batch_size={self.batch_size}]"

    def features(self, shard: Sequence[Table], batch_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Forward (3,) and backward (4,) regressors of one shard: [1, T, bytes] and
        [1, T, bytes, touched-row bytes]."""
        b = batch_size or self.batch_size
        if b is None:
            raise ValueError("AnalyticCompute: field 'batch_size' is unset (fit first or pass it)")
        s = C.BYTES_PER_WEIGHT[self.weights_precision]
        moved = sum(block_penalty(t.dim) * (8 * b * t.pooling_factor + b * t.pooling_factor * max(t.dim, 32) * s
                                            + b * t.dim * s) for t in shard)
        touched = sum(touched_rows(t, b) * t.dim * s for t in shard)
        return np.array([1.0, len(shard), moved]), np.array([1.0, len(shard), moved, touched])

    def embed(self, tables: Sequence[Table], batch_size: int | None = None) -> np.ndarray:
        """(n, 3) per-table terms [1, moved bytes, touched-row bytes]; a shard's cost is a
        function of their SUM (see :meth:`predict_sums`)."""
        rows = [self.features([t], batch_size) for t in tables]
        return np.array([[1.0, f[2], b[3]] for f, b in rows]).reshape(len(tables), 3)

    embed_dim = 3

    def predict_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) fw/bw ms from summed :meth:`embed` rows (m, 3) and table counts (m,)."""
        if self.coef_fw_ is None or self.coef_bw_ is None:
            raise ValueError("AnalyticCompute: not fitted")
        s = np.atleast_2d(np.asarray(sums, dtype=float))
        nonempty = (np.asarray(counts) > 0).astype(float)
        fw = self.coef_fw_[0] * nonempty + self.coef_fw_[1] * s[:, 0] + self.coef_fw_[2] * s[:, 1]
        bw = (self.coef_bw_[0] * nonempty + self.coef_bw_[1] * s[:, 0] + self.coef_bw_[2] * s[:, 1]
              + self.coef_bw_[3] * s[:, 2])
        return np.stack([fw, bw], axis=1)

    def fit(self, samples: Sequence[Mapping[str, Any]]) -> "AnalyticCompute":
        """Fit on measured compute samples (all at one batch size and precision)."""
        if not samples:
            raise ValueError("AnalyticCompute.fit: no samples")
        prof = samples[0]["profile"]
        self.batch_size = int(prof["batch_size"])
        self.weights_precision = prof["weights_precision"]
        self.profile = prof["name"]
        rows = [self.features([Table.from_dict(t) for t in s["tables"]]) for s in samples]
        self.coef_fw_ = nnls_relative(np.array([r[0] for r in rows]), np.array([s["fw_ms"] for s in samples]))
        self.coef_bw_ = nnls_relative(np.array([r[1] for r in rows]), np.array([s["bw_ms"] for s in samples]))
        return self

    def predict(self, shards: Sequence[Sequence[Table]], batch_size: int | None = None) -> np.ndarray:
        """(n, 2) forward and backward ms per shard (0 for an empty shard)."""
        if self.coef_fw_ is None or self.coef_bw_ is None:
            raise ValueError("AnalyticCompute: not fitted")
        out = np.zeros((len(shards), 2))
        for i, shard in enumerate(shards):
            if shard:
                f, b = self.features(shard, batch_size)
                out[i] = (f @ self.coef_fw_, b @ self.coef_bw_)
        return out


class AnalyticComm(_AnalyticModel):
    """Bandwidth + latency + waiting all-to-all model for any G (module docstring)."""

    target = "comm"
    KIND = "analytic_comm"
    CONFIG = ("batch_size", "bytes_per_value", "profile")

    def __init__(self, batch_size: int | None = None, bytes_per_value: int = 4, profile: str = "cpu"):
        self.batch_size = batch_size
        self.bytes_per_value = bytes_per_value
        self.profile = profile
        self._unfitted()

    @property
    def source(self) -> str:
        """Evaluation label."""
        return f"analytic:{self.profile}[batch_size={self.batch_size}]"

    def features(self, dim_sums: Sequence[int], delays_ms: Sequence[float] | None,
                 batch_size: int | None = None) -> np.ndarray:
        """(G, 6) regressors: [1, G-1, send bytes, receive bytes, max-rank bytes, waiting ms]."""
        b = batch_size or self.batch_size
        if b is None:
            raise ValueError("AnalyticComm: field 'batch_size' is unset (fit first or pass it)")
        d = np.asarray(dim_sums, dtype=float)
        g = len(d)
        s = self.bytes_per_value
        delays = np.zeros(g) if delays_ms is None else np.asarray(delays_ms, dtype=float)
        x = np.empty((g, 6))
        x[:, 0] = 1.0
        x[:, 1] = g - 1
        x[:, 2] = b * d * s * (g - 1) / g
        x[:, 3] = b * d.sum() * s * (g - 1) / g**2
        x[:, 4] = b * d.max() * s / g
        x[:, 5] = delays.max() - delays
        return x

    def fit(self, samples: Sequence[Mapping[str, Any]]) -> "AnalyticComm":
        """Fit on measured comm samples (any mix of G, one batch size)."""
        if not samples:
            raise ValueError("AnalyticComm.fit: no samples")
        self.batch_size = int(samples[0]["batch_size"])
        x = np.concatenate([self.features(s["dim_sums"], s["delays_ms"]) for s in samples])
        fw = np.concatenate([s["fw_comm_ms"] for s in samples])
        bw = np.concatenate([s["bw_comm_ms"] for s in samples])
        self.coef_fw_ = nnls_relative(x, np.maximum(fw, 1e-3))
        self.coef_bw_ = nnls_relative(x[:, :5], np.maximum(bw, 1e-3))
        return self

    def predict(self, dim_sums: Any, delays_ms: Any = None, batch_size: int | None = None) -> np.ndarray:
        """(n, G, 2) forward and backward ms per rank; ``dim_sums`` and ``delays_ms`` (ms, or
        None) are (n, G)."""
        if self.coef_fw_ is None or self.coef_bw_ is None:
            raise ValueError("AnalyticComm: not fitted")
        d = np.atleast_2d(np.asarray(dim_sums, dtype=float))
        dl = None if delays_ms is None else np.atleast_2d(np.asarray(delays_ms, dtype=float))
        out = np.empty(d.shape + (2,))
        for i in range(len(d)):
            x = self.features(d[i], None if dl is None else dl[i], batch_size)
            out[i, :, 0] = x @ self.coef_fw_
            out[i, :, 1] = x[:, :5] @ self.coef_bw_
        return out


def save_analytic(model: _AnalyticModel, path: str) -> None:
    """Write an analytic model as JSON (parameters, provenance, held-out metrics), atomically."""
    write_json_atomic(path, {"format": FORMAT, "model": model.to_dict(), "provenance": model.provenance_,
                             "metrics": model.metrics_})


def load_analytic(path: str) -> Any:
    """Read a file written by :func:`save_analytic`."""
    d = read_json(path)
    if d.get("format") != FORMAT:
        raise ShardlabError(f"analytic model '{path}': field 'format' must be '{FORMAT}'")
    kind = d["model"].get("kind")
    cls = {"analytic_compute": AnalyticCompute, "analytic_comm": AnalyticComm}.get(kind)
    if cls is None:
        raise ShardlabError(f"analytic model '{path}': field 'kind' {kind!r} is unknown")
    m = cls.from_dict(d["model"])
    m.provenance_, m.metrics_ = d.get("provenance", {}), d.get("metrics", {})
    return m
