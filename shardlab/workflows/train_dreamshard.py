"""DreamShard's training loop (docs/methods.md), top to bottom, CleanRL style.

Networks, agent and episode: :mod:`shardlab.search.dreamshard`. Every knob is a field of
:class:`~shardlab.workflows.rl_args.DreamShardArgs` (re-exported here). Per iteration:

1. *Measure* ``measure_per_iteration`` plans of the current policy on this machine, through the
   evaluator, into the store (kind ``plan:<G>``), spread over the device counts ``ngpu``.
2. *Update* the cost network on every measured plan (store + ``initial_plans``) and the compute
   samples, ``cost_epochs`` more epochs from its current weights: the estimated MDP follows what
   the hardware said.
3. *REINFORCE* on the estimated MDP (:func:`reinforce`): ``updates_per_iteration`` updates, each
   ``episodes`` episodes of one training task; reward = minus the predicted plan cost, standardised
   per batch; entropy bonus; Adam with the learning rate decayed linearly to 0.
4. Every ``probe_every`` updates, *probe* the greedy policy on fixed tasks against lookup-greedy,
   judged by a fixed model (:mod:`shardlab.workflows.policy_probe`): the learning curve.

With ``measure_per_iteration`` 0 nothing is measured (no store needed); without given plans the
cost network is then never updated and the reward is its prediction alone (a hardware that is
not at hand, e.g. a GPU profile's model trained elsewhere); the policy's provenance says which.

Same seed -> same policy, up to the measured costs (real timings).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.costmodel.dreamshard import DreamShardCost
from shardlab.costmodel.neural_base import seeded
from shardlab.measure.records import as_compute_records, as_plan_records
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.workflows.plan_campaign import run_plan_campaign
from shardlab.workflows.policy_probe import make_probe
from shardlab.workflows.policy_provenance import policy_provenance
from shardlab.workflows.rl_args import DreamShardArgs
from shardlab.measure.store import SampleStore
from shardlab.search.dreamshard import DreamShardAgent
from shardlab.tables import Task


def train_dreamshard(args: DreamShardArgs, store: str | None, cost: DreamShardCost,
                     compute_samples: Sequence[Any] = (), initial_plans: Sequence[Any] = ()) -> DreamShardAgent:
    """Train a DreamShard policy against ``cost`` (a fitted cost network); measured plans go to
    the sample store ``store`` (None: only with ``measure_per_iteration`` 0); ``compute_samples``
    also supervise every refit's compute heads."""
    if store is None and args.measure_per_iteration:
        raise ShardlabError("train dreamshard_policy: field 'store' is required to measure plans "
                            f"(measure_per_iteration = {args.measure_per_iteration})")
    agent = DreamShardAgent(cost, seed=args.seed)
    compute = as_compute_records(compute_samples)
    rng = np.random.default_rng(args.seed)
    batch = cost.profile_.get("batch_size", C.DEFAULT_BATCH_SIZE)
    probe = make_probe(args.ngpu, args.ntables, batch, judge=args.probe_judge) if args.probe_every else None
    history = []
    bar = tqdm(total=args.iterations * args.updates_per_iteration, desc="dreamshard REINFORCE",
               disable=not args.progress)
    for it in range(args.iterations):
        # 1. measure: this iteration's share of the policy's plans for each G, on the hardware
        for k, g in enumerate(args.ngpu):
            done = len(range(k, (it + 1) * args.measure_per_iteration, len(args.ngpu)))
            if store is not None:
                run_plan_campaign(store, done, g, args.profile, ntables=args.ntables, seed=args.seed + 1000,
                                  plan_for=lambda task, i: agent.plan(task, i), progress=False)
        # 2. update the cost network on every measured plan so far, from its current weights
        measured = []
        if store is not None:
            with SampleStore(store) as s:
                measured = [p for k in s.kinds() if k.startswith("plan:") for p in s.samples(k)]
        plans = as_plan_records(list(initial_plans) + measured)
        if plans:        # none measured, none given: the cost network stays as trained
            agent.cost = agent.cost.fine_tuned(plans + compute, args.cost_epochs, seed=args.seed + it)
        # 3. REINFORCE on the estimated MDP, on fresh training tasks
        tasks = [generate_task(ntables=int(rng.integers(args.ntables[0], args.ntables[1] + 1)),
                               ngpu=args.ngpu[j % len(args.ngpu)], batch_size=batch,
                               seed=int(rng.integers(2**31)), split="train") for j in range(args.tasks_per_iteration)]
        curve, probes = reinforce(agent, tasks, args, seed=args.seed + it, progress=bar, probe=probe,
                                  first_update=it * args.updates_per_iteration)
        history.append({"iteration": it, "measured_plans": len(plans), "mean_predicted_cost_ms": curve,
                        "probes": probes})
    bar.close()
    agent.history_ = history
    agent.provenance_ = policy_provenance(agent.cost, args)
    agent.provenance_["reward"] = (
        f"the cost network, updated each iteration on {len(plans)} plans ({len(measured)} measured into the store "
        "by this run)" if plans else
        "model only: the cost network as given, never updated (no plan measured by this run, none given)")
    return agent


def reinforce(agent: DreamShardAgent, tasks: Sequence[Task], args: DreamShardArgs, seed: int = 0,
              progress: Any = None, probe: Callable[[Any], dict[str, Any]] | None = None,
              first_update: int = 0) -> tuple[list[float], list[dict[str, Any]]]:
    """``args.updates_per_iteration`` REINFORCE updates of ``agent.policy`` on the estimated MDP,
    cycling over ``tasks``; returns the mean predicted plan cost (ms) of each update's episodes
    and the probes taken every ``args.probe_every`` updates (counted from ``first_update``)."""
    gen = seeded(seed)
    opt = torch.optim.Adam(agent.policy.parameters(), lr=args.lr)
    updates = args.updates_per_iteration
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 - k / max(updates, 1))
    curve, probes = [], []
    for k in range(updates):
        ep = agent.rollout(tasks[k % len(tasks)], args.episodes, generator=gen)
        adv = (ep.reward - ep.reward.mean()) / (ep.reward.std() + 1e-8)       # standardised per batch
        loss = -(adv.float() * ep.log_prob.sum(1)).mean() - args.entropy_coef * ep.entropy.sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        curve.append(float(ep.cost_ms.mean()))
        if probe is not None and (first_update + k + 1) % args.probe_every == 0:
            probes.append({"update": first_update + k, **probe(agent)})
        if progress is not None:
            progress.update(1)
    return curve, probes
