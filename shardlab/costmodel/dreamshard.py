"""DreamShard's cost network (ALGORITHMS.md section 5).

A shared table encoder (21 -> 128 -> 32, ReLU) is summed over each device's tables; three
heads (32 -> 64 -> 1) predict that device's forward compute, backward compute and
communication (fw + bw all-to-all) ms; an overall head (32 -> 64 -> 1) reads the per-device
sums, takes their MAX over devices, and predicts the plan cost (ms). Sum and max make it
independent of the numbers of tables and devices.

Training data (``fit(samples)``, one list): measured plans (:class:`~shardlab.data.samples.PlanRecord`:
each device's tables and measured fw/bw compute and fw/bw comm, and the plan cost), optionally
mixed with measured compute samples (:class:`~shardlab.data.samples.ComputeRecord`), which
supervise the two compute heads alone. Loss: the sum of the four MSEs on log(1 + ms /
scale) (see :mod:`shardlab.costmodel.neural` for why log). As a :class:`ComputeModel` it
predicts (fw, bw) compute per shard, so it plugs into the same simulation and search code.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from shardlab import constants as C
from shardlab.costmodel.metrics import split_samples
from shardlab.costmodel.neural import NeuroShardCompute, ShardNet
from shardlab.costmodel.neural_base import mlp, seeded
from shardlab.data.features import FeatureScaler
from shardlab.data.samples import ComputeRecord, PlanRecord, as_records
from shardlab.errors import ShardlabError
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
    """DreamShard's cost network as an estimator (configuration and learned state as
    :class:`~shardlab.costmodel.neural.NeuroShardCompute`; ``scale_ms_`` is the median plan
    cost). ``fit(samples, val_samples=None)`` on measured plans plus compute samples;
    ``predict(shards)`` -> (n, 2) fw/bw compute ms; ``predict_plan(devices)`` -> (per-device
    (G, 3) fw/bw/comm ms, overall ms)."""

    name = "dreamshard-cost"

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
        heads alone), in any mix, keeping the epoch with the best plan loss on the plans of
        ``val_samples``. Without validation plans, the plans of ``samples`` are split by key
        (80% train; validation: the 10% val part, or the first training plan if it is empty).
        Compute records in ``val_samples`` are refused (one line): validation is on plans.
        Returns self."""
        where = f"{type(self).__name__}.fit"
        plans, compute = self._split(samples, where)
        val_plans, val_compute = self._split(val_samples or [], where)
        if val_compute:
            raise ShardlabError(f"{where}: field 'val_samples' holds {len(val_compute)} compute records; validation "
                                "is on measured plans (pass compute records in 'samples')")
        if not val_plans:
            parts = split_samples(plans)
            plans, val_plans = parts["train"], parts["val"] or parts["train"][:1]
        if not plans:
            raise ShardlabError(f"{where}: no measured plans")
        self._reset()
        self.profile_ = dict(plans[0].profile)
        devs = [p.devices for p in plans]
        vdevs = [p.devices for p in val_plans]
        cshards = [r.tables for r in compute]
        self.scaler_ = FeatureScaler.fit(list({t for p in devs for d in p for t in d} | {t for s in cshards for t in s}))
        self.scale_ms_ = float(np.median([p.cost_ms for p in plans]))
        seeded(self.seed)
        net = self.net_ = self._new_net()

        def plan_targets(ps: Sequence[PlanRecord]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            comp = np.array([[f, b] for p in ps for f, b in zip(p.fw_compute_ms, p.bw_compute_ms)])
            comm = np.array([f + b for p in ps for f, b in zip(p.fw_comm_ms, p.bw_comm_ms)])
            cost = np.array([p.cost_ms for p in ps])
            return tuple(torch.tensor(self.to_target(a, self.scale_ms_), dtype=torch.float32)
                         for a in (comp, comm, cost))  # type: ignore[return-value]

        def plan_loss(plan_devs: Sequence[Sequence[Sequence[Table]]], targets: tuple[torch.Tensor, ...]
                      ) -> torch.Tensor:
            shards = [d for p in plan_devs for d in p]
            x, seg = self._batch(shards)
            plan_of = torch.repeat_interleave(torch.arange(len(plan_devs)),
                                              torch.tensor([len(p) for p in plan_devs]))
            comp, comm, overall = net(x, seg, len(shards), plan_of, len(plan_devs))
            return (((comp - targets[0]) ** 2).mean() + ((comm - targets[1]) ** 2).mean()
                    + ((overall - targets[2]) ** 2).mean())

        ctarget = torch.tensor(self.to_target(np.array([[r.fw_ms, r.bw_ms] for r in compute]), self.scale_ms_),
                               dtype=torch.float32) if compute else None
        n_plans = len(devs)
        vtargets = plan_targets(val_plans)

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

        self._train({"net": net}, loss, n_plans + len(cshards), lambda: plan_loss(vdevs, vtargets),
                    f"train {self.name}")
        return self

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
                              self.from_target(comm.numpy(), self.scale_ms_)[:, None]], axis=1)
        per[[len(d) == 0 for d in devices]] = 0.0
        return np.maximum(per, 0.0), float(self.from_target(overall.numpy(), self.scale_ms_)[0])
