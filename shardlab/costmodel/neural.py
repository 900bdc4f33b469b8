"""Neural cost models trained on measured samples (``docs/methods.md``: NeuroShard, AutoShard).

- :class:`NeuroShardCompute`: per-table MLP (21 -> 128 -> 32, ReLU), SUM over a shard's
  tables, head MLP (32 -> 64 -> 2) predicting the fused op's forward and backward ms. The seed
  predicts the total with one output; two outputs cost 65 parameters more and give the
  Evaluation its fw/bw split (total = their sum). ``AutoShardCompute`` is the same network
  (AutoShard's cost model has this shape), trained online in its RL loop.
- :class:`NeuroShardComm`: for each device count G, a backward model (G dim sums -> G costs)
  and a forward model ([G dim sums, G delays] -> G costs), MLPs with hidden 128, 64, 32, 16.

Training follows the seeds: MSE, Adam 1e-3, batch 512, keep the epoch with the best validation
loss. With ``rank_weight`` > 0 a compute model adds that weight times a pairwise ranking loss
(:func:`pair_rank_loss`: the shards of a mini-batch ordered by measured cost) to the MSE. Targets are divided by a stored scale (ms) and, with ``log_target=True`` (default),
trained as log(1 + ms / scale): measured costs span three decades, and plain MSE on ms
fits the large shards at the expense of relative error on the small ones (a choice the seeds
leave open; both are available). Same seed -> same weights (CPU, deterministic algorithms).
Model files are ``torch.save`` dicts with config, weights, feature normalisation, training
history, provenance and metrics. The training loop, target scaling and model file are shared
with the other neural models in :mod:`shardlab.costmodel.neural_base`; ``fit`` takes the typed
records of :mod:`shardlab.measure.records` (or their JSON rows).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from shardlab import constants as C
from shardlab.costmodel.metrics import split_samples
from shardlab.costmodel.neural_base import NeuralEstimator, mlp, seeded
from shardlab.data.features import FeatureScaler
from shardlab.errors import ShardlabError
from shardlab.measure.records import ComputeRecord, as_compute_records
from shardlab.tables import Table

__all__ = ["AutoShardCompute", "IndexedShards", "NeuroShardCompute", "ShardNet", "mlp", "pair_rank_loss", "seeded"]


class ShardNet(nn.Module):
    """Table encoder + sum per shard + head. ``forward(x, seg, n)``: x (T, 21) standardised
    table features, seg (T,) shard index of each table, n shards -> (n, outputs)."""

    def __init__(self, encoder: Sequence[int] = (C.N_TABLE_FEATURES, 128, 32), head: Sequence[int] = (32, 64, 2)):
        super().__init__()
        self.encoder = mlp(encoder, last_relu=True)
        self.head = mlp(head)

    def encode(self, x: torch.Tensor, seg: torch.Tensor, n: int) -> torch.Tensor:
        """(n, 32) summed table encodings per shard."""
        z = self.encoder(x)
        return torch.zeros(n, z.shape[1], dtype=z.dtype).index_add_(0, seg, z)

    def forward(self, x: torch.Tensor, seg: torch.Tensor, n: int) -> torch.Tensor:
        return self.head(self.encode(x, seg, n))

    def forward_indexed(self, unique: torch.Tensor, ids: torch.Tensor, seg: torch.Tensor, n: int) -> torch.Tensor:
        """Like :meth:`forward` with table rows given as ``unique[ids]``: each distinct table is
        encoded once (training batches share tables)."""
        z = self.encoder(unique)[ids]
        return self.head(torch.zeros(n, z.shape[1], dtype=z.dtype).index_add_(0, seg, z))


def pair_rank_loss(pred: torch.Tensor, target: torch.Tensor, gap: float = C.RANK_LOSS_GAP) -> torch.Tensor:
    """Mean pairwise logistic loss of predictions ``pred`` (n, k) against ``target`` (n, k), per
    output column: over the pairs (i, j) whose targets differ by more than ``gap``,
    softplus(-(pred_i - pred_j) / gap) where target_i > target_j (so ordering a pair wrong by a
    gap costs about 1.3, right by one about 0.3). 0 where no pair differs enough. The search
    compares plans, so the order of shard costs matters beside their level."""
    d_t = target.unsqueeze(0) - target.unsqueeze(1)            # (n, n, k): target_j - target_i
    d_p = pred.unsqueeze(0) - pred.unsqueeze(1)
    ranked = d_t > gap                                         # each unordered pair once, in its order
    if not bool(ranked.any()):
        return pred.sum() * 0.0
    return nn.functional.softplus(-d_p[ranked] / gap).mean()


class IndexedShards:
    """Shards as (distinct-table feature matrix (U, 21), table ids (T,), shard of each (T,)), so
    that a mini-batch of shards is selected with array operations, not Python loops."""

    def __init__(self, shards: Sequence[Sequence[Table]], scaler: FeatureScaler):
        index: dict[Table, int] = {}
        ids = [index.setdefault(t, len(index)) for s in shards for t in s]
        self.unique = torch.from_numpy(scaler.transform(list(index)))
        self.ids = np.asarray(ids, dtype=np.int64)
        self.seg = np.repeat(np.arange(len(shards)), [len(s) for s in shards])
        self.n = len(shards)

    def select(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Table ids and new shard positions (0..len(idx)-1) of the shards ``idx``."""
        pos = np.full(self.n, -1)
        pos[idx] = np.arange(len(idx))
        keep = pos[self.seg] >= 0
        return torch.from_numpy(self.ids[keep]), torch.from_numpy(pos[self.seg[keep]])


class NeuroShardCompute(NeuralEstimator):
    """Fused-op compute model (module docstring). Configuration: the training settings of
    :class:`~shardlab.costmodel.neural_base.NeuralEstimator` and the widths ``hidden`` (table
    encoder's hidden layer), ``encoding`` (per-table encoding, summed per shard) and
    ``head_hidden``. Learned: ``net_``, ``scaler_`` (table-feature standardisation),
    ``scale_ms_`` (target scale, ms), ``profile_`` (the samples' hardware profile), ``history_``.
    ``predict(shards)`` -> (n, 2) fw/bw ms."""

    target = "compute"
    name = "neuroshard-compute"

    def __init__(self, epochs: int = 1000, lr: float = 1e-3, batch_size: int = 512, seed: int = 0,
                 log_target: bool = True, hidden: int = 128, encoding: int = 32, head_hidden: int = 64,
                 progress: bool = False, rank_weight: float = 0.0):
        self.hidden, self.encoding, self.head_hidden = hidden, encoding, head_hidden
        if not rank_weight >= 0.0:
            raise ShardlabError(f"{type(self).__name__}: field 'rank_weight' = {rank_weight} must be >= 0")
        self.rank_weight = float(rank_weight)
        super().__init__(epochs, lr, batch_size, seed, log_target, progress)

    def _reset(self) -> None:
        super()._reset()
        self.net_: Any = None
        self.scaler_: FeatureScaler | None = None
        self.scale_ms_: float = 1.0
        self._cache: dict[Table, np.ndarray] = {}

    @property
    def fitted(self) -> bool:
        """Whether the network is there."""
        return self.net_ is not None

    def _new_net(self) -> ShardNet:
        return ShardNet((C.N_TABLE_FEATURES, self.hidden, self.encoding), (self.encoding, self.head_hidden, 2))

    def _batch(self, shards: Sequence[Sequence[Table]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Standardised features (T, 21) of all tables and their shard index (T,)."""
        assert self.scaler_ is not None
        missing = list({t for s in shards for t in s if t not in self._cache})
        if missing:
            for t, row in zip(missing, self.scaler_.transform(missing)):
                self._cache[t] = row
        rows = [self._cache[t] for s in shards for t in s]
        seg = np.repeat(np.arange(len(shards)), [len(s) for s in shards])
        x = np.stack(rows) if rows else np.zeros((0, C.N_TABLE_FEATURES), np.float32)
        return torch.from_numpy(x), torch.from_numpy(seg)

    def fit(self, samples: Sequence[ComputeRecord | Mapping[str, Any]],
            val_samples: Sequence[ComputeRecord | Mapping[str, Any]] | None = None) -> "NeuroShardCompute":
        """Train on measured compute samples, keeping the epoch with the best loss on
        ``val_samples``; without them, ``samples`` are split 80/10/10 by key (train / val; the
        test part is left out for evaluation). Returns self."""
        where = f"{type(self).__name__}.fit"
        records = as_compute_records(samples, where)
        if val_samples is None:
            parts = split_samples(records)
            records, vrecords = parts["train"], parts["val"]
        else:
            vrecords = as_compute_records(val_samples, where)
        if not records or not vrecords:
            raise ShardlabError(f"{where}: needs training and validation samples")
        self._reset()
        self.profile_ = dict(records[0].profile)
        shards = [r.tables for r in records]
        vshards = [r.tables for r in vrecords]
        self.scaler_ = FeatureScaler.fit(list({t for s in shards for t in s}))
        y = np.array([[r.fw_ms, r.bw_ms] for r in records])
        vy = np.array([[r.fw_ms, r.bw_ms] for r in vrecords])
        self.scale_ms_ = float(np.median(y.sum(axis=1)))
        seeded(self.seed)
        self.net_ = self._new_net()
        ty = torch.tensor(self.to_target(y, self.scale_ms_), dtype=torch.float32)
        vty = torch.tensor(self.to_target(vy, self.scale_ms_), dtype=torch.float32)
        train, val = IndexedShards(shards, self.scaler_), IndexedShards(vshards, self.scaler_)
        vids, vseg = val.select(np.arange(val.n))
        net = self.net_

        w = self.rank_weight

        def loss(idx: torch.Tensor) -> torch.Tensor:
            ids, seg = train.select(idx.numpy())
            pred = net.forward_indexed(train.unique, ids, seg, len(idx))
            mse = ((pred - ty[idx]) ** 2).mean()
            return mse + w * pair_rank_loss(pred, ty[idx]) if w else mse

        def val_loss() -> torch.Tensor:
            pred = net.forward_indexed(val.unique, vids, vseg, val.n)
            mse = ((pred - vty) ** 2).mean()
            return mse + w * pair_rank_loss(pred, vty) if w else mse

        self._train({"net": net}, loss, len(shards), val_loss, f"train {self.name}")
        return self

    def _parts(self) -> tuple[nn.Module, nn.Module]:
        """(table encoder, head) of the fitted network."""
        self.check_fitted()
        return self.net_.encoder, self.net_.head

    @torch.no_grad()
    def embed(self, tables: Sequence[Table]) -> np.ndarray:
        """(n, encoding) table encodings; a shard's cost is a function of their SUM (for
        incremental search: add a table to a device by adding its row)."""
        encoder, _ = self._parts()
        if not tables:
            return np.zeros((0, self.embed_dim))
        x, _ = self._batch([tables])
        return encoder(x).numpy().astype(np.float64)

    @property
    def embed_dim(self) -> int:
        """Width of :meth:`embed`'s rows."""
        return self.encoding

    def predict_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) fw/bw ms of m shards given their summed encodings (m, encoding) and table
        counts (m,).
        Runs the head in NumPy (float64): search calls this for a few devices at a time, where
        torch's per-call overhead would dominate."""
        return self.predict_head(self.head_rows(sums), counts)

    def _head_layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The head's linear layers as float64 tensors (weight (in, out), bias (out,)), cached
        per fitted network."""
        layers = getattr(self, "_np_head", None)
        if layers is None or layers[0] is not self.net_:
            _, head = self._parts()
            mats = [(m.weight.detach().T.to(torch.float64).contiguous(), m.bias.detach().to(torch.float64))
                    for m in head if isinstance(m, nn.Linear)]
            self._np_head = layers = (self.net_, mats)
        return layers[1]

    def head_rows(self, rows: np.ndarray) -> np.ndarray:
        """(n, head_hidden) the head's first linear map (no bias) of encodings ``rows`` (n,
        encoding): linear, so a shard's is the sum of its tables' (``LinearHeadComputeModel``)."""
        x = torch.from_numpy(np.atleast_2d(np.asarray(rows, dtype=np.float64)))
        return (x @ self._head_layers()[0][0]).numpy()

    @torch.no_grad()
    def predict_head(self, pre: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) fw/bw ms of m shards from their summed :meth:`head_rows` (m, head_hidden) and
        table counts (m,): the rest of the head, in float64 (torch: search costs thousands of
        candidate devices per step)."""
        layers = self._head_layers()
        h = torch.from_numpy(np.atleast_2d(np.asarray(pre, dtype=np.float64))) + layers[0][1]
        for w, b in layers[1:]:
            h = torch.addmm(b, h.relu_(), w)
        out = np.maximum(self.from_target(h.numpy(), self.scale_ms_), 0.0)
        out[np.asarray(counts).reshape(-1) == 0] = 0.0
        return out

    @torch.no_grad()
    def predict(self, shards: Sequence[Sequence[Table]]) -> np.ndarray:
        """(n, 2) forward and backward ms per shard; 0 for an empty shard."""
        encoder, head = self._parts()
        if not shards:
            return np.zeros((0, 2))
        x, seg = self._batch(shards)
        z = encoder(x)
        sums = torch.zeros(len(shards), z.shape[1], dtype=z.dtype).index_add_(0, seg, z)
        out = self.from_target(head(sums).numpy(), self.scale_ms_)
        out[[len(s) == 0 for s in shards]] = 0.0
        return np.maximum(out, 0.0)

    def _payload(self) -> dict[str, Any]:
        assert self.net_ is not None and self.scaler_ is not None
        return {"state_dict": self.net_.state_dict(), "scaler": self.scaler_.to_dict(), "scale_ms": self.scale_ms_}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "NeuroShardCompute":
        """The model a :meth:`state` dict describes."""
        m = cls(**d["config"])
        m._restore_common(d)
        m.scaler_ = FeatureScaler.from_dict(d["scaler"])
        m.scale_ms_ = d["scale_ms"]
        m.net_ = m._new_net()
        m.net_.load_state_dict(d["state_dict"])
        m.net_.eval()
        return m


class AutoShardCompute(NeuroShardCompute):
    """AutoShard's cost model: the same per-table MLP + sum + head,
    pre-trained on the measured dataset and refined online from the RL loop's measured shards."""

    name = "autoshard-compute"
