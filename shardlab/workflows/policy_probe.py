"""A fixed yardstick for RL learning curves.

A policy's training reward is judged by its own, refitted cost model on ever-changing tasks, so
its curve moves when the judge moves. :class:`PolicyProbe` holds fixed probe tasks (training
split tables, never the held-out pool) and one fixed cost-model bundle as judge; a probe is
the geometric mean over those tasks of (the policy's greedy plan cost) / (lookup_greedy's plan
cost), both predicted by the judge. Below 1: the policy beats lookup-greedy by the judge's
account. This is a simulation (model-judged), labelled as such in the history; measured
verdicts come from measuring plans on held-out tasks (``studies/heldout_search``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.data.tasks import generate_task
from shardlab.evaluate.model import ModelEvaluator
from shardlab.search import get_sharder
from shardlab.tables import Task

BASELINE = "lookup_greedy"
"""The heuristic a probe divides by."""


@dataclass(frozen=True)
class PolicyProbe:
    """Fixed probe tasks and judge. ``baseline_ms[i]``: lookup_greedy's predicted cost (ms) of
    ``tasks[i]``; ``judge``: the bundle name (its ``source`` goes into each probe's label)."""

    tasks: tuple[Task, ...]
    evaluator: ModelEvaluator
    baseline_ms: tuple[float, ...]
    judge: str

    def __call__(self, agent: Any) -> dict[str, Any]:
        """{"probe_ratio": geometric mean of policy / baseline predicted cost, "probe_ratios":
        per task, "probe_judge": label}. ``agent`` has ``plan(task, seed)``."""
        ratios = []
        for task, base in zip(self.tasks, self.baseline_ms):
            ev = self.evaluator.evaluate(task, {"policy": agent.plan(task, 0)})["policy"]
            ratios.append(ev.cost_ms / base)
        return {"probe_ratio": float(np.exp(np.mean(np.log(ratios)))), "probe_ratios": ratios,
                "probe_judge": f"simulation: {self.judge}"}


def make_probe(ngpu: Sequence[int], ntables: tuple[int, int], batch_size: int = C.DEFAULT_BATCH_SIZE,
               per_ngpu: int = 4, judge: str = "neuroshard_broad", profile: str = "cpu",
               seed: int = 777) -> PolicyProbe:
    """``per_ngpu`` probe tasks per device count in ``ngpu``, training-split tables, table counts
    spread over the upper half of ``ntables`` (inclusive range); judged by the shipped bundle
    ``judge``. Same arguments -> same probe."""
    lo, hi = (ntables[0] + ntables[1]) // 2, ntables[1]
    sizes = np.linspace(lo, hi, per_ngpu).round().astype(int)
    tasks = tuple(generate_task(ntables=int(n), ngpu=g, batch_size=batch_size, seed=seed + 100 * k + i,
                                split="train", name=f"probe-g{g}-{i}")
                  for k, g in enumerate(ngpu) for i, n in enumerate(sizes))
    evaluator = ModelEvaluator(judge, profile, lower_bound=False)
    evaluator = ModelEvaluator(evaluator.bundle(), profile, lower_bound=False)   # load once
    base = get_sharder(BASELINE)
    baseline = tuple(evaluator.evaluate(t, {"b": base.shard(t, 0)})["b"].cost_ms for t in tasks)
    return PolicyProbe(tasks, evaluator, baseline, judge)
