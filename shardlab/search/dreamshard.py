"""DreamShard (ALGORITHMS.md section 5): a policy trained with REINFORCE on an *estimated* MDP
whose reward comes from a cost network, with measured plans refreshing that network.

Readable top to bottom, CleanRL style:

1. ``PolicyNet``: its own table encoder (21 -> 128 -> 32, ReLU) summed per device, concatenated
   with an embedding (3 -> 64 -> 32) of that device's cost-network predictions (fw compute, bw
   compute, comm; detached); a linear layer gives one logit per device; softmax over the
   devices where the next table fits.
2. Episode: tables sorted by predicted single-table cost (descending); each step places the next
   table; reward = minus the cost network's predicted plan cost (overall head). No hardware.
3. ``train_dreamshard`` (:mod:`shardlab.experiments.policy_training`, since it measures): per iteration, (a) roll out the current policy on random training tasks
   and measure those plans through the evaluator (``measure_plan``; CPU here) into the buffer,
   (b) refit the cost network on the buffer, (c) REINFORCE on the estimated MDP (episodes in
   batches per task, rewards standardised per batch, entropy bonus, Adam 5e-4, linear decay).
4. ``DreamShardSharder``: greedy (arg-max) decoding of a trained policy; same seed, same plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn

from shardlab import constants as C
from shardlab.costmodel.dreamshard import DreamShardCost
from shardlab.costmodel.neural import _seeded, mlp
from shardlab.data.features import FeatureScaler
from shardlab.errors import InfeasibleError
from shardlab.plan import Plan
from shardlab.search.base import PolicyAgent, PolicySharder
from shardlab.tables import Table, Task

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


@dataclass
class Episodes:
    """A batch of B episodes on one task: actions (B, T), log-probs and entropies summed over
    steps (B,), predicted plan cost (B,) in ms."""

    actions: torch.Tensor
    log_prob: torch.Tensor
    entropy: torch.Tensor
    cost_ms: torch.Tensor


class DreamShardAgent(PolicyAgent):
    """Policy + cost network + the table order and rollout of the estimated MDP."""

    FORMAT = FORMAT
    POLICY = PolicyNet
    COST = DreamShardCost

    def _features(self, tables: Sequence[Table]) -> torch.Tensor:
        scaler: FeatureScaler = self.cost.scaler_  # the cost network's normalisation, shared
        return torch.from_numpy(scaler.transform(list(tables)))

    def rollout(self, task: Task, n: int, greedy: bool = False, generator: torch.Generator | None = None
                ) -> Episodes:
        """Place the task's tables in :meth:`order` for ``n`` parallel episodes."""
        order = self.order(task)
        tables = [task.tables[i] for i in order]
        x = self._features(tables)
        g, t_count = task.ngpu, len(tables)
        enc_policy = self.policy.encoder(x)                               # (T, 32), with grad
        with torch.no_grad():
            net = self.cost.net_
            enc_cost = net.shard.encoder(x)                               # (T, 32)
        need = torch.tensor([task.table_bytes(t) for t in tables], dtype=torch.float64)
        mem = torch.zeros(n, g, dtype=torch.float64)
        assign = torch.zeros(n, g, t_count)                               # one-hot placements
        actions, log_prob, entropy = [], torch.zeros(n), torch.zeros(n)
        for step in range(t_count):
            with torch.no_grad():
                sums_c = assign @ enc_cost                                # (n, G, 32)
                costs = torch.cat([net.shard.head(sums_c), net.comm(sums_c)], dim=-1)
            logits = self.policy(assign @ enc_policy, costs)
            fits = mem + need[step] <= task.mem_cap_bytes
            if not bool(fits.any(dim=1).all()):
                raise InfeasibleError(f"task '{task.name}': table '{tables[step].name}' fits no device "
                                      "in a DreamShard episode", tables[step].name, 0.0)
            logits = logits.masked_fill(~fits, float("-inf"))
            dist = torch.distributions.Categorical(logits=logits)
            a = logits.argmax(dim=1) if greedy else dist.sample() if generator is None else \
                torch.multinomial(dist.probs.detach(), 1, generator=generator).squeeze(1)
            log_prob = log_prob + dist.log_prob(a)
            entropy = entropy + dist.entropy()
            actions.append(a)
            assign = assign.clone()
            assign[torch.arange(n), a, step] = 1.0
            mem = mem.clone()
            mem[torch.arange(n), a] += need[step]
        with torch.no_grad():
            pooled = (assign @ enc_cost).amax(dim=1)                      # max over devices
            overall = torch.as_tensor(self.cost._from_target(net.overall(pooled).squeeze(-1).numpy(),
                                                             self.cost.scale_ms_))
        acts = torch.stack(actions, dim=1)
        back = torch.empty_like(acts)
        back[:, torch.tensor(order)] = acts                                # task order
        return Episodes(back, log_prob, entropy, overall)

    def plan(self, task: Task, seed: int = 0, method: str = "dreamshard") -> Plan:
        """Greedy decoding: each table on the policy's most likely feasible device."""
        with torch.no_grad():
            ep = self.rollout(task, 1, greedy=True)
        return Plan.table_wise(task, [int(d) for d in ep.actions[0]], method, seed)



def reinforce(agent: DreamShardAgent, tasks: Sequence[Task], updates: int, episodes: int = 16,
              lr: float = 5e-4, entropy_coef: float = 1e-3, seed: int = 0, progress: Any = None) -> list[float]:
    """REINFORCE on the estimated MDP; returns the mean predicted cost (ms) per update."""
    gen = _seeded(seed)
    opt = torch.optim.Adam(agent.policy.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 - k / max(updates, 1))
    curve = []
    for k in range(updates):
        task = tasks[k % len(tasks)]
        ep = agent.rollout(task, episodes, generator=gen)
        reward = -ep.cost_ms
        adv = (reward - reward.mean()) / (reward.std() + 1e-8)
        loss = -(adv.float() * ep.log_prob).mean() - entropy_coef * ep.entropy.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        curve.append(float(ep.cost_ms.mean()))
        if progress is not None:
            progress.update(1)
    return curve


@dataclass
class DreamShardSharder(PolicySharder):
    """Shard with a trained DreamShard policy (a shipped one by name, or a path)."""

    name: str = "dreamshard"
    model: str = "dreamshard_policy"
    agent_class = DreamShardAgent
