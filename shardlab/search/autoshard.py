"""AutoShard (ALGORITHMS.md section 6): an LSTM policy trained by actor-learner RL with V-trace
off-policy correction (IMPALA-style), rewarded by a neural cost model that is refined online
from measured shards.

Readable top to bottom, CleanRL style. The RL machinery is written here (V-trace is ~25
lines): the maintained libraries that have it (TorchRL, RLlib) pin torch releases or pull in
large stacks, which this CPU-pinned install (torch 2.13.0 + fbgemm-gpu-cpu 1.8.0) cannot take.

- State at step t: the features of the table to place + the fraction placed, through an MLP
  and a 2-layer LSTM over the decisions. Action g (a device): the sum of its tables' encodings,
  its predicted compute cost and its memory used (fraction of the cap). Logit from an MLP over
  [state, action, state * action]; a value head reads the state.
- Episode: tables sorted by predicted single-table cost, descending. Final reward (the only one):
  if a device exceeds the memory cap, (cap - max used) / cap; otherwise min / max over devices
  of the cost model's predicted compute cost. (Training lets infeasible actions happen so the
  reward can teach the cap; the sharder masks them, so its plans are always feasible.)
- Actor-learner: actors roll out episodes with a *behaviour* copy of the policy refreshed every
  ``sync_every`` updates (so their data is off-policy), the learner corrects with V-trace
  (rho-bar = c-bar = 1). Actors run in this process, one after another: the structure and the
  correction are IMPALA's, the parallelism is not.
- Cost model: :class:`~shardlab.costmodel.neural.AutoShardCompute`, refit every ``refit_every``
  updates on the measured compute samples plus a replay buffer of shards measured by the
  evaluator (each device of a policy plan is a measured shard).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from shardlab import constants as C
from shardlab.costmodel.neural import AutoShardCompute, mlp
from shardlab.errors import InfeasibleError
from shardlab.plan import Plan
from shardlab.search.base import PolicyAgent, PolicySharder
from shardlab.tables import Task

FORMAT = "shardlab-autoshard-policy-v1"
HIDDEN = 64


class AutoShardPolicy(nn.Module):
    """LSTM core over decisions; per-device logits from [state, action, state * action]."""

    def __init__(self):
        super().__init__()
        self.state_in = mlp((C.N_TABLE_FEATURES + 1, HIDDEN, HIDDEN), last_relu=True)
        self.core = nn.LSTM(HIDDEN, HIDDEN, num_layers=2, batch_first=True)
        self.table_enc = mlp((C.N_TABLE_FEATURES, HIDDEN, 32), last_relu=True)
        self.action_in = mlp((32 + 2, HIDDEN, HIDDEN), last_relu=True)
        self.logit = mlp((3 * HIDDEN, HIDDEN, 1))
        self.value = nn.Linear(HIDDEN, 1)

    def step(self, state: torch.Tensor, device_sums: torch.Tensor, device_info: torch.Tensor,
             hc: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """state (B, 22), device_sums (B, G, 32), device_info (B, G, 2) -> logits (B, G), value (B,), hc."""
        h, hc = self.core(self.state_in(state).unsqueeze(1), hc)
        h = h.squeeze(1)
        a = self.action_in(torch.cat([device_sums, device_info], dim=-1))
        hs = h.unsqueeze(1).expand_as(a)
        return self.logit(torch.cat([hs, a, hs * a], dim=-1)).squeeze(-1), self.value(h).squeeze(-1), hc


class AutoShardAgent(PolicyAgent):
    """Policy + cost model + the episode of the MDP."""

    FORMAT = FORMAT
    POLICY = AutoShardPolicy
    COST = AutoShardCompute

    def run(self, policy: AutoShardPolicy, task: Task, n: int, actions: torch.Tensor | None = None,
            greedy: bool = False, mask: bool = False, generator: torch.Generator | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Play (or, given ``actions`` (n, T) in sorted order, replay) n episodes; returns actions,
        log-probs (n, T), entropies (n, T), values (n, T), final rewards (n,)."""
        order = self.order(task)
        tables = [task.tables[i] for i in order]
        x = torch.from_numpy(self.cost.scaler_.transform(tables))
        emb = torch.as_tensor(self.cost.embed(tables), dtype=torch.float32)    # cost-model encodings
        g, t_count, cap = task.ngpu, len(tables), float(task.mem_cap_bytes)
        need = torch.tensor([task.table_bytes(t) for t in tables], dtype=torch.float64)
        enc = policy.table_enc(x)
        sums_cost = torch.zeros(n, g, emb.shape[1])
        assign = torch.zeros(n, g, t_count)
        mem = torch.zeros(n, g, dtype=torch.float64)
        hc, acts, logps, ents, vals = None, [], [], [], []
        for t in range(t_count):
            with torch.no_grad():
                pred = self.cost.predict_sums(sums_cost.reshape(n * g, -1).numpy(),
                                              assign.sum(-1).reshape(-1).numpy()).sum(axis=1)
            info = torch.stack([torch.log1p(torch.as_tensor(pred, dtype=torch.float32).reshape(n, g)
                                            / self.cost.scale_ms_), (mem / cap).float()], dim=-1)
            state = torch.cat([x[t].expand(n, -1), torch.full((n, 1), t / t_count)], dim=1)
            logits, value, hc = policy.step(state, assign @ enc, info, hc)
            if mask:
                fits = mem + need[t] <= cap
                if not bool(fits.any(dim=1).all()):
                    raise InfeasibleError(f"task '{task.name}': table '{tables[t].name}' fits no device",
                                          tables[t].name, 0.0)
                logits = logits.masked_fill(~fits, float("-inf"))
            dist = torch.distributions.Categorical(logits=logits)
            if actions is not None:
                a = actions[:, t]
            elif greedy:
                a = logits.argmax(dim=1)
            else:
                a = torch.multinomial(dist.probs.detach(), 1, generator=generator).squeeze(1)
            acts.append(a)
            logps.append(dist.log_prob(a))
            ents.append(dist.entropy())
            vals.append(value)
            assign = assign.clone()
            assign[torch.arange(n), a, t] = 1.0
            mem = mem.clone()
            mem[torch.arange(n), a] += need[t]
            sums_cost = sums_cost.clone()
            sums_cost[torch.arange(n), a] += emb[t]
        with torch.no_grad():
            cost = self.cost.predict_sums(sums_cost.reshape(n * g, -1).numpy(),
                                          assign.sum(-1).reshape(-1).numpy()).sum(axis=1).reshape(n, g)
            over = mem.max(dim=1).values
            balance = torch.as_tensor(cost.min(axis=1) / np.maximum(cost.max(axis=1), 1e-9))
            reward = torch.where(over > cap, (cap - over) / cap, balance.double()).float()
        return torch.stack(acts, 1), torch.stack(logps, 1), torch.stack(ents, 1), torch.stack(vals, 1), reward

    def plan(self, task: Task, seed: int = 0, method: str = "autoshard") -> Plan:
        """Greedy decoding with infeasible devices masked."""
        with torch.no_grad():
            acts = self.run(self.policy, task, 1, greedy=True, mask=True)[0][0]
        order = self.order(task)
        devices = [0] * len(order)
        for step, i in enumerate(order):
            devices[i] = int(acts[step])
        return Plan.table_wise(task, devices, method, seed)



def vtrace(behaviour_logp: torch.Tensor, target_logp: torch.Tensor, values: torch.Tensor,
           reward: torch.Tensor, rho_bar: float = 1.0, c_bar: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets (B, T) and policy-gradient advantages (B, T) for episodes whose only
    reward is the final one (gamma = 1, value after the last step = 0)."""
    with torch.no_grad():
        ratio = torch.exp(target_logp - behaviour_logp)
        rho, c = ratio.clamp(max=rho_bar), ratio.clamp(max=c_bar)
        b, t_count = values.shape
        rewards = torch.zeros(b, t_count)
        rewards[:, -1] = reward
        next_values = torch.cat([values[:, 1:], torch.zeros(b, 1)], dim=1)
        delta = rho * (rewards + next_values - values)
        vs_minus_v = torch.zeros(b, t_count)
        acc = torch.zeros(b)
        for t in reversed(range(t_count)):
            acc = delta[:, t] + c[:, t] * acc
            vs_minus_v[:, t] = acc
        vs = values + vs_minus_v
        next_vs = torch.cat([vs[:, 1:], torch.zeros(b, 1)], dim=1)
        advantage = rho * (rewards + next_vs - values)
    return vs, advantage


@dataclass
class AutoShardSharder(PolicySharder):
    """Shard with a trained AutoShard policy (a shipped one by name, or a path)."""

    name: str = "autoshard"
    model: str = "autoshard_policy"
    agent_class = AutoShardAgent

