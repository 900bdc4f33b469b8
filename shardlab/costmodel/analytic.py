"""Analytic cost models (TorchRec-style bandwidth models), labelled ``analytic:<profile>``.

These are *analytic*: costs are bytes moved divided by a bandwidth plus fixed overheads, in
the shape of TorchRec's planner estimator (``EmbeddingPerfEstimator``). Instead of
TorchRec's hard-coded bandwidths, the few constants are fitted to measured samples by
non-negative least squares on relative error, so each constant keeps its physical meaning
(ms per byte, ms per call, ms per table). Per table (global batch B, pooling L, dim D, s bytes
per weight):

- read = 8 B L (int64 ids), lookup = B L max(D, 32) s, write = B D s (pooled output; a sequence
  table writes every looked-up row, B L D s -- an extrapolation, the constants being fitted to
  pooled ops);
  TorchRec's block penalty p(D) = 1 (D >= 128), 1.15 (64 <= D < 128), 1.75 (D < 64);
- forward  = c_call + c_table * T + k_f * sum p(D) (read + lookup + write) [+ an offloaded
  table's host-link ms, :mod:`shardlab.costmodel.offload`: not fitted, added to fw and bw];
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

**Floors** (what the lower bound of :mod:`shardlab.evaluate.model` is made of; every coefficient
is >= 0, which non-negative least squares guarantees and the floors check):

- :meth:`AnalyticCompute.floor_ms`: (c_call, R) such that the fw + bw ms summed over the n
  devices that hold blocks in ANY plan of the tables -- whole tables, column blocks, row blocks
  or a mix -- is at least n c_call + R. R: per table c_table once (every table has a block), and the byte
  terms of each table whole at dim D, with two stand-ins for what a plan's blocks could show less
  of: L' = min(L, L0) lookups per sample, L0 the table's lookups on the batch its row blocks are
  measured on (batch 0 at the task's batch size; the blocks' lookups add up to it), and touched
  rows min(U, kappa U0), U the whole table's touched rows, U0 the distinct rows that batch
  touches and kappa = min(1, B / B_task x rho), rho the smallest access count / bin access over
  those rows (the model's touched-row estimate of any row block is >= kappa x its distinct rows).
  Offloaded tables' host-link ms (>= 0) are left out: the floor stays a floor.
  Valid because every term is non-negative and, per row, the blocks holding it split the D
  columns: a block of c columns pays p(c) >= p(D) (the penalty falls with dim),
  sum max(c, 32) >= max(D, 32) and sum c = D.
- :meth:`AnalyticComm.floor_ms`: at most the MEAN fw + bw ms over any ranks that include every
  rank with a positive dim sum, for any dim sums adding up to >= D and any delays: a rank's cost
  is terms every rank shares (received bytes and the largest rank's grow with the sum and
  max(d) >= D / G), its sent bytes (>= 0, and the mean over such ranks of d_g is >= D / G) and
  waiting (>= 0); so the prediction at dim sums D / G each, no delays. Affine in D.
- :meth:`RowWiseComm.increment_floor_ms`: the row-wise collectives of d reduce-scattered
  columns without their index traffic (which only adds). A step at 0 plus a line: concave in d.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.base import Estimator
from shardlab.costmodel.offload import offload_ms
from shardlab.data.features import reuse_bin_of_counts
from shardlab.data.fit_lookups import fit_table_lookups
from shardlab.data.lookups import table_lookups
from shardlab.errors import NotFittedError, ShardlabError
from shardlab.io import read_json, write_json_atomic
from shardlab.measure.records import CommRecord, ComputeRecord, as_comm_records, as_compute_records
from shardlab.tables import Table

FORMAT = "shardlab-analytic-v1"

#: Access count standing for each reuse bin: 1 for bin 0, the middle of (2^(i-1), 2^i] else.
BIN_ACCESSES = np.array([1.0] + [0.75 * 2.0**i for i in range(1, C.N_REUSE_BINS)])


@lru_cache(maxsize=8192)
def row_block_batch(table: Table, batch_size: int) -> tuple[float, int, float] | None:
    """What any row block of ``table`` is measured on (:func:`shardlab.data.lookups.row_block_table`:
    batch 0 of ``batch_size`` samples of its lookups, fitted first where it has none), as
    (L0 lookups per sample, U0 distinct rows touched, rho = the smallest access count /
    ``BIN_ACCESSES`` of its bin over those rows, 1 when none). None when the table has no such
    lookups (then no plan can split it by rows). Cached per table and batch size."""
    try:
        idx, _ = table_lookups(fit_table_lookups(table, batch_size), batch_size, 0)
    except ShardlabError:
        return None
    if idx.size == 0:
        return 0.0, 0, 1.0
    if int(idx.max()) < 4 * idx.size + 65536:     # as reuse_histograms: bincount where rows allow
        counts = np.bincount(idx)
        counts = counts[counts > 0]
    else:
        counts = np.unique(idx, return_counts=True)[1]
    rho = float(np.min(counts / BIN_ACCESSES[reuse_bin_of_counts(counts)]))
    return idx.size / batch_size, int(counts.size), rho


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


class AnalyticModel(Estimator):
    """Shared settings, (de)serialisation and file I/O of the analytic models.

    Configuration: what predictions assume, each None by default = as in the training data
    (extrapolating to another batch size is what these models are for). Learned: ``coef_fw_`` /
    ``coef_bw_`` and ``profile_``, the training data's profile name and its value of every
    setting (``profile_["batch_size"]`` ...), which ``fit`` reads from the samples."""

    KIND: ClassVar[str] = ""
    batch_size: int | None
    coef_fw_: np.ndarray | None
    coef_bw_: np.ndarray | None

    def _reset(self) -> None:
        super()._reset()
        self.coef_fw_ = None
        self.coef_bw_ = None

    @property
    def fitted(self) -> bool:
        """Whether the coefficients are there."""
        return self.coef_fw_ is not None and self.coef_bw_ is not None

    def setting(self, name: str, given: Any = None) -> Any:
        """The value of setting ``name`` a prediction uses: ``given`` if not None, else the
        configured one, else the training data's (:class:`~shardlab.errors.NotFittedError`
        if there is none yet)."""
        for value in (given, getattr(self, name), self.profile_.get(name)):
            if value is not None:
                return value
        self.check_fitted()
        raise NotFittedError(f"{type(self).__name__}: field '{name}' is unset (fit first or pass it)")

    @property
    def source(self) -> str:
        """Evaluation label: ``analytic:<profile>[batch_size=<B>]``; a model derived from another
        profile's fit and public figures (``profile_["derived"]``, nothing measured on its
        hardware) says so inside the brackets."""
        batch = self.batch_size if self.batch_size is not None else self.profile_.get("batch_size")
        derived = self.profile_.get("derived")
        return f"analytic:{self.profile_.get('name', '?')}[batch_size={batch}{f'; {derived}' if derived else ''}]"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready model: the training data's profile name and settings (the fields of the
        ``shardlab-analytic-v1`` format), the configuration and the coefficients."""
        return {"kind": self.KIND, "profile": self.profile_.get("name"),
                **{k: self.profile_.get(k) for k in self.param_names()}, "config": self.config(),
                **({"derived": self.profile_["derived"]} if self.profile_.get("derived") else {}),
                "coef_fw": None if self.coef_fw_ is None else self.coef_fw_.tolist(),
                "coef_bw": None if self.coef_bw_ is None else self.coef_bw_.tolist()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Any:
        """Inverse of :meth:`to_dict`; files written before the ``config`` field load with the
        default configuration (their settings are the training data's, as always)."""
        config = d.get("config", {})
        unknown = sorted(set(config) - set(cls.param_names())) if isinstance(config, Mapping) else ["config"]
        if unknown:
            raise ShardlabError(f"{cls.__name__}: field 'config.{unknown[0]}' is not a parameter")
        m = cls(**config)
        m.profile_ = {"name": d["profile"], **{k: d[k] for k in cls.param_names() if k in d},
                      **({"derived": str(d["derived"])} if d.get("derived") else {})}
        m.coef_fw_ = None if d["coef_fw"] is None else np.array(d["coef_fw"])
        m.coef_bw_ = None if d["coef_bw"] is None else np.array(d["coef_bw"])
        return m

    def save(self, path: str) -> None:
        """See :func:`save_analytic`."""
        save_analytic(self, path)

    @classmethod
    def load(cls, path: str) -> Any:
        """Read a file written by :meth:`save`; it must hold a model of this class's ``KIND``
        (one-line error naming the field otherwise)."""
        d = read_json(path)
        if d.get("format") != FORMAT:
            raise ShardlabError(f"analytic model '{path}': field 'format' must be '{FORMAT}'")
        kind = d["model"].get("kind") if isinstance(d.get("model"), Mapping) else None
        if kind != cls.KIND:
            raise ShardlabError(f"analytic model '{path}': field 'kind' = {kind!r}, but {cls.__name__} "
                                f"reads '{cls.KIND}'")
        try:
            m = cls.from_dict(d["model"])
        except ShardlabError as e:
            raise ShardlabError(f"analytic model '{path}': {e}") from None
        m.provenance_, m.metrics_ = d.get("provenance", {}), d.get("metrics", {})
        return m


class AnalyticCompute(AnalyticModel):
    """TorchRec-style fused-op compute model (module docstring); ``fit`` sets ``coef_fw_``
    (3,) and ``coef_bw_`` (4,) and ``profile_`` (name, batch size and weight precision of the
    samples). ``batch_size`` (samples per step) and ``weights_precision`` (``fp32`` / ``fp16``):
    what predictions assume, None (default) = the training data's."""

    target = "compute"
    KIND = "analytic_compute"

    def __init__(self, batch_size: int | None = None, weights_precision: str | None = None):
        self.batch_size = batch_size
        self.weights_precision = weights_precision
        self._reset()

    def offload(self, tables: Sequence[Table], batch_size: int | None = None) -> np.ndarray:
        """(n, 2) fw/bw ms of each table's host-link traffic (:mod:`shardlab.costmodel.offload`;
        0 for a table in HBM), at ``batch_size`` (default: :meth:`setting`). Not fitted: added."""
        b, s = self.setting("batch_size", batch_size), C.BYTES_PER_WEIGHT[self.setting("weights_precision")]
        return np.array([offload_ms(t, b, s, touched_rows(t, b)) for t in tables], dtype=float).reshape(len(tables), 2)

    @staticmethod
    def _features(shard: Sequence[Table], b: int, precision: str) -> tuple[np.ndarray, np.ndarray]:
        s = C.BYTES_PER_WEIGHT[precision]
        moved = sum(block_penalty(t.dim) * (8 * b * t.pooling_factor + b * t.pooling_factor * max(t.dim, 32) * s
                                            + b * t.out_dim * s) for t in shard)
        touched = sum(touched_rows(t, b) * t.dim * s for t in shard)
        return np.array([1.0, len(shard), moved]), np.array([1.0, len(shard), moved, touched])

    def features(self, shard: Sequence[Table], batch_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Forward (3,) and backward (4,) regressors of one shard: [1, T, bytes] and
        [1, T, bytes, touched-row bytes], at ``batch_size`` (default: :meth:`setting`)."""
        return self._features(shard, self.setting("batch_size", batch_size), self.setting("weights_precision"))

    def embed(self, tables: Sequence[Table], batch_size: int | None = None) -> np.ndarray:
        """(n, 5) per-table terms [1, moved bytes, touched-row bytes, offload fw ms, offload bw
        ms]; a shard's cost is a function of their SUM (see :meth:`predict_sums`)."""
        self.check_fitted()
        rows = [self.features([t], batch_size) for t in tables]
        terms = np.array([[1.0, f[2], b[3]] for f, b in rows]).reshape(len(tables), 3)
        return np.concatenate([terms, self.offload(tables, batch_size)], axis=1)

    embed_dim = 5

    def predict_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) fw/bw ms from summed :meth:`embed` rows (m, 5) and table counts (m,)."""
        self.check_fitted()
        assert self.coef_fw_ is not None and self.coef_bw_ is not None
        s = np.atleast_2d(np.asarray(sums, dtype=float))
        nonempty = (np.asarray(counts) > 0).astype(float)
        fw = self.coef_fw_[0] * nonempty + self.coef_fw_[1] * s[:, 0] + self.coef_fw_[2] * s[:, 1]
        bw = (self.coef_bw_[0] * nonempty + self.coef_bw_[1] * s[:, 0] + self.coef_bw_[2] * s[:, 1]
              + self.coef_bw_[3] * s[:, 2])
        return np.stack([fw, bw], axis=1) + s[:, 3:5]

    def fit(self, samples: Sequence[ComputeRecord | Mapping[str, Any]],
            val_samples: Sequence[ComputeRecord | Mapping[str, Any]] | None = None) -> "AnalyticCompute":
        """Fit on measured compute samples (all at one batch size and precision: the first
        sample's profile). Nothing is selected on validation data, so ``val_samples`` (if
        given) are fitted on too. Returns self."""
        records = as_compute_records(list(samples) + list(val_samples or []), "AnalyticCompute.fit")
        if not records:
            raise ShardlabError("AnalyticCompute.fit: no samples")
        prof = records[0].profile
        self._reset()
        self.profile_ = {"name": prof["name"], "batch_size": int(prof["batch_size"]),
                         "weights_precision": prof["weights_precision"]}
        rows = [self._features(r.tables, self.profile_["batch_size"], self.profile_["weights_precision"])
                for r in records]
        self.coef_fw_ = nnls_relative(np.array([r[0] for r in rows]), np.array([r.fw_ms for r in records]))
        self.coef_bw_ = nnls_relative(np.array([r[1] for r in rows]), np.array([r.bw_ms for r in records]))
        return self

    def predict(self, shards: Sequence[Sequence[Table]], batch_size: int | None = None) -> np.ndarray:
        """(n, 2) forward and backward ms per shard (0 for an empty shard), offloaded tables'
        host-link traffic included."""
        self.check_fitted()
        out = np.zeros((len(shards), 2))
        for i, shard in enumerate(shards):
            if shard:
                f, b = self.features(shard, batch_size)
                out[i] = np.array([f @ self.coef_fw_, b @ self.coef_bw_]) + self.offload(shard, batch_size).sum(axis=0)
        return out

    def floor_ms(self, tables: Sequence[Table], lookup_batch: int) -> tuple[float, float] | None:
        """(per-op ms, rest ms): the fw + bw ms summed over the n devices holding blocks of any
        plan of ``tables`` (whole, column blocks, row blocks measured at ``lookup_batch``
        samples -- the task's batch size -- or a mix) is at least n x per-op + rest (module
        docstring, "Floors"); None if a coefficient is negative."""
        self.check_fitted()
        assert self.coef_fw_ is not None and self.coef_bw_ is not None
        cf, cb = self.coef_fw_, self.coef_bw_
        if (cf < 0).any() or (cb < 0).any():
            return None
        if not tables:
            return 0.0, 0.0
        b, s = self.setting("batch_size"), C.BYTES_PER_WEIGHT[self.setting("weights_precision")]
        total = (cf[1] + cb[1]) * len(tables)
        for t in tables:
            seen = row_block_batch(t, int(lookup_batch))
            lookups, touched = t.pooling_factor, touched_rows(t, b)
            if seen is not None:
                l0, u0, rho = seen
                lookups, touched = min(lookups, l0), min(touched, min(1.0, b / lookup_batch * rho) * u0)
            moved = block_penalty(t.dim) * (b * lookups * (8 + max(t.dim, 32) * s) + b * t.out_dim * s)
            total += (cf[2] + cb[2]) * moved + cb[3] * touched * t.dim * s
        return float(cf[0] + cb[0]), float(total)


class AnalyticComm(AnalyticModel):
    """Bandwidth + latency + waiting all-to-all model for any G (module docstring); ``fit``
    sets ``coef_fw_`` (6,), ``coef_bw_`` (5,) and ``profile_`` (name, batch size and bytes per
    value of the samples). ``batch_size`` and ``bytes_per_value``: what predictions assume,
    None (default) = the training data's."""

    target = "comm"
    KIND = "analytic_comm"

    def __init__(self, batch_size: int | None = None, bytes_per_value: int | None = None):
        self.batch_size = batch_size
        self.bytes_per_value = bytes_per_value
        self._reset()

    @staticmethod
    def _features(dim_sums: Sequence[int], delays_ms: Sequence[float] | None, b: int, s: int) -> np.ndarray:
        d = np.asarray(dim_sums, dtype=float)
        g = len(d)
        delays = np.zeros(g) if delays_ms is None else np.asarray(delays_ms, dtype=float)
        x = np.empty((g, 6))
        x[:, 0] = 1.0
        x[:, 1] = g - 1
        x[:, 2] = b * d * s * (g - 1) / g
        x[:, 3] = b * d.sum() * s * (g - 1) / g**2
        x[:, 4] = b * d.max() * s / g
        x[:, 5] = delays.max() - delays
        return x

    def features(self, dim_sums: Sequence[int], delays_ms: Sequence[float] | None,
                 batch_size: int | None = None) -> np.ndarray:
        """(G, 6) regressors: [1, G-1, send bytes, receive bytes, max-rank bytes, waiting ms]."""
        return self._features(dim_sums, delays_ms, self.setting("batch_size", batch_size),
                              self.setting("bytes_per_value"))

    def fit(self, samples: Sequence[CommRecord | Mapping[str, Any]],
            val_samples: Sequence[CommRecord | Mapping[str, Any]] | None = None) -> "AnalyticComm":
        """Fit on measured comm samples (any mix of G, one batch size and element type: the
        first sample's); ``val_samples`` (if given) are fitted on too. Returns self."""
        records = as_comm_records(list(samples) + list(val_samples or []), "AnalyticComm.fit")
        if not records:
            raise ShardlabError("AnalyticComm.fit: no samples")
        first = records[0]
        self._reset()
        self.profile_ = {"name": first.profile.get("name", "?"), "batch_size": first.batch_size,
                         "bytes_per_value": first.bytes_per_value}
        b, s = first.batch_size, first.bytes_per_value
        x = np.concatenate([self._features(r.dim_sums, r.delays_ms, b, s) for r in records])
        fw = np.concatenate([r.fw_comm_ms for r in records])
        bw = np.concatenate([r.bw_comm_ms for r in records])
        self.coef_fw_ = nnls_relative(x, np.maximum(fw, 1e-3))
        self.coef_bw_ = nnls_relative(x[:, :5], np.maximum(bw, 1e-3))
        return self

    def predict(self, dim_sums: Any, delays_ms: Any = None, batch_size: int | None = None) -> np.ndarray:
        """(n, G, 2) forward and backward ms per rank; ``dim_sums`` and ``delays_ms`` (ms, or
        None) are (n, G)."""
        self.check_fitted()
        assert self.coef_fw_ is not None and self.coef_bw_ is not None
        d = np.atleast_2d(np.asarray(dim_sums, dtype=float))
        dl = None if delays_ms is None else np.atleast_2d(np.asarray(delays_ms, dtype=float))
        out = np.empty(d.shape + (2,))
        for i in range(len(d)):
            x = self.features(d[i], None if dl is None else dl[i], batch_size)
            out[i, :, 0] = x @ self.coef_fw_
            out[i, :, 1] = x[:, :5] @ self.coef_bw_
        return out

    def floor_ms(self, ngpu: int, total_dim: float) -> float | None:
        """At most the mean fw + bw all-to-all ms over any of the ``ngpu`` ranks that include every
        rank with a positive dim sum, for any dim sums adding up to >= ``total_dim`` and any
        delays (module docstring, "Floors"): the prediction at
        ``total_dim / ngpu`` on every rank, no delays; affine in ``total_dim``. 0 for one device;
        None if a coefficient is negative."""
        self.check_fitted()
        assert self.coef_fw_ is not None and self.coef_bw_ is not None
        if (self.coef_fw_ < 0).any() or (self.coef_bw_ < 0).any():
            return None
        if ngpu < 2:
            return 0.0
        return float(self.predict(np.full((1, ngpu), total_dim / ngpu), None)[0].sum(axis=1).mean())


def save_analytic(model: AnalyticModel, path: str) -> None:
    """Write an analytic model as JSON (parameters, provenance, held-out metrics), atomically."""
    write_json_atomic(path, {"format": FORMAT, "model": model.to_dict(), "provenance": model.provenance_,
                             "metrics": model.metrics_})
