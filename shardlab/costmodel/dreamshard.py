"""DreamShard's cost network (``docs/methods.md``, "DreamShard").

A shared table encoder (21 -> 128 -> 32, ReLU) is summed over each device's tables; three
heads (32 -> 64 -> 1) predict that device's forward compute, backward compute and
communication (fw + bw all-to-all) ms; an overall head (32 -> 64 -> 1) reads the per-device
sums, takes their MAX over devices, and predicts the plan cost (ms). Sum and max make it
independent of the numbers of tables and devices.

Training data (``fit(samples)``, one list): measured plans (:class:`~shardlab.measure.records.PlanRecord`:
each device's tables and measured fw/bw compute and fw/bw comm, and the plan cost), optionally
mixed with measured compute samples (:class:`~shardlab.measure.records.ComputeRecord`), which
supervise the two compute heads alone. Where no plan was measured but the comm model is given
(one GPU measured compute only), the plans are composed from measured ops
(:func:`shardlab.costmodel.train.compose_plans`) and the bundle's provenance says so. Loss: the
sum of the four MSEs on log(1 + ms / scale) (see :mod:`shardlab.costmodel.neural` for why log),
with two scales: the compute heads' is the median shard compute (as NeuroShard's), comm's and
overall's the median plan cost. With one scale for all (the plan cost's, ~5x a shard's compute)
the log was nearly linear over the small shards. Measured on the pool's unseen tables (compute
MAPE; NeuroShard's: 0.12): one scale, 0.22; own compute scale, 0.18; plus ``pretrain_epochs``
(the encoder and compute heads trained on compute samples first), 0.135. The kept epoch is the
one with the best validation loss over plans and, when given, held-out compute samples. As a
:class:`ComputeModel` it predicts (fw, bw) compute per shard, so it plugs into the same
simulation and search code.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from shardlab import constants as C
from shardlab.costmodel.metrics import split_samples
from shardlab.costmodel.neural import NeuroShardCompute, ShardNet
from shardlab.costmodel.neural_base import NeuralEstimator, mlp, seeded
from shardlab.data.features import FeatureScaler
from shardlab.errors import ShardlabError
from shardlab.measure.records import ComputeRecord, PlanRecord, as_records
from shardlab.tables import Table

Sample = PlanRecord | ComputeRecord | Mapping[str, Any]


class DreamShardNet(nn.Module):
    """Encoder + sum per device, heads fw/bw/comm per device, overall head over the max."""

    def __init__(self, hidden: int = 128, embed: int = 32, head_hidden: int = 64):
        super().__init__()
        self.shard = ShardNet((C.N_TABLE_FEATURES, hidden, embed), (embed, head_hidden, 2))
        self.comm = mlp((embed, head_hidden, 1))
        self.overall = mlp((embed, head_hidden, 1))

    def forward(self, x: torch.Tensor, seg: torch.Tensor, n: int, plan_of: torch.Tensor | None = None,
                n_plans: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """x (T, 21), seg (T,) device-shard index of each table, n shards; ``plan_of`` (n,) plan
        index of each shard -> ((n, 2) compute, (n,) comm, (n_plans,) overall or None)."""
        z = self.shard.encode(x, seg, n)
        compute = self.shard.head(z)
        comm = self.comm(z).squeeze(-1)
        overall = None
        if plan_of is not None:
            pooled = torch.full((n_plans, z.shape[1]), -1e9, dtype=z.dtype)
            pooled = pooled.scatter_reduce(0, plan_of[:, None].expand_as(z), z, reduce="amax")
            overall = self.overall(pooled).squeeze(-1)
        return compute, comm, overall


class DreamShardCost(NeuroShardCompute):
    """DreamShard's cost network as an estimator.

    Configuration and learned state as :class:`~shardlab.costmodel.neural.NeuroShardCompute`
    (whose ``scale_ms_`` scales the compute heads), plus ``plan_scale_ms_``: the median plan
    cost (ms), scaling comm and overall. ``fit(samples, val_samples=None)`` on measured plans
    plus compute samples; ``predict(shards)`` -> (n, 2) fw/bw compute ms;
    ``predict_plan(devices)`` -> (per-device (G, 3) fw/bw/comm ms, overall ms)."""

    name = "dreamshard-cost"

    def __init__(self, epochs: int = 1000, lr: float = 1e-3, batch_size: int = 512, seed: int = 0,
                 log_target: bool = True, hidden: int = 128, encoding: int = 32, head_hidden: int = 64,
                 progress: bool = False, pretrain_epochs: int = 0):
        """``pretrain_epochs``: epochs of training the encoder and compute heads on the compute
        samples alone (kept: the best compute validation loss) before the joint training."""
        self.pretrain_epochs = pretrain_epochs
        self.hidden, self.encoding, self.head_hidden = hidden, encoding, head_hidden
        # The training settings only: NeuroShard's ranking loss is not part of this model's own fit.
        NeuralEstimator.__init__(self, epochs, lr, batch_size, seed, log_target, progress)

    def _new_net(self) -> DreamShardNet:  # type: ignore[override]
        return DreamShardNet(self.hidden, self.encoding, self.head_hidden)

    @staticmethod
    def _split(samples: Sequence[Sample], where: str) -> tuple[list[PlanRecord], list[ComputeRecord]]:
        """(plan records, compute records) of a mix; one-line error for any other kind."""
        plans, compute = [], []
        for r in as_records(samples):
            if isinstance(r, PlanRecord):
                plans.append(r)
            elif isinstance(r, ComputeRecord):
                compute.append(r)
            else:
                raise ShardlabError(f"{where}: sample '{r.key}' is a {type(r).__name__}, not a plan or compute sample")
        return plans, compute

    def fit(self, samples: Sequence[Sample], val_samples: Sequence[Sample] | None = None  # type: ignore[override]
            ) -> "DreamShardCost":
        """Train on measured plan records (all four heads) and compute records (the two compute
        heads alone), in any mix, keeping the epoch with the best validation loss: plan loss on
        the plans of ``val_samples`` plus compute loss on its compute records. Without
        validation plans, the plans of ``samples`` are split by key (80% train; validation: the
        10% val part, or the first training plan if it is empty); validation compute records
        without validation plans are refused (one line). Returns self."""
        where = f"{type(self).__name__}.fit"
        plans, compute = self._split(samples, where)
        val_plans, val_compute = self._split(val_samples or [], where)
        if val_compute and not val_plans:
            raise ShardlabError(f"{where}: field 'val_samples' holds {len(val_compute)} compute records and no "
                                "measured plan; validation needs plans")
        if not val_plans:
            parts = split_samples(plans)
            plans, val_plans = parts["train"], parts["val"] or parts["train"][:1]
        if not plans:
            raise ShardlabError(f"{where}: no measured plans")
        self._reset()
        self.profile_ = dict(plans[0].profile)
        tables = {t for p in plans for d in p.devices for t in d} | {t for r in compute for t in r.tables}
        self.scaler_ = FeatureScaler.fit(list(tables))
        shard_ms = ([r.fw_ms + r.bw_ms for r in compute] if compute else
                    [f + b for p in plans for f, b in zip(p.fw_compute_ms, p.bw_compute_ms) if f + b > 0])
        self.scale_ms_ = float(np.median(shard_ms))
        self.plan_scale_ms_ = float(np.median([p.cost_ms for p in plans]))
        seeded(self.seed)
        self.net_ = self._new_net()
        if self.pretrain_epochs and compute:
            self._fit_net([], compute, val_plans, val_compute, epochs=self.pretrain_epochs)
        self._fit_net(plans, compute, val_plans, val_compute)
        return self

    def fine_tuned(self, samples: Sequence[Sample], epochs: int, seed: int = 0) -> "DreamShardCost":
        """A copy of this fitted model trained ``epochs`` more epochs on ``samples`` (plans and
        compute records; validation: the plans' val split by key, as :meth:`fit` without
        ``val_samples``) from its current weights, feature scaling and scales: DreamShard's
        cost-network update after each round of measured plans. This model is unchanged."""
        self.check_fitted()
        plans, compute = self._split(samples, f"{type(self).__name__}.fine_tuned")
        parts = split_samples(plans)
        if not parts["train"]:
            raise ShardlabError(f"{type(self).__name__}.fine_tuned: no measured plans")
        m = type(self)(**{**self.config(), "epochs": epochs, "seed": seed})
        m.profile_, m.scaler_ = dict(self.profile_), self.scaler_
        m.scale_ms_, m.plan_scale_ms_ = self.scale_ms_, self.plan_scale_ms_
        m.provenance_, m.metrics_, m.history_ = self.provenance_, self.metrics_, list(self.history_)
        seeded(seed)
        m.net_ = copy.deepcopy(self.net_)
        m._fit_net(parts["train"], compute, parts["val"] or parts["train"][:1], [])
        return m

    def _fit_net(self, plans: Sequence[PlanRecord], compute: Sequence[ComputeRecord],
                 val_plans: Sequence[PlanRecord], val_compute: Sequence[ComputeRecord],
                 epochs: int | None = None) -> None:
        """Train ``net_`` (scaler and scales set) on the four heads' losses; keep the best epoch.
        Without ``plans`` (pre-training): the compute heads alone, validated on ``val_compute``
        (or, without it, on the plans' loss)."""
        net = self.net_
        devs = [p.devices for p in plans]
        vdevs = [p.devices for p in val_plans]
        cshards = [r.tables for r in compute]

        def plan_targets(ps: Sequence[PlanRecord]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            comp = np.array([[f, b] for p in ps for f, b in zip(p.fw_compute_ms, p.bw_compute_ms)])
            comm = np.array([f + b for p in ps for f, b in zip(p.fw_comm_ms, p.bw_comm_ms)])
            cost = np.array([p.cost_ms for p in ps])
            return tuple(torch.tensor(self.to_target(a, scale), dtype=torch.float32)
                         for a, scale in ((comp, self.scale_ms_), (comm, self.plan_scale_ms_),
                                          (cost, self.plan_scale_ms_)))  # type: ignore[return-value]

        def plan_loss(plan_devs: Sequence[Sequence[Sequence[Table]]], targets: tuple[torch.Tensor, ...]
                      ) -> torch.Tensor:
            shards = [d for p in plan_devs for d in p]
            x, seg = self._batch(shards)
            plan_of = torch.repeat_interleave(torch.arange(len(plan_devs)),
                                              torch.tensor([len(p) for p in plan_devs]))
            comp, comm, overall = net(x, seg, len(shards), plan_of, len(plan_devs))
            return (((comp - targets[0]) ** 2).mean() + ((comm - targets[1]) ** 2).mean()
                    + ((overall - targets[2]) ** 2).mean())

        def compute_target(rs: Sequence[ComputeRecord]) -> torch.Tensor:
            return torch.tensor(self.to_target(np.array([[r.fw_ms, r.bw_ms] for r in rs]), self.scale_ms_),
                                dtype=torch.float32)

        ctarget = compute_target(compute) if compute else None
        n_plans = len(devs)
        vtargets = plan_targets(val_plans)
        vcompute = [r.tables for r in val_compute]
        vctarget = compute_target(val_compute) if val_compute else None

        def val_loss() -> torch.Tensor:
            total = plan_loss(vdevs, vtargets) if plans or vctarget is None else torch.zeros(())
            if vctarget is not None:
                x, seg = self._batch(vcompute)
                total = total + ((net(x, seg, len(vcompute))[0] - vctarget) ** 2).mean()
            return total

        def loss(idx: torch.Tensor) -> torch.Tensor:
            pi = idx[idx < n_plans].tolist()
            ci = (idx[idx >= n_plans] - n_plans).tolist()
            total = torch.zeros(())
            if pi:
                total = total + plan_loss([devs[i] for i in pi], tuple(t for t in plan_targets([plans[i] for i in pi])))
            if ci and ctarget is not None:
                x, seg = self._batch([cshards[i] for i in ci])
                comp, _, _ = net(x, seg, len(ci))
                total = total + ((comp - ctarget[ci]) ** 2).mean()
            return total

        self._train({"net": net}, loss, n_plans + len(cshards), val_loss, f"train {self.name}", epochs)

    def _parts(self) -> tuple[nn.Module, nn.Module]:
        """(table encoder, compute head) of the fitted network."""
        self.check_fitted()
        return self.net_.shard.encoder, self.net_.shard.head

    @torch.no_grad()
    def predict_plan(self, devices: Sequence[Sequence[Table]]) -> tuple[np.ndarray, float]:
        """Per-device (G, 3) fw compute, bw compute, comm ms, and the overall plan cost (ms)."""
        self.check_fitted()
        x, seg = self._batch(devices)
        comp, comm, overall = self.net_(x, seg, len(devices), torch.zeros(len(devices), dtype=torch.long), 1)
        per = np.concatenate([self.from_target(comp.numpy(), self.scale_ms_),
                              self.from_target(comm.numpy(), self.plan_scale_ms_)[:, None]], axis=1)
        per[[len(d) == 0 for d in devices]] = 0.0
        return np.maximum(per, 0.0), float(self.from_target(overall.numpy(), self.plan_scale_ms_)[0])

    def _reset(self) -> None:
        super()._reset()
        self.plan_scale_ms_: float = 1.0

    def _payload(self) -> dict[str, Any]:
        return {**super()._payload(), "plan_scale_ms": self.plan_scale_ms_}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> "DreamShardCost":
        """The model a :meth:`state` dict describes (files written before the two scales hold one
        ``scale_ms`` for all heads)."""
        m = super().from_state(d)
        m.plan_scale_ms_ = d.get("plan_scale_ms", d["scale_ms"])
        return m  # type: ignore[return-value]
