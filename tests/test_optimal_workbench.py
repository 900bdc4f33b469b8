"""The exact planner in the workbench: each plan's own bound and what it rests on in the cost
tables, TorchRec's planner interface with ``method="optimal"``, NeuroShard's portfolio with the
exact planner as a candidate, and the main job's one-line skip past the integer program's size."""

from __future__ import annotations

import pytest

from shardlab import constants as C
from shardlab.data.tasks import generate_task
from shardlab.evaluate import ModelEvaluator
from shardlab.report.costs import cost_summary_rows
from shardlab.search import get_sharder, run_sharder
from shardlab.search.optimal import quoted_bounds, skip_reason


@pytest.fixture(scope="module")
def task():
    return generate_task(ntables=10, ngpu=4, seed=3, batch_size=4096)


@pytest.fixture(scope="module")
def plans(task):
    return {m: run_sharder(get_sharder(m, profile="h100") if m == "optimal[time_limit_s=600,rel_gap=0.01]"
                           else get_sharder(m), task)
            for m in ("random", "lookup_greedy", "optimal[time_limit_s=600,rel_gap=0.01]")}


def test_each_plan_is_quoted_its_own_bound_and_what_it_rests_on(task, plans):
    judge = ModelEvaluator("analytic", "h100")
    evs = judge.evaluate(task, plans)
    floor = next(iter(evs.values())).lower_bound_ms
    quoted = quoted_bounds(task, plans, evs, judge.bundle(), judge.rowwise_model(judge.bundle()))
    exact = plans["optimal[time_limit_s=600,rel_gap=0.01]"].metadata["optimality"]["bound_ms"]
    assert exact > floor                                        # the exact bound is the tighter one here
    for m, e in quoted.items():
        assert e.lower_bound_ms == pytest.approx(max(floor, exact)) and "exact planner" in e.bound_source
        assert e.lower_bound_ms <= e.cost_ms + 1e-12
    rows = cost_summary_rows(quoted)
    assert all("bound rests on" in r and r["cost / best found"] >= 1.0 for r in rows)
    assert min(r["cost / best found"] for r in rows) == 1.0


def test_a_learned_judge_says_it_proves_no_bound(task, plans):
    judge = ModelEvaluator("neuroshard", "h100")
    quoted = quoted_bounds(task, plans, judge.evaluate(task, plans), judge.bundle())
    assert all(e.lower_bound_ms is None and e.bound_source.startswith("none:") for e in quoted.values())


def test_the_exact_planner_plans_through_torchrecs_planner_interface():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchrec", reason="torchrec is installed by scripts/setup.sh")
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import ParameterConstraints, Topology
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from shardlab.torchrec import ShardlabPlanner

    model = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=f"t{i}", num_embeddings=4000 * (i + 1),
                                                              embedding_dim=64, feature_names=[f"f{i}"])
                                           for i in range(6)], device=torch.device("meta"))
    topo = Topology(world_size=4, compute_device="cuda", hbm_cap=2**30, ddr_cap=2**30)
    cons = {"t0": ParameterConstraints(sharding_types=["table_wise"])}
    planner = ShardlabPlanner(topo, constraints=cons, method="optimal[time_limit_s=600,rel_gap=0.01]", profile="cpu")
    planner.plan(model, [EmbeddingBagCollectionSharder()])
    plan = planner.plan_
    assert plan.metadata["optimality"]["status"] == "optimal"
    assert [p.cols for p in plan.placements if p.table == "t0"] == [64]      # never split where forbidden


def test_neuroshard_weighs_the_exact_planners_plan_under_its_own_model(task):
    s = get_sharder("neuroshard", profile="cpu", portfolio=("lookup_greedy", "optimal[time_limit_s=600,rel_gap=0.01]"))
    plan = run_sharder(s, task)
    record = plan.metadata["portfolio"]
    assert "optimal[time_limit_s=600,rel_gap=0.01]" in record["predicted_ms"], record["skipped"]
    assert record["predicted_ms"][record["chosen"]] == min(record["predicted_ms"].values())


def test_the_main_job_leaves_the_exact_planner_out_past_its_program_in_one_line(monkeypatch, task):
    assert skip_reason(task) is None
    monkeypatch.setattr(C, "MAX_EXACT_PAIRS", 10)
    why = skip_reason(task)
    assert why.startswith("optimal: skipped:") and "MAX_EXACT_PAIRS" in why and "\n" not in why


def test_compare_prints_each_plans_gaps_and_what_its_bound_rests_on(task, plans, tmp_path, capsys):
    from shardlab.cli import main
    from shardlab.io import save_plan, save_task

    tp = save_task(task, tmp_path / "task.json")
    paths = [str(save_plan(p, tmp_path / f"p{k}.json")) for k, p in enumerate(plans.values())]
    assert main(["compare", str(tp), *paths, "--model", "analytic", "--profile", "h100"]) == 0
    out = capsys.readouterr().out
    assert "cost / best found: " in out and "cost / bound: " in out
    assert "the exact planner's bound (optimal)" in out
