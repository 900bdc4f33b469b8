"""NeuroShard's communication cost models (ALGORITHMS.md section 4), one pair per device count.

For each G seen in training: a backward model, MLP G -> 128 -> 64 -> 32 -> 16 -> G, from the
ranks' dim sums to their backward all-to-all ms; and a forward model, the same widths from
[G dim sums, G delays (ms)] to the forward all-to-all ms (waiting included). Inputs are
divided by stored scales (dims by the mean dim sum, delays and targets by the median cost),
and each delay enters as the rank's lead over the last arrival, max(delays) - delay_g: only
relative arrival times matter to a collective, and with a few hundred samples per G the MLP
learns the waiting far better from leads than from raw delays (G=8 forward MAPE 0.40 -> see
reports/cost_models.md). The forward model predicts the time beyond that lead (the transfer
after the last arrival) and adds the lead back: forward comm = waiting + transfer.
A G not trained for raises a one-line error naming it -- use the analytic comm model there.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from shardlab.costmodel.metrics import split_samples
from shardlab.costmodel.neural import _Estimator, _seeded, mlp
from shardlab.errors import ShardlabError

HIDDEN = (128, 64, 32, 16)


class NeuroShardComm(_Estimator):
    """Per-G forward and backward comm MLPs; ``predict(dim_sums, delays_ms)`` -> (n, G, 2) ms."""

    target = "comm"
    name = "neuroshard-comm"

    def __init__(self, epochs: int = 300, lr: float = 1e-3, batch_size: int = 512, seed: int = 0,
                 log_target: bool = True, progress: bool = False):
        super().__init__(epochs, lr, batch_size, seed, log_target, progress)
        self.nets_: dict[int, nn.ModuleDict] = {}
        self.scales_: dict[int, dict[str, float]] = {}

    @staticmethod
    def _new(g: int) -> nn.ModuleDict:
        return nn.ModuleDict({"bw": mlp((g, *HIDDEN, g)), "fw": mlp((2 * g, *HIDDEN, g))})

    @staticmethod
    def _lead(delays: np.ndarray) -> np.ndarray:
        """Each rank's lead over the last arrival (ms): max(delays) - delay_g, per row."""
        return delays.max(axis=1, keepdims=True) - delays

    def _inputs(self, g: int, dims: np.ndarray, delays: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.scales_[g]
        d = torch.tensor(dims / s["dim"], dtype=torch.float32)
        if delays is None:
            dl = torch.zeros_like(d)
        else:  # each rank's lead over the last arrival: max(delays) - delay_g (ms), scaled
            dl = torch.tensor((delays.max(axis=1, keepdims=True) - delays) / s["ms"], dtype=torch.float32)
        return d, torch.cat([d, dl], dim=1)

    def fit(self, samples: Sequence[dict[str, Any]], val_samples: Sequence[dict[str, Any]] | None = None
            ) -> "NeuroShardComm":
        """Train one fw and one bw model per device count found in the comm samples."""
        if val_samples is None:
            parts = split_samples(samples)
            samples, val_samples = parts["train"], parts["val"]
        if not samples:
            raise ShardlabError("NeuroShardComm.fit: no samples")
        self.profile_ = {"name": samples[0]["provenance"]["profile"]["name"] if "provenance" in samples[0] else "?",
                         "batch_size": samples[0]["batch_size"]}
        self.history_ = []
        for g in sorted({s["world_size"] for s in samples}):
            tr = [s for s in samples if s["world_size"] == g]
            va = [s for s in val_samples if s["world_size"] == g] or tr[: max(1, len(tr) // 10)]
            arr = {k: np.array([s[k] for s in tr], dtype=np.float64)
                   for k in ("dim_sums", "delays_ms", "fw_comm_ms", "bw_comm_ms")}
            varr = {k: np.array([s[k] for s in va], dtype=np.float64)
                    for k in ("dim_sums", "delays_ms", "fw_comm_ms", "bw_comm_ms")}
            self.scales_[g] = {"dim": float(arr["dim_sums"].mean()),
                               "ms": float(np.median(np.concatenate([arr["fw_comm_ms"], arr["bw_comm_ms"]])))}
            _seeded(self.seed + g)
            nets = self._new(g)
            self.nets_[g] = nets
            ms = self.scales_[g]["ms"]
            xb, xf = self._inputs(g, arr["dim_sums"], arr["delays_ms"])
            vxb, vxf = self._inputs(g, varr["dim_sums"], varr["delays_ms"])
            yf = torch.tensor(self._to_target(arr["fw_comm_ms"] - self._lead(arr["delays_ms"]), ms),
                              dtype=torch.float32)
            yb = torch.tensor(self._to_target(arr["bw_comm_ms"], ms), dtype=torch.float32)
            vyf = torch.tensor(self._to_target(varr["fw_comm_ms"] - self._lead(varr["delays_ms"]), ms),
                               dtype=torch.float32)
            vyb = torch.tensor(self._to_target(varr["bw_comm_ms"], ms), dtype=torch.float32)

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
        d = np.atleast_2d(np.asarray(dim_sums, dtype=np.float64))
        g = d.shape[1]
        if g not in self.nets_:
            raise ShardlabError(f"{self.name}: field 'ngpu' = {g} has no trained model "
                                f"(trained for G in {sorted(self.nets_)}); use the analytic comm model")
        dl = None if delays_ms is None else np.atleast_2d(np.asarray(delays_ms, dtype=np.float64))
        xb, xf = self._inputs(g, d, dl)
        ms = self.scales_[g]["ms"]
        fw = self._from_target(self.nets_[g]["fw"](xf).numpy(), ms) + (0.0 if dl is None else self._lead(dl))
        bw = self._from_target(self.nets_[g]["bw"](xb).numpy(), ms)
        return np.maximum(np.stack([fw, bw], axis=2), 0.0)

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
