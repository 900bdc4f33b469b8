"""Cost-model protocols (one per stage), the convention every cost model follows, and the plan
simulation they feed.

A *compute model* predicts, for each device's multiset of (sub)tables, the forward and
backward time (ms) of one fused TBE op; a *comm model* predicts each rank's forward and
backward all-to-all time (ms) from the ranks' dim sums and forward start delays (ms). A compute
model whose shard cost is a function of the SUM of per-table rows also satisfies
:class:`IncrementalComputeModel`, which search uses to cost a device's shard table by table
(and :class:`LinearHeadComputeModel` where its head starts with a linear layer).

**The convention** (:class:`Estimator`, analytic and neural models alike), after scikit-learn:

- configuration is the constructor's arguments, stored under the same names and never changed
  by ``fit``; :meth:`Estimator.config` reads them back, derived from ``__init__``'s signature
  (no parameter list is kept by hand), and model files store it;
- learned state ends in an underscore (``coef_fw_``, ``net_``, ``profile_`` ...), empty until
  ``fit`` or ``load``; ``profile_`` is the hardware profile of the training data (at least its
  ``name`` and ``batch_size``), ``provenance_`` and ``metrics_`` what the trainer records;
- ``fit(samples, val_samples=None) -> self`` is the one signature: typed records of
  :mod:`shardlab.measure.records` (JSON rows are accepted too and parsed once, at the top of fit);
- ``predict`` (and ``embed`` / ``predict_sums`` where a model costs incrementally) is pure and
  raises :class:`~shardlab.errors.NotFittedError` before ``fit``;
- ``save(path)`` / ``load(path)`` and the ``source`` label of Evaluations.

:func:`simulate` runs the plan cost model of :mod:`shardlab.schedule` (NeuroShard's order):
compute, backward comm, :func:`~shardlab.schedule.forward_delays`, forward comm with those
delays; the plan cost is the max over devices of compute + fw comm + bw comm.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Sequence, runtime_checkable

import numpy as np

from shardlab.errors import NotFittedError
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


class Estimator:
    """Base of every cost model (module docstring). Subclasses set ``target``, store their
    constructor arguments as attributes of the same names, call :meth:`_reset` for the learned
    state, and implement ``fitted``, ``source``, ``fit``, ``predict``, ``save`` and ``load``."""

    #: What it predicts: ``"compute"`` or ``"comm"`` (see :mod:`shardlab.costmodel.base`).
    target: ClassVar[str] = ""

    profile_: dict[str, Any]
    provenance_: dict[str, Any]
    metrics_: dict[str, Any]

    def _reset(self) -> None:
        """Learned state shared by all models, empty (subclasses add their own)."""
        self.profile_ = {}
        self.provenance_ = {}
        self.metrics_ = {}

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """Names of the constructor's arguments (the configuration), from its signature."""
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))

    def config(self) -> dict[str, Any]:
        """The configuration: every constructor argument by name (``fit`` never changes it)."""
        return {k: getattr(self, k) for k in self.param_names()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.config().items())})"

    @property
    def fitted(self) -> bool:
        """Whether the learned state is there (after ``fit`` or ``load``)."""
        raise NotImplementedError

    def check_fitted(self) -> None:
        """Raise :class:`~shardlab.errors.NotFittedError` (one line, naming the model) unless fitted."""
        if not self.fitted:
            raise NotFittedError(f"{type(self).__name__}: not fitted (call fit, or load a model file)")

    @property
    def source(self) -> str:
        """Evaluation label: ``model:<name>@<profile>[batch_size=<B>]`` or ``analytic:<profile>[...]``."""
        raise NotImplementedError

    def fit(self, samples: Sequence[Any], val_samples: Sequence[Any] | None = None) -> Any:
        """Learn from measured samples (records or rows); ``val_samples``: validation data where
        the model selects on it (else the model's own rule, see each class); returns self."""
        raise NotImplementedError

    def save(self, path: str) -> None:
        """Write the model file (configuration, learned state, provenance, metrics) atomically."""
        raise NotImplementedError

    @classmethod
    def load(cls, path: str) -> Any:
        """Read a model file written by :meth:`save` (one-line errors for a foreign file)."""
        raise NotImplementedError


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
    return simulate_from(c, [sum(t.out_dim for t in s) for s in shards], comm)


def simulate_from(compute_ms: np.ndarray, dims: Sequence[int], comm: CommModel) -> Simulated:
    """:func:`simulate` from already-predicted (G, 2) fw/bw compute ms and the G dim sums."""
    return simulate_many(np.asarray(compute_ms, dtype=float)[None], np.asarray([dims]), comm)[0]


def plan_costs(compute_ms: np.ndarray, dims: np.ndarray, comm: CommModel) -> np.ndarray:
    """(n,) each plan's :attr:`Simulated.cost_ms` as :func:`simulate_many` computes it (the same
    arithmetic, in the same order), without building n :class:`Simulated`: for searches that
    weigh thousands of candidate plans. ``compute_ms`` (n, G, 2) ms, ``dims`` (n, G)."""
    c = np.asarray(compute_ms, dtype=float)
    d = np.asarray(dims)
    if d.shape[1] < 2:
        return (c[:, :, 0] + c[:, :, 1]).max(axis=1)
    bw = np.asarray(comm.predict(d, None), dtype=float)[:, :, 1]
    delays = forward_delays(c.sum(axis=2) + bw)
    fw = np.asarray(comm.predict(d, delays), dtype=float)[:, :, 0]
    return (c[:, :, 0] + c[:, :, 1] + fw + bw).max(axis=1)


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
