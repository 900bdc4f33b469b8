"""AutoShard (docs/methods.md): an LSTM policy trained by actor-learner RL with V-trace
off-policy correction (IMPALA-style), rewarded by a neural cost model that is refined online
from measured shards.

The networks and the episode are here; the training loop, readable top to bottom (CleanRL
style, one ``AutoShardArgs``, V-trace included), is :mod:`shardlab.workflows.train_autoshard`
(it measures shards, so it sits in the workflows layer). The RL machinery is written by hand
(V-trace is ~25 lines): the maintained libraries that have it (TorchRL, RLlib) pin torch
releases or pull in large stacks, which this CPU-pinned install (torch 2.13.0 +
fbgemm-gpu-cpu 1.8.0) cannot take.

- State at step t: the features of the table to place + the fraction placed, through an MLP
  and a 2-layer LSTM over the decisions. Action g (a device): the sum of its tables' encodings,
  its predicted compute cost and its memory used (fraction of the cap). Logit from an MLP over
  [state, action, state * action]; a value head reads the state.
- Episode (:func:`~shardlab.search.episode.play_episodes`): tables sorted by predicted single-table cost, descending. Final reward (the only one):
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
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from shardlab import constants as C
from shardlab.costmodel.neural import AutoShardCompute
from shardlab.costmodel.neural_base import mlp
from shardlab.search.policies import PolicyAgent, PolicySharder
from shardlab.search.episode import Episodes, PlacementState, play_episodes
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
    METHOD = "autoshard"
    POLICY = AutoShardPolicy
    COST = AutoShardCompute

    def run(self, policy: AutoShardPolicy, task: Task, n: int, actions: torch.Tensor | None = None,
            greedy: bool = False, mask: bool = False, generator: torch.Generator | None = None,
            pins: Sequence[int] = (), witness: Sequence[int] | None = None) -> Episodes:
        """Play (or, given ``actions`` (n, T) in placement order, replay) ``n`` episodes of
        ``policy`` (the learner's, or the actors' lagging copy); ``reward`` is the final reward
        of the module docstring, ``value`` the critic's estimates; ``pins`` and ``witness``:
        :func:`~shardlab.search.episode.play_episodes`."""
        order = self.order(task, len(pins))
        tables = [task.tables[i] for i in order]
        x = torch.from_numpy(self.cost.scaler_.transform(tables))
        emb = torch.as_tensor(self.cost.embed(tables), dtype=torch.float32)    # cost-model encodings
        enc = policy.table_enc(x)
        g, t_count, cap = task.ngpu, len(tables), float(task.mem_cap_bytes)
        hc = None

        def predicted(state: PlacementState) -> np.ndarray:
            """(n, G) predicted compute ms of each device's tables so far."""
            return self.cost.predict_sums(state.sums["cost"].reshape(n * g, -1).numpy(),
                                          state.counts.reshape(-1).numpy()).sum(axis=1).reshape(n, g)

        def step(state: PlacementState) -> tuple[torch.Tensor, torch.Tensor]:
            nonlocal hc
            with torch.no_grad():
                pred = predicted(state)
            info = torch.stack([torch.log1p(torch.as_tensor(pred, dtype=torch.float32) / self.cost.scale_ms_),
                                (state.mem / cap).float()], dim=-1)
            now = torch.cat([x[state.t].expand(n, -1), torch.full((n, 1), state.t / t_count)], dim=1)
            logits, value, hc = policy.step(now, state.sums["policy"], info, hc)
            return logits, value

        def finish(state: PlacementState) -> tuple[torch.Tensor, None]:
            with torch.no_grad():
                cost = predicted(state)
                over = state.mem.max(dim=1).values
                balance = torch.as_tensor(cost.min(axis=1) / np.maximum(cost.max(axis=1), 1e-9))
                return torch.where(over > cap, (cap - over) / cap, balance.double()).float(), None

        return play_episodes(task, order, n, step, finish, mask=mask, greedy=greedy, actions=actions,
                             generator=generator, accumulate={"cost": emb, "policy": enc}, pins=pins, witness=witness)

    def decode(self, task: Task, pins: Sequence[int] = (), witness: Sequence[int] | None = None
               ) -> tuple[list[int], float]:
        """Greedy decoding with infeasible devices masked; the score is minus the final reward."""
        with torch.no_grad():
            ep = self.run(self.policy, task, 1, greedy=True, mask=True, pins=pins, witness=witness)
        return [int(d) for d in ep.devices()[0]], -float(ep.reward[0])


@dataclass
class AutoShardSharder(PolicySharder):
    """Shard with a trained AutoShard policy (a shipped one by name, or a path)."""

    name: str = "autoshard"
    model: str = "autoshard_policy"
    agent_class = AutoShardAgent

