"""DreamShard (docs/methods.md): a policy trained with REINFORCE on an *estimated* MDP
whose reward comes from a cost network, with measured plans refreshing that network.

The networks and the episode are here; the training loop, readable top to bottom (CleanRL
style, one ``DreamShardArgs``), is :mod:`shardlab.workflows.train_dreamshard` (it measures
plans, so it sits in the workflows layer).

1. ``PolicyNet``: its own table encoder (21 -> 128 -> 32, ReLU) summed per device, concatenated
   with an embedding (3 -> 64 -> 32) of that device's cost-network predictions (fw compute, bw
   compute, comm; detached); a linear layer gives one logit per device; softmax over the
   devices where the next table fits.
2. Episode (:func:`~shardlab.search.episode.play_episodes`): tables sorted by predicted
   single-table cost (descending); each step places the next table; reward = minus the cost
   network's predicted plan cost (overall head, ms). No hardware.
3. Training (workflows layer): per iteration, (a) measure plans of the current policy through
   the evaluator into a store, (b) refit the cost network on every measured plan, (c) REINFORCE
   on the estimated MDP (episodes in batches per task, rewards standardised per batch, entropy
   bonus, Adam, linear decay).
4. ``DreamShardSharder``: greedy (arg-max) decoding of a trained policy; same seed, same plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from shardlab import constants as C
from shardlab.costmodel.dreamshard import DreamShardCost
from shardlab.costmodel.neural_base import mlp
from shardlab.search.policies import PolicyAgent, PolicySharder
from shardlab.search.episode import Episodes, PlacementState, play_episodes
from shardlab.tables import Task

FORMAT = "shardlab-dreamshard-policy-v1"


class PolicyNet(nn.Module):
    """Per-device logits from summed table encodings and the device's predicted costs."""

    def __init__(self, hidden: int = 128, encoding: int = 32):
        super().__init__()
        self.encoder = mlp((C.N_TABLE_FEATURES, hidden, encoding), last_relu=True)
        self.cost_embed = mlp((3, 64, encoding), last_relu=True)
        self.logit = nn.Linear(2 * encoding, 1)

    def forward(self, device_sums: torch.Tensor, device_costs: torch.Tensor) -> torch.Tensor:
        """(B, G, 32) summed encodings + (B, G, 3) predicted costs -> (B, G) logits."""
        return self.logit(torch.cat([device_sums, self.cost_embed(device_costs)], dim=-1)).squeeze(-1)


class DreamShardAgent(PolicyAgent):
    """Policy + cost network + the estimated MDP's episode (module docstring, step 2)."""

    FORMAT = FORMAT
    METHOD = "dreamshard"
    POLICY = PolicyNet
    COST = DreamShardCost

    def rollout(self, task: Task, n: int, greedy: bool = False, generator: torch.Generator | None = None,
                pins: Sequence[int] = (), witness: Sequence[int] | None = None) -> Episodes:
        """``n`` parallel episodes on ``task`` (feasible moves only); ``reward`` = minus
        ``cost_ms``, the cost network's predicted plan cost (overall head, ms); ``pins`` and
        ``witness``: :func:`~shardlab.search.episode.play_episodes`."""
        order = self.order(task, len(pins))
        x = torch.from_numpy(self.cost.scaler_.transform([task.tables[i] for i in order]))  # shared scaling
        net = self.cost.net_
        enc_policy = self.policy.encoder(x)                               # (T, 32), with grad
        with torch.no_grad():
            enc_cost = net.shard.encoder(x)                               # (T, 32)

        def step(state: PlacementState) -> tuple[torch.Tensor, None]:
            with torch.no_grad():
                sums_c = state.sums["cost"]                               # (n, G, 32)
                costs = torch.cat([net.shard.head(sums_c), net.comm(sums_c)], dim=-1)
            return self.policy(state.sums["policy"], costs), None

        def finish(state: PlacementState) -> tuple[torch.Tensor, torch.Tensor]:
            with torch.no_grad():
                pooled = state.sums["cost"].amax(dim=1)                   # max over devices
                cost = torch.as_tensor(self.cost.from_target(net.overall(pooled).squeeze(-1).numpy(),
                                                             self.cost.plan_scale_ms_))
            return -cost, cost

        return play_episodes(task, order, n, step, finish, greedy=greedy, generator=generator, pins=pins,
                             witness=witness, accumulate={"cost": enc_cost, "policy": enc_policy})

    def decode(self, task: Task, pins: Sequence[int] = (), witness: Sequence[int] | None = None
               ) -> tuple[list[int], float]:
        """Greedy decoding; the score is the predicted plan cost (ms)."""
        with torch.no_grad():
            ep = self.rollout(task, 1, greedy=True, pins=pins, witness=witness)
        return [int(d) for d in ep.devices()[0]], float(ep.cost_ms[0])


@dataclass
class DreamShardSharder(PolicySharder):
    """Shard with a trained DreamShard policy (a shipped one by name, or a path)."""

    name: str = "dreamshard"
    model: str = "dreamshard_policy"
    agent_class = DreamShardAgent
