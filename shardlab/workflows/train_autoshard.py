"""AutoShard's training loop (docs/methods.md), top to bottom, CleanRL style.

Networks, agent and episode: :mod:`shardlab.search.autoshard`. Every knob is a field of
:class:`~shardlab.workflows.rl_args.AutoShardArgs` (re-exported here). Per update:

1. *Actors* play ``episodes`` episodes of one training task with the behaviour policy, a copy of
   the learner's refreshed every ``sync_every`` updates (so their data is off-policy).
2. The *learner* replays those actions with the current policy and corrects with V-trace
   (:func:`vtrace`); loss = policy gradient + ``value_coef`` value error - ``entropy_coef``
   entropy; Adam; gradient norm clipped at ``max_grad_norm``.
3. With a store and ``measure_plans`` > 0, every ``refit_every`` updates *measure*
   ``measure_plans`` greedy plans through the evaluator and *refit* the cost model on the compute
   samples plus every measured device shard (:func:`refit_cost_online`); otherwise the reward is
   the given cost model's alone (the policy's provenance says which).
4. Every ``probe_every`` updates, *probe* the greedy policy on fixed tasks against lookup-greedy,
   judged by a fixed model (:mod:`shardlab.workflows.policy_probe`): the learning curve.

Actors run in this process, one after another: the structure and the correction are IMPALA's,
the parallelism is not. Same seed -> same policy, up to measured costs (real timings).
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.costmodel.neural import AutoShardCompute
from shardlab.costmodel.neural_base import seeded
from shardlab.measure.records import ComputeRecord, as_compute_records, as_plan_records
from shardlab.data.tasks import generate_task
from shardlab.workflows.plan_campaign import plan_prefix, run_plan_campaign
from shardlab.workflows.policy_probe import make_probe
from shardlab.workflows.policy_provenance import policy_provenance
from shardlab.workflows.rl_args import AutoShardArgs
from shardlab.measure.store import SampleStore
from shardlab.search.autoshard import AutoShardAgent


def train_autoshard(args: AutoShardArgs, cost: AutoShardCompute, compute_samples: Sequence[Any] = (),
                    store: str | None = None) -> AutoShardAgent:
    """Train an AutoShard policy against ``cost`` (a fitted compute model); with ``store``, the
    online refits measure plans into it (kind ``plan:<G>``) and refit on ``compute_samples`` +
    the measured shards."""
    gen = seeded(args.seed)
    rng = np.random.default_rng(args.seed)
    agent = AutoShardAgent(cost, seed=args.seed)
    behaviour = copy.deepcopy(agent.policy)
    opt = torch.optim.Adam(agent.policy.parameters(), lr=args.lr)
    batch = cost.profile_.get("batch_size", C.DEFAULT_BATCH_SIZE)
    tasks = [generate_task(ntables=int(rng.integers(args.ntables[0], args.ntables[1] + 1)),
                           ngpu=args.ngpu[j % len(args.ngpu)], batch_size=batch, seed=int(rng.integers(2**31)),
                           split="train") for j in range(args.n_tasks)]
    probe = make_probe(args.ngpu, args.ntables, batch, judge=args.probe_judge) if args.probe_every else None
    history = []
    for k in tqdm(range(args.updates), desc="autoshard V-trace", disable=not args.progress):
        task = tasks[k % len(tasks)]
        # 1. actors: the lagging behaviour policy plays the episodes
        with torch.no_grad():
            played = agent.run(behaviour, task, args.episodes, generator=gen)
        # 2. learner: replay the same actions under the current policy, correct with V-trace
        learner = agent.run(agent.policy, task, args.episodes, actions=played.actions)
        vs, adv = vtrace(played.log_prob, learner.log_prob.detach(), learner.value.detach(), played.reward,
                         args.rho_bar, args.c_bar)
        loss = (-(adv * learner.log_prob).mean() + args.value_coef * ((vs - learner.value) ** 2).mean()
                - args.entropy_coef * learner.entropy.mean())
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.policy.parameters(), args.max_grad_norm)
        opt.step()
        if (k + 1) % args.sync_every == 0:
            behaviour.load_state_dict(agent.policy.state_dict())
        history.append({"update": k, "mean_reward": float(played.reward.mean()),
                        "feasible": float((played.reward >= 0).float().mean())})
        # 3. online refit on measured shards
        if store and args.measure_plans and (k + 1) % args.refit_every == 0:
            g = args.ngpu[((k + 1) // args.refit_every - 1) % len(args.ngpu)]
            agent.cost = refit_cost_online(agent, store, compute_samples, g, args, seed=args.seed + k)
        # 4. probe: the greedy policy on fixed tasks, judged by a fixed model
        if probe is not None and (k + 1) % args.probe_every == 0:
            history[-1].update(probe(agent))
    agent.history_ = history
    agent.provenance_ = policy_provenance(agent.cost, args)
    refits = args.updates // args.refit_every if store and args.measure_plans else 0
    agent.provenance_["reward"] = (
        f"the cost model, refitted {refits} times on plans measured into the store" if refits else
        "model only: the cost model as given, never refitted (no plan measured by this run)")
    return agent


def vtrace(behaviour_logp: torch.Tensor, target_logp: torch.Tensor, values: torch.Tensor,
           reward: torch.Tensor, rho_bar: float = 1.0, c_bar: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets v_s (B, T) and policy-gradient advantages (B, T) for episodes whose only
    reward is the final one (discount 1, value after the last step 0). Inputs: log-probs of the
    taken actions under the behaviour and target policies (B, T), values (B, T), rewards (B,)."""
    with torch.no_grad():
        ratio = torch.exp(target_logp - behaviour_logp)
        rho, c = ratio.clamp(max=rho_bar), ratio.clamp(max=c_bar)
        b, t_count = values.shape
        rewards = torch.zeros(b, t_count)
        rewards[:, -1] = reward
        next_values = torch.cat([values[:, 1:], torch.zeros(b, 1)], dim=1)
        delta = rho * (rewards + next_values - values)             # importance-weighted TD errors
        correction = torch.zeros(b, t_count)
        acc = torch.zeros(b)
        for t in reversed(range(t_count)):                         # v_s - V(x_s), backwards in time
            acc = delta[:, t] + c[:, t] * acc
            correction[:, t] = acc
        vs = values + correction
        next_vs = torch.cat([vs[:, 1:], torch.zeros(b, 1)], dim=1)
        advantage = rho * (rewards + next_vs - values)
    return vs, advantage


def refit_cost_online(agent: AutoShardAgent, store: str, compute_samples: Sequence[Any], ngpu: int,
                      args: AutoShardArgs, seed: int) -> AutoShardCompute:
    """Measure ``args.measure_plans`` more greedy policy plans on ``ngpu`` devices (evaluator)
    and refit the cost model on the compute samples plus every measured device shard of every
    plan in the store, whatever its G (the replay buffer). The campaign is keyed by
    ``args.seed`` (the same for a whole run, so each call adds exactly ``measure_plans``);
    ``seed`` seeds the refit."""
    prefix = plan_prefix(ngpu, args.profile, seed=args.seed)
    with SampleStore(store) as s:
        have = sum(k.startswith(prefix) for k in s.keys(f"plan:{ngpu}"))
    run_plan_campaign(store, have + args.measure_plans, ngpu, args.profile, ntables=args.ntables, seed=args.seed,
                      plan_for=lambda task, i: agent.plan(task, i), progress=False)
    with SampleStore(store) as s:
        plans = as_plan_records(p for kind in s.kinds() if kind.startswith("plan:") for p in s.samples(kind))
    shards = [ComputeRecord(f"{p.key}:dev{d}", tables, fw, bw, fw + bw, p.profile)
              for p in plans for d, (tables, fw, bw) in enumerate(zip(p.devices, p.fw_compute_ms, p.bw_compute_ms))
              if tables]
    epochs = agent.cost.epochs if args.cost_epochs is None else args.cost_epochs
    return AutoShardCompute(epochs=epochs, seed=seed).fit(as_compute_records(compute_samples) + shards)
