"""Policy training with measured-plan refresh: the RL loops of DreamShard and AutoShard
(ALGORITHMS.md sections 5 and 6) together with the measurements that feed their cost models.

The networks, agents, REINFORCE and V-trace live in :mod:`shardlab.search.dreamshard` and
:mod:`shardlab.search.autoshard` (they see only cost-model protocols); the loops here also
measure plans on this machine (:mod:`shardlab.experiments.plan_campaign`) and write a sample
store, which is why they sit above search, in the experiments layer.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.costmodel.dreamshard import DreamShardCost
from shardlab.costmodel.neural import AutoShardCompute, _seeded
from shardlab.data.tasks import generate_task
from shardlab.experiments.plan_campaign import plan_prefix, run_plan_campaign
from shardlab.profile.store import SampleStore
from shardlab.search.autoshard import AutoShardAgent, vtrace
from shardlab.search.dreamshard import DreamShardAgent, reinforce


def policy_provenance(cost_model: object) -> dict:
    """What a saved RL policy records: machine, versions, date, command, git revision, and the
    cost model it was trained against (its source label and its own provenance)."""
    import sys

    from shardlab.profile.provenance import environment

    return {**environment("cpu"), "command": " ".join(sys.argv), "cost_model": getattr(cost_model, "source", "?"),
            "cost_model_provenance": getattr(cost_model, "provenance_", {})}


def train_dreamshard(store: str, cost: DreamShardCost, compute_samples: Sequence[dict[str, Any]],
                     iterations: int = 10, measure_per_iteration: int = 4, updates_per_iteration: int = 50,
                     ngpu: int | Sequence[int] = 4, ntables: tuple[int, int] = (10, 60), profile: str = "cpu",
                     cost_epochs: int = 100, seed: int = 0, progress: bool = True,
                     initial_plans: Sequence[dict[str, Any]] = ()) -> DreamShardAgent:
    """DreamShard's loop (module docstring): per iteration, measure ``measure_per_iteration``
    plans of the current policy into ``store`` (kind ``plan:<G>``, through the evaluator), refit
    the cost network on every measured plan there and in ``initial_plans`` (+ ``compute_samples``), then run
    ``updates_per_iteration`` REINFORCE updates on random training tasks. ``ngpu``: one device
    count or several (measured plans and training tasks are spread over them, so one policy
    serves them all). Deterministic by seed up to the measured costs (which are real timings)."""
    gpus = [int(ngpu)] if np.isscalar(ngpu) else [int(g) for g in ngpu]
    agent = DreamShardAgent(cost, seed=seed)
    rng = np.random.default_rng(seed)
    history = []
    bar = tqdm(total=iterations * updates_per_iteration, desc="dreamshard REINFORCE", disable=not progress)
    for it in range(iterations):
        for k, g in enumerate(gpus):         # this iteration's share of measured plans for each G
            done = len(range(k, (it + 1) * measure_per_iteration, len(gpus)))
            run_plan_campaign(store, done, g, profile, ntables=ntables, seed=seed + 1000,
                              plan_for=lambda task, i: agent.plan(task, i), progress=False)
        with SampleStore(store) as s:
            plans = list(initial_plans) + [p for k in s.kinds() if k.startswith("plan:") for p in s.samples(k)]
        agent.cost = DreamShardCost(epochs=cost_epochs, seed=seed + it).fit(plans, compute_samples)
        tasks = [generate_task(ntables=int(rng.integers(ntables[0], ntables[1] + 1)), ngpu=gpus[j % len(gpus)],
                               batch_size=cost.profile_.get("batch_size", C.DEFAULT_BATCH_SIZE),
                               seed=int(rng.integers(2**31)), split="train") for j in range(8)]
        curve = reinforce(agent, tasks, updates_per_iteration, seed=seed + it, progress=bar)
        history.append({"iteration": it, "measured_plans": len(plans), "mean_predicted_cost_ms": curve})
    bar.close()
    agent.history_ = history
    agent.provenance_ = policy_provenance(agent.cost)
    return agent


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
    agent.provenance_ = policy_provenance(agent.cost)
    return agent


def refit_cost_online(agent: AutoShardAgent, store: str, compute_samples: Sequence[dict[str, Any]], ngpu: int,
                      ntables: tuple[int, int], profile: str, n_plans: int, seed: int,
                      campaign_seed: int = 0) -> AutoShardCompute:
    """Measure ``n_plans`` more greedy policy plans on ``ngpu`` devices (evaluator) and refit the
    cost model on the compute samples plus every measured device shard of every plan in the
    store, whatever its G (the replay buffer). ``campaign_seed`` keys the measured plans (the
    same for a whole training run, so each call adds exactly ``n_plans``); ``seed`` the refit."""
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
