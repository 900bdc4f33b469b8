"""NeuroShard's communication cost models, one pair per device count.

For each G seen in training: a backward model, MLP G -> 128 -> 64 -> 32 -> 16 -> G, from the
ranks' dim sums to their backward all-to-all ms; and a forward model, the same widths from
[G dim sums, G delays (ms)] to the forward all-to-all ms (waiting included). Inputs are
divided by stored scales (dims by the mean dim sum, delays and targets by the median cost),
and each delay enters as the rank's lead over the last arrival, max(delays) - delay_g: only
relative arrival times matter to a collective, and with a few hundred samples per G the MLP
learns the waiting far better from leads than from raw delays (G=8 forward MAPE 0.40 -> see
``studies/cost_models/results/cost_models.md``). The forward model predicts the time beyond that lead (the transfer
after the last arrival) and adds the lead back: forward comm = waiting + transfer.
A G not trained for raises a one-line error naming it -- use the analytic comm model there.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from shardlab.costmodel.metrics import split_samples
from shardlab.costmodel.neural_base import NeuralEstimator, mlp, seeded
from shardlab.errors import ShardlabError
from shardlab.measure.records import CommRecord, as_comm_records

HIDDEN = (128, 64, 32, 16)


class NeuroShardComm(NeuralEstimator):
    """Per-G forward and backward comm MLPs; configuration: the training settings of
    :class:`~shardlab.costmodel.neural_base.NeuralEstimator`; learned: ``nets_`` (G -> the two
    networks), ``scales_`` (G -> input and target scales), ``profile_`` (profile name and batch
    size of the samples), ``history_``. ``predict(dim_sums, delays_ms)`` -> (n, G, 2) ms."""

    target = "comm"
    name = "neuroshard-comm"

    def __init__(self, epochs: int = 300, lr: float = 1e-3, batch_size: int = 512, seed: int = 0,
                 log_target: bool = True, progress: bool = False):
        super().__init__(epochs, lr, batch_size, seed, log_target, progress)

    def _reset(self) -> None:
        super()._reset()
        self.nets_: dict[int, nn.ModuleDict] = {}
        self.scales_: dict[int, dict[str, float]] = {}

    @property
    def fitted(self) -> bool:
        """Whether a network pair for some G is there."""
        return bool(self.nets_)

    @staticmethod
    def _new(g: int) -> nn.ModuleDict:
        return nn.ModuleDict({"bw": mlp((g, *HIDDEN, g)), "fw": mlp((2 * g, *HIDDEN, g))})

    @staticmethod
    def _lead(delays: np.ndarray) -> np.ndarray:
        """Each rank's lead over the last arrival (ms): max(delays) - delay_g, per row; (n, G)."""
        return delays.max(axis=1, keepdims=True) - delays

    def _inputs(self, g: int, dims: np.ndarray, delays: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Scaled backward inputs (n, G) and forward inputs (n, 2G): dim sums, then leads."""
        s = self.scales_[g]
        d = torch.tensor(dims / s["dim"], dtype=torch.float32)
        if delays is None:
            dl = torch.zeros_like(d)
        else:
            dl = torch.tensor(self._lead(delays) / s["ms"], dtype=torch.float32)
        return d, torch.cat([d, dl], dim=1)

    def fit(self, samples: Sequence[CommRecord | Mapping[str, Any]],
            val_samples: Sequence[CommRecord | Mapping[str, Any]] | None = None) -> "NeuroShardComm":
        """Train one fw and one bw model per device count G found in the comm samples, each
        keeping the epoch with the best loss on that G's ``val_samples`` (without them,
        ``samples`` are split 80/10/10 by key; a G with no validation sample validates on its
        first tenth of training samples). Returns self."""
        records = as_comm_records(samples, "NeuroShardComm.fit")
        if val_samples is None:
            parts = split_samples(records)
            records, vrecords = parts["train"], parts["val"]
        else:
            vrecords = as_comm_records(val_samples, "NeuroShardComm.fit")
        if not records:
            raise ShardlabError("NeuroShardComm.fit: no samples")
        self._reset()
        self.profile_ = {"name": records[0].profile.get("name", "?"), "batch_size": records[0].batch_size}
        fields = ("dim_sums", "delays_ms", "fw_comm_ms", "bw_comm_ms")
        for g in sorted({r.world_size for r in records}):
            tr = [r for r in records if r.world_size == g]
            va = [r for r in vrecords if r.world_size == g] or tr[: max(1, len(tr) // 10)]
            arr = {k: np.array([getattr(r, k) for r in tr], dtype=np.float64) for k in fields}
            varr = {k: np.array([getattr(r, k) for r in va], dtype=np.float64) for k in fields}
            self.scales_[g] = {"dim": float(arr["dim_sums"].mean()),
                               "ms": float(np.median(np.concatenate([arr["fw_comm_ms"], arr["bw_comm_ms"]])))}
            seeded(self.seed + g)
            nets = self._new(g)
            self.nets_[g] = nets
            ms = self.scales_[g]["ms"]
            xb, xf = self._inputs(g, arr["dim_sums"], arr["delays_ms"])
            vxb, vxf = self._inputs(g, varr["dim_sums"], varr["delays_ms"])
            yf = torch.tensor(self.to_target(arr["fw_comm_ms"] - self._lead(arr["delays_ms"]), ms),
                              dtype=torch.float32)
            yb = torch.tensor(self.to_target(arr["bw_comm_ms"], ms), dtype=torch.float32)
            vyf = torch.tensor(self.to_target(varr["fw_comm_ms"] - self._lead(varr["delays_ms"]), ms),
                               dtype=torch.float32)
            vyb = torch.tensor(self.to_target(varr["bw_comm_ms"], ms), dtype=torch.float32)

            def loss(idx: torch.Tensor) -> torch.Tensor:
                return (((nets["fw"](xf[idx]) - yf[idx]) ** 2).mean()
                        + ((nets["bw"](xb[idx]) - yb[idx]) ** 2).mean())

            def val_loss() -> torch.Tensor:
                return ((nets["fw"](vxf) - vyf) ** 2).mean() + ((nets["bw"](vxb) - vyb) ** 2).mean()

            start = len(self.history_)
            self._train({"nets": nets}, loss, len(tr), val_loss, f"train {self.name} G={g}")
            for h in self.history_[start:]:
                h["world_size"] = g
        return self

    @torch.no_grad()
    def predict(self, dim_sums: Any, delays_ms: Any = None) -> np.ndarray:
        """(n, G, 2) forward and backward ms; ``dim_sums`` and ``delays_ms`` are (n, G)."""
        self.check_fitted()
        d = np.atleast_2d(np.asarray(dim_sums, dtype=np.float64))
        g = d.shape[1]
        if g not in self.nets_:
            raise ShardlabError(f"{self.name}: field 'ngpu' = {g} has no trained model "
                                f"(trained for G in {sorted(self.nets_)}); use the analytic comm model")
        dl = None if delays_ms is None else np.atleast_2d(np.asarray(delays_ms, dtype=np.float64))
        s = self.scales_[g]
        xb = d / s["dim"]
        xf = np.concatenate([xb, np.zeros_like(xb) if dl is None else self._lead(dl) / s["ms"]], axis=1)
        fw = self.from_target(self._np_forward(g, "fw", xf), s["ms"]) + (0.0 if dl is None else self._lead(dl))
        bw = self.from_target(self._np_forward(g, "bw", xb), s["ms"])
        return np.maximum(np.stack([fw, bw], axis=2), 0.0)

    def _np_forward(self, g: int, which: str, x: np.ndarray) -> np.ndarray:
        """One network in NumPy (float64; weights cached per fitted network): search simulates
        a few plans at a time, where torch's per-call overhead dominates, and float64 rows do
        not depend on the batch they are computed in (float32 ones do, in their last bits)."""
        net = self.nets_[g][which]
        cache = self.__dict__.setdefault("_np_nets", {})
        if cache.get((g, which), (None,))[0] is not net:
            cache[(g, which)] = (net, [(m.weight.detach().numpy().T.astype(np.float64),
                                        m.bias.detach().numpy().astype(np.float64))
                                       for m in net if isinstance(m, nn.Linear)])
        layers = cache[(g, which)][1]
        for i, (w, b) in enumerate(layers):
            x = x @ w + b
            if i < len(layers) - 1:
                x = np.maximum(x, 0.0)
        return x

    def _payload(self) -> dict[str, Any]:
        return {"state_dicts": {g: n.state_dict() for g, n in self.nets_.items()}, "scales": self.scales_}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "NeuroShardComm":
        """The model a :meth:`state` dict describes."""
        m = cls(**d["config"])
        m._restore_common(d)
        m.scales_ = {int(g): s for g, s in d["scales"].items()}
        for g, sd in d["state_dicts"].items():
            m.nets_[int(g)] = cls._new(int(g))
            m.nets_[int(g)].load_state_dict(sd)
            m.nets_[int(g)].eval()
        return m
