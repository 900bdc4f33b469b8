"""Cost-model protocols (one per stage) and the plan simulation they feed.

A *compute model* predicts, for each device's multiset of (sub)tables, the forward and
backward time (ms) of one fused TBE op; a *comm model* predicts each rank's forward and
backward all-to-all time (ms) from the ranks' dim sums and forward start delays (ms).
Every cost model follows one convention (:class:`~shardlab.costmodel.estimator.Estimator`):
configuration in ``__init__``, never changed by ``fit``; learned state ending in ``_``;
``fit(samples, val_samples=None)`` on typed sample records (:mod:`shardlab.profile.records`)
returns ``self``; ``predict`` is pure and raises :class:`~shardlab.errors.NotFittedError`
before ``fit``. A compute model whose shard cost is a function of the SUM of per-table rows
also satisfies :class:`IncrementalComputeModel`, which search uses to cost a device's shard
table by table (and :class:`LinearHeadComputeModel` where its head starts with a linear layer).

:func:`simulate` runs the plan cost model of :mod:`shardlab.schedule` (NeuroShard's order):
compute, backward comm, :func:`~shardlab.schedule.forward_delays`, forward comm with those
delays; the plan cost is the max over devices of compute + fw comm + bw comm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from shardlab.schedule import forward_delays
from shardlab.tables import Table


@runtime_checkable
class CostModel(Protocol):
    """Every cost model: configured in ``__init__``, ``fit(samples, val_samples=None) -> self``
    on measured sample records, batched ``predict``, ``save(path)`` / ``load(path)`` (a file
    that records the training data's provenance, versions and held-out metrics)."""

    #: What it predicts: ``"compute"`` (fused-op fw/bw ms per shard) or ``"comm"`` (per-rank
    #: fw/bw all-to-all ms).
    target: str

    @property
    def source(self) -> str:
        """Label for Evaluation ``source``: ``model:<name>`` or ``analytic:<profile>``."""

    def fit(self, samples: Sequence[Any], val_samples: Sequence[Any] | None = None) -> "CostModel":
        """Fit on measured sample records (or their JSON rows); ``val_samples``: validation
        data (each model's own rule when None); returns self."""

    def predict(self, *args: Any, **kwargs: Any) -> np.ndarray:
        """Batched prediction (ms); shapes per target, see the two protocols below."""

    def save(self, path: str) -> None:
        """Write the model file atomically."""


@runtime_checkable
class ComputeModel(CostModel, Protocol):
    """``predict(shards)`` -> (n, 2) array of forward and backward ms of each shard's fused op
    (0 for an empty shard); ``shards`` is a sequence of n table multisets."""

    def predict(self, shards: Sequence[Sequence[Table]]) -> np.ndarray:  # type: ignore[override]
        """(n, 2) forward and backward ms."""


@runtime_checkable
class CommModel(CostModel, Protocol):
    """``predict(dim_sums, delays_ms)`` -> (n, G, 2) array of each rank's forward and backward
    all-to-all ms; ``dim_sums`` and ``delays_ms`` (ms, or None for no delays) are (n, G)."""

    def predict(self, dim_sums: Any, delays_ms: Any = None) -> np.ndarray:  # type: ignore[override]
        """(n, G, 2) forward and backward ms."""


@runtime_checkable
class IncrementalComputeModel(ComputeModel, Protocol):
    """A compute model whose shard cost is a function of the SUM of per-table rows, so search
    can cost a shard incrementally (add a table to a device = add its row):
    ``predict(shards)`` equals ``predict_sums`` of the summed ``embed`` rows of each shard."""

    @property
    def embed_dim(self) -> int:
        """k, the width of :meth:`embed`'s rows."""

    def embed(self, tables: Sequence[Table]) -> np.ndarray:
        """(n, k) one row per table (float64)."""

    def predict_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) forward and backward ms of m shards from their summed rows ``sums`` (m, k)
        and table counts ``counts`` (m,) (0 ms for a shard of no table)."""


@runtime_checkable
class LinearHeadComputeModel(IncrementalComputeModel, Protocol):
    """An incremental compute model whose head starts with a linear layer, so that layer can
    be applied to each table's row once instead of to every shard that might hold it: with
    ``H = head_rows(embed(tables))`` (n, h), a shard's cost is ``predict_head(sum of its H
    rows, count)``, equal (up to float64 rounding) to ``predict_sums`` of its summed ``embed``
    rows. Search uses it to cost a candidate device with one add per head unit."""

    def head_rows(self, rows: np.ndarray) -> np.ndarray:
        """(n, h) the head's first linear map (without its bias) of ``embed`` rows (n, k)."""

    def predict_head(self, pre: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) forward and backward ms of m shards from their summed :meth:`head_rows`
        ``pre`` (m, h) and table counts (m,) (0 ms for a shard of no table)."""


@dataclass(frozen=True)
class Simulated:
    """Per-device predicted costs (ms), each an array of shape (G,)."""

    fw_compute: np.ndarray
    bw_compute: np.ndarray
    fw_comm: np.ndarray
    bw_comm: np.ndarray

    @property
    def total(self) -> np.ndarray:
        """Per-device total (ms), shape (G,)."""
        return self.fw_compute + self.bw_compute + self.fw_comm + self.bw_comm

    @property
    def cost_ms(self) -> float:
        """Plan cost: the straggler's total (ms)."""
        return float(self.total.max())


def simulate(shards: Sequence[Sequence[Table]], compute: ComputeModel, comm: CommModel) -> Simulated:
    """Predicted costs of one plan given its devices' (sub)tables (module docstring)."""
    c = np.asarray(compute.predict(shards), dtype=float).reshape(len(shards), 2)
    empty = np.array([len(s) == 0 for s in shards])
    c[empty] = 0.0
    return simulate_from(c, [sum(t.dim for t in s) for s in shards], comm)


def simulate_from(compute_ms: np.ndarray, dims: Sequence[int], comm: CommModel) -> Simulated:
    """:func:`simulate` from already-predicted (G, 2) fw/bw compute ms and the G dim sums."""
    return simulate_many(np.asarray(compute_ms, dtype=float)[None], np.asarray([dims]), comm)[0]


def simulate_many(compute_ms: np.ndarray, dims: np.ndarray, comm: CommModel) -> list[Simulated]:
    """:func:`simulate_from` for n plans of the same G at once (two batched comm calls):
    ``compute_ms`` (n, G, 2) fw/bw ms, ``dims`` (n, G) dim sums. One device: no all-to-all."""
    c = np.asarray(compute_ms, dtype=float)
    d = np.asarray(dims)
    if d.shape[1] < 2:
        zero = np.zeros(d.shape[1])
        return [Simulated(c[k, :, 0], c[k, :, 1], zero, zero) for k in range(len(d))]
    bw = np.asarray(comm.predict(d, None), dtype=float)[:, :, 1]
    delays = forward_delays(c.sum(axis=2) + bw)
    fw = np.asarray(comm.predict(d, delays), dtype=float)[:, :, 0]
    return [Simulated(c[k, :, 0], c[k, :, 1], fw[k], bw[k]) for k in range(len(d))]
