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

import copy
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from shardlab import constants as C
from shardlab.costmodel.neural import AutoShardCompute, _seeded, mlp
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


def train_autoshard(cost: AutoShardCompute, updates: int = 300, episodes: int = 16, ngpu: int | Sequence[int] = 4,
                    ntables: tuple[int, int] = (10, 60), sync_every: int = 4, lr: float = 5e-4,
                    entropy_coef: float = 1e-2, value_coef: float = 0.5, measure_store: str | None = None,
                    refit_every: int = 100, measure_plans: int = 2, compute_samples: Sequence[dict[str, Any]] = (),
                    profile: str = "cpu", seed: int = 0, progress: bool = True) -> AutoShardAgent:
    """Actor-learner training (module docstring). With ``measure_store``, every ``refit_every``
    updates ``measure_plans`` greedy plans are measured through the evaluator into the store
    (kind ``plan:<G>``) and the cost model is refit on ``compute_samples`` + those shards.
    ``ngpu``: one device count or several (training tasks cycle over them, and so do the
    measured plans), so one policy serves them all."""
    from tqdm.auto import tqdm

    from shardlab.data.tasks import generate_task

    gen = _seeded(seed)
    rng = np.random.default_rng(seed)
    agent = AutoShardAgent(cost, seed=seed)
    behaviour = copy.deepcopy(agent.policy)
    opt = torch.optim.Adam(agent.policy.parameters(), lr=lr)
    batch = cost.profile_.get("batch_size", C.DEFAULT_BATCH_SIZE)
    gpus = [int(ngpu)] if np.isscalar(ngpu) else [int(g) for g in ngpu]
    tasks = [generate_task(ntables=int(rng.integers(ntables[0], ntables[1] + 1)), ngpu=gpus[j % len(gpus)],
                           batch_size=batch, seed=int(rng.integers(2**31)), split="train") for j in range(16)]
    history = []
    for k in tqdm(range(updates), desc="autoshard V-trace", disable=not progress):
        task = tasks[k % len(tasks)]
        with torch.no_grad():   # actor: behaviour policy (lagging copy)
            acts, blogp, _, _, reward = agent.run(behaviour, task, episodes, generator=gen)
        _, logp, ent, values, _ = agent.run(agent.policy, task, episodes, actions=acts)   # learner
        vs, adv = vtrace(blogp, logp.detach(), values.detach(), reward)
        loss = (-(adv * logp).mean() + value_coef * ((vs - values) ** 2).mean() - entropy_coef * ent.mean())
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.policy.parameters(), 40.0)
        opt.step()
        if (k + 1) % sync_every == 0:
            behaviour.load_state_dict(agent.policy.state_dict())
        history.append({"update": k, "mean_reward": float(reward.mean()),
                        "feasible": float((reward >= 0).float().mean())})
        if measure_store and (k + 1) % refit_every == 0:
            g = gpus[((k + 1) // refit_every - 1) % len(gpus)]
            agent.cost = refit_cost_online(agent, measure_store, compute_samples, g, ntables, profile,
                                           measure_plans, seed + k, campaign_seed=seed)
    agent.history_ = history
    return agent


def refit_cost_online(agent: AutoShardAgent, store: str, compute_samples: Sequence[dict[str, Any]], ngpu: int,
                      ntables: tuple[int, int], profile: str, n_plans: int, seed: int,
                      campaign_seed: int = 0) -> AutoShardCompute:
    """Measure ``n_plans`` more greedy policy plans on ``ngpu`` devices (evaluator) and refit the
    cost model on the compute samples plus every measured device shard of every plan in the
    store, whatever its G (the replay buffer). ``campaign_seed`` keys the measured plans (the
    same for a whole training run, so each call adds exactly ``n_plans``); ``seed`` the refit."""
    from shardlab.profile.store import SampleStore
    from shardlab.search.plan_campaign import plan_prefix, run_plan_campaign

    prefix = plan_prefix(ngpu, profile, seed=campaign_seed)
    with SampleStore(store) as s:
        have = sum(k.startswith(prefix) for k in s.keys(f"plan:{ngpu}"))
    run_plan_campaign(store, have + n_plans, ngpu, profile, ntables=ntables, seed=campaign_seed,
                      plan_for=lambda task, i: agent.plan(task, i), progress=False)
    with SampleStore(store) as s:
        plans = [p for kind in s.kinds() if kind.startswith("plan:") for p in s.samples(kind)]
    shards = [{"key": f"{p['key']}:dev{d}", "tables": tabs, "fw_ms": c["fw_compute_ms"], "bw_ms": c["bw_compute_ms"],
               "profile": p["profile"]} for p in plans for d, (tabs, c) in enumerate(zip(p["devices"], p["per_device"]))
              if tabs]
    data = list(compute_samples) + shards
    return AutoShardCompute(epochs=agent.cost.epochs, seed=seed).fit(data)


@dataclass
class AutoShardSharder(PolicySharder):
    """Shard with a trained AutoShard policy (a shipped one by name, or a path)."""

    name: str = "autoshard"
    model: str = "autoshard_policy"
    agent_class = AutoShardAgent

