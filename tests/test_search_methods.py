"""NeuroShard, DreamShard and AutoShard search: feasible plans, same seed same plan, and the
search actually uses its cost model (it beats the heuristics under that model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardlab.costmodel.bundle import load_bundle
from shardlab.costmodel.neural import AutoShardCompute
from shardlab.costmodel.train import load_records
from shardlab.data.tasks import generate_task
from shardlab.evaluate import estimate_plan
from shardlab.plan import validate_plan
from shardlab.search import get_sharder, run_sharder
from shardlab.workflows.train_autoshard import AutoShardArgs, train_autoshard, vtrace
from shardlab.workflows.train_dreamshard import DreamShardArgs, reinforce
from shardlab.search.autoshard import AutoShardAgent
from shardlab.search.dreamshard import DreamShardAgent
from shardlab.search.blocks import split_block, whole_blocks
from shardlab.search.neuroshard import NeuroShardSharder


@pytest.fixture(scope="module")
def analytic():
    return load_bundle("analytic")


@pytest.fixture(scope="module")
def task():
    return generate_task(ntables=30, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=3)


def test_split_block_halves_columns(task):
    i = next(k for k, t in enumerate(task.tables) if t.dim >= 8)
    blocks = split_block(whole_blocks(task), i)
    assert blocks[i].cols == blocks[i + 1].cols == task.tables[i].dim // 2
    assert (blocks[i].col_offset, blocks[i + 1].col_offset) == (0, task.tables[i].dim // 2)
    assert blocks[i].parent == blocks[i + 1].parent == task.tables[i].name


@pytest.mark.parametrize("column_wise", [False, True])
def test_neuroshard_beats_heuristics_under_its_model(analytic, task, column_wise):
    sharder = NeuroShardSharder(model=analytic, columns=column_wise, max_splits=3)
    plan = run_sharder(sharder, task, seed=0)
    validate_plan(task, plan)
    again = run_sharder(NeuroShardSharder(model=analytic, columns=column_wise, max_splits=3), task, seed=0)
    assert again.placements == plan.placements
    cost = estimate_plan(task, plan, analytic, lower_bound=False).cost_ms
    for name in ("size_greedy", "dim_greedy", "lookup_greedy", "random"):
        other = estimate_plan(task, run_sharder(get_sharder(name), task), analytic, lower_bound=False).cost_ms
        assert cost <= other + 1e-9, name


def test_neuroshard_column_wise_can_split(analytic):
    # one huge-lookup table dominates: splitting it is the only way to balance
    task = generate_task(ntables=6, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=11)
    tw = run_sharder(NeuroShardSharder(model=analytic, columns=False), task)
    cw = run_sharder(NeuroShardSharder(model=analytic, columns=True, max_splits=4), task)
    validate_plan(task, cw)
    assert estimate_plan(task, cw, analytic, False).cost_ms <= estimate_plan(task, tw, analytic, False).cost_ms + 1e-9


def test_neuroshard_same_seed_same_plan(analytic, task):
    a = NeuroShardSharder(model=analytic, max_splits=2).shard(task, seed=5)
    b = NeuroShardSharder(model=analytic, max_splits=2).shard(task, seed=5)
    assert a.placements == b.placements


def test_vtrace_on_policy_equals_monte_carlo_returns():
    logp = torch.log(torch.full((2, 3), 0.5))
    values = torch.tensor([[0.1, 0.2, 0.3], [0.0, 0.0, 0.0]])
    vs, adv = vtrace(logp, logp, values, torch.tensor([1.0, -1.0]))
    assert torch.allclose(vs, torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]))
    assert torch.allclose(adv, vs - values)


@pytest.fixture(scope="module")
def small_cost():
    compute = [s for s in load_records("compute") if ":train:" in s.key][:600]
    return AutoShardCompute(epochs=30, seed=0).fit(compute[:500], compute[500:])


def test_autoshard_trains_and_plans_feasibly(small_cost, task):
    args = AutoShardArgs(updates=6, episodes=4, ntables=(8, 12), progress=False, seed=1)
    agent = train_autoshard(args, small_cost)
    assert len(agent.history_) == 6 and all(-1.0 <= h["mean_reward"] <= 1.0 for h in agent.history_)
    plan = agent.plan(task)
    validate_plan(task, plan)
    again = train_autoshard(args, small_cost)
    assert again.plan(task).placements == plan.placements


def test_autoshard_generalises_to_other_sizes(small_cost, tmp_path):
    agent = AutoShardAgent(small_cost, seed=0)
    agent.save(str(tmp_path / "a.pt"))
    loaded = AutoShardAgent.load(str(tmp_path / "a.pt"))
    big = generate_task(ntables=50, ngpu=8, mem_cap_gb=4.0, batch_size=4096, seed=2)
    p1, p2 = agent.plan(big), loaded.plan(big)
    validate_plan(big, p1)
    assert p1.placements == p2.placements


def test_dreamshard_reinforce_lowers_predicted_cost(task):
    from shardlab.costmodel.dreamshard import DreamShardCost

    plans = load_records("plan")
    compute = [s for s in load_records("compute") if ":train:" in s.key][:300]
    cost = DreamShardCost(epochs=20, seed=0).fit(plans + compute)
    agent = DreamShardAgent(cost, seed=0)
    torch.manual_seed(0)
    curve, _ = reinforce(agent, [task], DreamShardArgs(updates_per_iteration=30, episodes=16, lr=5e-3), seed=0)
    assert np.mean(curve[-5:]) < np.mean(curve[:5])
    plan = agent.plan(task)
    validate_plan(task, plan)
    big = generate_task(ntables=50, ngpu=8, mem_cap_gb=4.0, batch_size=4096, seed=2)
    validate_plan(big, agent.plan(big))   # other numbers of tables and devices, unchanged


def test_neuroshard_refuses_a_model_without_incremental_sums(analytic, task):
    """A model with only ``predict`` (no embed/predict_sums) is refused in one line naming the
    field: the search has one greedy path, which adds tables to devices as summed rows."""
    from shardlab.costmodel.bundle import CostModelBundle
    from shardlab.errors import ShardlabError

    class PredictOnly:
        source, target = "predict-only", "compute"

        def predict(self, shards):
            return analytic.compute.predict(shards)

    generic = CostModelBundle(PredictOnly(), analytic.comm)
    with pytest.raises(ShardlabError, match="field 'model' .predict-only. has no embed/predict_sums") as e:
        NeuroShardSharder(model=generic, columns=False).shard(task)
    assert "\n" not in str(e.value)


def test_method_list_reads_papermill_strings():
    from shardlab.errors import ShardlabError
    from shardlab.search import method_list

    assert method_list("random, neuroshard") == ["random", "neuroshard"]
    assert method_list('["random", "dim_greedy"]') == ["random", "dim_greedy"]
    assert method_list(["torchrec"]) == ["torchrec"]
    with pytest.raises(ShardlabError, match="field 'methods': 'nope' is not a sharder"):
        method_list("random,nope")
    with pytest.raises(ShardlabError, match="field 'methods' is empty"):
        method_list("[]")


def test_dreamshard_loop_measures_plans_for_every_device_count(tmp_path):
    """The full loop with measured plans (tiny and fast): each iteration's measured plans are
    spread over the device counts, land in the store as plan:<G>, and refit the cost network."""
    from shardlab.costmodel.dreamshard import DreamShardCost
    from shardlab.measure.hardware import profile_with
    from shardlab.measure.store import SampleStore
    from shardlab.workflows.train_dreamshard import train_dreamshard

    compute = [s for s in load_records("compute") if ":train:" in s.key][:200]
    cost = DreamShardCost(epochs=5, seed=0).fit(load_records("plan")[:20] + compute)
    store = str(tmp_path / "policy.db")
    fast = profile_with("cpu", batch_size=256, repeats=2, warmup=1)
    args = DreamShardArgs(iterations=2, measure_per_iteration=3, updates_per_iteration=2, ngpu=(2, 3),
                          ntables=(4, 6), profile=fast, cost_epochs=3, progress=False)
    agent = train_dreamshard(args, store, cost, compute)
    with SampleStore(store) as s:
        counts = {k: s.count(k) for k in s.kinds()}
    assert counts == {"plan:2": 3, "plan:3": 3}            # 6 plans over 2 iterations, alternating G
    assert [h["measured_plans"] for h in agent.history_] == [3, 6]
    assert agent.cost is not cost                          # refit on the measured plans
    validate_plan(task3 := generate_task(ntables=9, ngpu=3, mem_cap_gb=4.0, batch_size=4096, seed=4),
                  agent.plan(task3))


def test_autoshard_refit_measures_exactly_n_plans_per_call(small_cost, tmp_path):
    """Each online refit adds exactly ``n_plans`` measured plans to the replay store (a refit
    once re-measured every earlier plan under a new key, so the buffer grew quadratically)."""
    from shardlab.measure.hardware import profile_with
    from shardlab.measure.store import SampleStore
    from shardlab.workflows.train_autoshard import refit_cost_online

    agent = AutoShardAgent(small_cost, seed=0)
    fast = profile_with("cpu", batch_size=256, repeats=2, warmup=1)
    store = str(tmp_path / "auto.db")
    # campaign seed 28: its six tasks hold 0.5 GB of tables in all; seed 0's first task alone holds
    # 3.3 GB, whose first allocation took 40 s here. What is checked does not depend on the sizes.
    args = AutoShardArgs(ntables=(4, 6), profile=fast, measure_plans=2, cost_epochs=2, seed=28)
    compute = [s for s in load_records("compute") if ":train:" in s.key][:80]
    for call in range(3):
        refit_cost_online(agent, store, compute, 2, args, seed=call)
        with SampleStore(store) as s:
            assert s.count("plan:2") == 2 * (call + 1)
