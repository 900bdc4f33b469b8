"""Neural cost models trained on measured samples (ALGORITHMS.md sections 4-6).

- :class:`NeuroShardCompute`: per-table MLP (21 -> 128 -> 32, ReLU), SUM over a shard's
  tables, head MLP (32 -> 64 -> 2) predicting the fused op's forward and backward ms. The seed
  predicts the total with one output; two outputs cost 65 parameters more and give the
  Evaluation its fw/bw split (total = their sum). ``AutoShardCompute`` is the same network
  (AutoShard's cost model has this shape), trained online in its RL loop.
- :class:`NeuroShardComm`: for each device count G, a backward model (G dim sums -> G costs)
  and a forward model ([G dim sums, G delays] -> G costs), MLPs with hidden 128, 64, 32, 16.

Training follows the seeds: MSE, Adam 1e-3, batch 512, keep the epoch with the best validation
loss. Targets are divided by a stored scale (ms) and, with ``log_target=True`` (default),
trained as log(1 + ms / scale): measured costs span three decades, and plain MSE on ms
fits the large shards at the expense of relative error on the small ones (a choice the seeds
leave open; both are available). Same seed -> same weights (CPU, deterministic algorithms).
Model files are ``torch.save`` dicts with config, weights, feature normalisation, training
history, provenance and metrics.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.costmodel.metrics import split_samples
from shardlab.data.features import FeatureScaler
from shardlab.errors import ShardlabError
from shardlab.io import torch_load_safe, torch_save_atomic
from shardlab.tables import Table

FORMAT = "shardlab-neural-v1"


def mlp(sizes: Sequence[int], last_relu: bool = False) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between (and after the last if asked)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


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


def _seeded(seed: int) -> torch.Generator:
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


class _Estimator:
    """Shared save/load and target scaling of the neural estimators."""

    target = ""
    name = ""

    def __init__(self, epochs: int, lr: float, batch_size: int, seed: int, log_target: bool, progress: bool):
        self.epochs, self.lr, self.batch_size, self.seed = epochs, lr, batch_size, seed
        self.log_target, self.progress = log_target, progress
        self.provenance_: dict[str, Any] = {}
        self.metrics_: dict[str, Any] = {}
        self.history_: list[dict[str, float]] = []
        self.profile_: dict[str, Any] = {}

    def config(self) -> dict[str, Any]:
        """Constructor arguments (stored in the model file)."""
        return {"epochs": self.epochs, "lr": self.lr, "batch_size": self.batch_size, "seed": self.seed,
                "log_target": self.log_target}

    @property
    def source(self) -> str:
        """Evaluation label: model name, profile and batch size it was trained at."""
        p = self.profile_
        return f"model:{self.name}@{p.get('name', '?')}[batch_size={p.get('batch_size', '?')}]"

    def _to_target(self, y: np.ndarray, scale: float) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64) / scale
        return np.log1p(np.maximum(y, 0.0)) if self.log_target else y

    def _from_target(self, t: np.ndarray, scale: float) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        return (np.expm1(t) if self.log_target else t) * scale

    def _train(self, nets: dict[str, nn.Module], loss_fn: Any, n_train: int, val_loss_fn: Any, desc: str) -> None:
        """Adam + MSE mini-batches over ``n_train`` items; ``loss_fn(index_tensor)`` -> loss;
        keeps the epoch with the best ``val_loss_fn()``; records ``history_``."""
        previous = torch.get_num_threads()
        torch.set_num_threads(1)  # small MLPs: one thread is faster, and never oversubscribes
        try:
            self._train_loop(nets, loss_fn, n_train, val_loss_fn, desc)
        finally:
            torch.set_num_threads(previous)

    def _train_loop(self, nets: dict[str, nn.Module], loss_fn: Any, n_train: int, val_loss_fn: Any,
                    desc: str) -> None:
        gen = _seeded(self.seed)
        params = [p for net in nets.values() for p in net.parameters()]
        opt = torch.optim.Adam(params, lr=self.lr)
        best, best_state = float("inf"), None
        bar = tqdm(range(self.epochs), desc=desc, disable=not self.progress)
        for epoch in bar:
            for net in nets.values():
                net.train()
            order = torch.randperm(n_train, generator=gen)
            total = 0.0
            for i in range(0, n_train, self.batch_size):
                idx = order[i:i + self.batch_size]
                loss = loss_fn(idx)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
            for net in nets.values():
                net.eval()
            with torch.no_grad():
                val = float(val_loss_fn())
            self.history_.append({"epoch": epoch, "train_loss": total / max(n_train, 1), "val_loss": val})
            if val < best:
                best = val
                best_state = {k: {n: t.clone() for n, t in net.state_dict().items()} for k, net in nets.items()}
            bar.set_postfix(val=f"{val:.4g}", best=f"{best:.4g}")
        if best_state is not None:
            for k, net in nets.items():
                net.load_state_dict(best_state[k])
        for net in nets.values():
            net.eval()

    def _payload(self) -> dict[str, Any]:
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """Everything the model file holds, as one in-memory dict (see :meth:`from_state`)."""
        return {"format": FORMAT, "class": type(self).__name__, "config": self.config(),
                "provenance": self.provenance_, "metrics": self.metrics_, "history": self.history_,
                "profile": self.profile_, **self._payload()}

    def save(self, path: str) -> None:
        """Write the model file atomically (torch.save to a temporary file, then rename)."""
        torch_save_atomic(self.state(), path)

    @classmethod
    def check_state(cls, d: Any, where: str) -> dict[str, Any]:
        """``d`` if it is a state of this class (:meth:`state`); else a one-line error naming ``where``."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ShardlabError(f"cost model '{where}': field 'format' must be '{FORMAT}'")
        if d["class"] != cls.__name__:
            raise ShardlabError(f"cost model '{where}': holds a {d['class']}, not a {cls.__name__}")
        return d

    @classmethod
    def load(cls, path: str) -> Any:
        """Read a model file written by :meth:`save`."""
        return cls.from_state(cls.check_state(torch_load_safe(path, "cost model"), path))

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Any:
        """The model a :meth:`state` dict describes."""
        raise NotImplementedError

    def _restore_common(self, d: dict[str, Any]) -> None:
        self.provenance_, self.metrics_ = d["provenance"], d["metrics"]
        self.history_, self.profile_ = d["history"], d["profile"]


class NeuroShardCompute(_Estimator):
    """Fused-op compute model (module docstring). ``fit(samples)`` takes measured compute
    samples and splits them 80/10/10 by key (train/val; test is left for evaluation) unless
    ``val_samples`` is given; ``predict(shards)`` -> (n, 2) fw/bw ms."""

    target = "compute"
    name = "neuroshard-compute"

    def __init__(self, epochs: int = 1000, lr: float = 1e-3, batch_size: int = 512, seed: int = 0,
                 log_target: bool = True, hidden: int = 128, encoding: int = 32, head_hidden: int = 64,
                 progress: bool = False):
        super().__init__(epochs, lr, batch_size, seed, log_target, progress)
        self.hidden, self.encoding, self.head_hidden = hidden, encoding, head_hidden
        self.net_: ShardNet | None = None
        self.scaler_: FeatureScaler | None = None
        self.scale_ms_: float = 1.0
        self._cache: dict[Table, np.ndarray] = {}

    def config(self) -> dict[str, Any]:
        return {**super().config(), "hidden": self.hidden, "encoding": self.encoding, "head_hidden": self.head_hidden}

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

    def fit(self, samples: Sequence[dict[str, Any]], val_samples: Sequence[dict[str, Any]] | None = None
            ) -> "NeuroShardCompute":
        """Train on measured compute samples (see class docstring); returns self."""
        if val_samples is None:
            parts = split_samples(samples)
            samples, val_samples = parts["train"], parts["val"]
        if not samples or not val_samples:
            raise ShardlabError("NeuroShardCompute.fit: needs training and validation samples")
        self.profile_ = dict(samples[0]["profile"])
        shards = [[Table.from_dict(t) for t in s["tables"]] for s in samples]
        vshards = [[Table.from_dict(t) for t in s["tables"]] for s in val_samples]
        self.scaler_ = FeatureScaler.fit(list({t for s in shards for t in s}))
        self._cache = {}
        y = np.array([[s["fw_ms"], s["bw_ms"]] for s in samples])
        vy = np.array([[s["fw_ms"], s["bw_ms"]] for s in val_samples])
        self.scale_ms_ = float(np.median(y.sum(axis=1)))
        _seeded(self.seed)
        self.net_ = self._new_net()
        ty = torch.tensor(self._to_target(y, self.scale_ms_), dtype=torch.float32)
        vty = torch.tensor(self._to_target(vy, self.scale_ms_), dtype=torch.float32)
        train, val = IndexedShards(shards, self.scaler_), IndexedShards(vshards, self.scaler_)
        vids, vseg = val.select(np.arange(val.n))
        net = self.net_

        def loss(idx: torch.Tensor) -> torch.Tensor:
            ids, seg = train.select(idx.numpy())
            return ((net.forward_indexed(train.unique, ids, seg, len(idx)) - ty[idx]) ** 2).mean()

        def val_loss() -> torch.Tensor:
            return ((net.forward_indexed(val.unique, vids, vseg, val.n) - vty) ** 2).mean()

        self.history_ = []
        self._train({"net": net}, loss, len(shards), val_loss, f"train {self.name}")
        return self

    def _parts(self) -> tuple[nn.Module, nn.Module]:
        """(table encoder, head) of the fitted network."""
        if self.net_ is None:
            raise ShardlabError(f"{self.name}: not fitted")
        return self.net_.encoder, self.net_.head

    @torch.no_grad()
    def embed(self, tables: Sequence[Table]) -> np.ndarray:
        """(n, 32) table encodings; a shard's cost is a function of their SUM (for incremental
        search: add a table to a device by adding its row)."""
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
        """(m, 2) fw/bw ms of m shards given their summed encodings (m, 32) and table counts (m,).
        Runs the head in NumPy (float64): search calls this for a few devices at a time, where
        torch's per-call overhead would dominate."""
        layers = getattr(self, "_np_head", None)
        if layers is None or layers[0] is not self.net_:  # cached per fitted network
            _, head = self._parts()
            mats = [(m.weight.detach().numpy().T.astype(np.float64), m.bias.detach().numpy().astype(np.float64))
                    for m in head if isinstance(m, nn.Linear)]
            self._np_head = layers = (self.net_, mats)
        h = np.atleast_2d(np.asarray(sums, dtype=np.float64))
        mats = layers[1]
        for i, (w, b) in enumerate(mats):
            h = h @ w + b
            if i < len(mats) - 1:
                h = np.maximum(h, 0.0)
        out = self._from_target(h, self.scale_ms_)
        out[np.asarray(counts) == 0] = 0.0
        return np.maximum(out, 0.0)

    @torch.no_grad()
    def predict(self, shards: Sequence[Sequence[Table]]) -> np.ndarray:
        """(n, 2) forward and backward ms per shard; 0 for an empty shard."""
        encoder, head = self._parts()
        if not shards:
            return np.zeros((0, 2))
        x, seg = self._batch(shards)
        z = encoder(x)
        sums = torch.zeros(len(shards), z.shape[1], dtype=z.dtype).index_add_(0, seg, z)
        out = self._from_target(head(sums).numpy(), self.scale_ms_)
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
    """AutoShard's cost model: the same per-table MLP + sum + head (ALGORITHMS.md section 6),
    pre-trained on the measured dataset and refined online from the RL loop's measured shards."""

    name = "autoshard-compute"
