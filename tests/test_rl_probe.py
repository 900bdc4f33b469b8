"""The learning-curve probe of the RL training loops: a fixed yardstick."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab.costmodel.dreamshard import DreamShardCost
from shardlab.costmodel.neural import AutoShardCompute
from shardlab.costmodel.train import load_records
from shardlab.workflows.policy_probe import make_probe
from shardlab.workflows.train_autoshard import AutoShardArgs, train_autoshard
from shardlab.workflows.train_dreamshard import DreamShardArgs, reinforce
from shardlab.search import get_sharder
from shardlab.search.dreamshard import DreamShardAgent


@pytest.fixture(scope="module")
def probe():
    return make_probe((4, 8), (10, 30), per_ngpu=2)


class Heuristic:
    """An 'agent' that plans with a heuristic."""

    def __init__(self, name: str):
        self.sharder = get_sharder(name)

    def plan(self, task, seed=0):
        return self.sharder.shard(task, seed)


def test_probe_is_fixed_and_measures_against_lookup_greedy(probe):
    again = make_probe((4, 8), (10, 30), per_ngpu=2)
    assert [t.tables for t in probe.tasks] == [t.tables for t in again.tasks]
    assert probe.baseline_ms == again.baseline_ms
    assert [t.ngpu for t in probe.tasks] == [4, 4, 8, 8]
    assert all(15 <= len(t.tables) <= 30 for t in probe.tasks)
    same = probe(Heuristic("lookup_greedy"))
    assert same["probe_ratio"] == pytest.approx(1.0) and "simulation" in same["probe_judge"]
    rnd = probe(Heuristic("random"))
    assert len(rnd["probe_ratios"]) == 4
    assert rnd["probe_ratio"] == pytest.approx(np.exp(np.mean(np.log(rnd["probe_ratios"]))))
    assert rnd["probe_ratio"] > 1.0          # random placement loses to lookup-greedy by the judge


def test_training_loops_record_probes_on_schedule():
    compute = [s for s in load_records("compute") if ":train:" in s.key][:400]
    cost = AutoShardCompute(epochs=10, seed=0).fit(compute[:300], compute[300:])
    args = AutoShardArgs(updates=6, episodes=4, ntables=(8, 12), probe_every=3, progress=False, seed=1)
    agent = train_autoshard(args, cost)
    probed = [h["update"] for h in agent.history_ if "probe_ratio" in h]
    assert probed == [2, 5] and all(h["probe_ratio"] > 0 for h in agent.history_ if "probe_ratio" in h)

    dcost = DreamShardCost(epochs=3, seed=0).fit(load_records("plan")[:20] + compute[:100])
    dagent = DreamShardAgent(dcost, seed=0)
    dargs = DreamShardArgs(updates_per_iteration=4, episodes=4, ntables=(8, 12), probe_every=2, progress=False)
    probe = make_probe(dargs.ngpu, dargs.ntables, per_ngpu=2)
    from shardlab.data.tasks import generate_task

    task = generate_task(ntables=10, ngpu=4, batch_size=4096, seed=3, split="train")
    curve, probes = reinforce(dagent, [task], dargs, probe=probe, first_update=4)
    assert len(curve) == 4 and [p["update"] for p in probes] == [5, 7]
