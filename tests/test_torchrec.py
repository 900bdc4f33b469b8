"""TorchRec planner baseline and the TorchRec export (torchrec is part of the dev install)."""

from __future__ import annotations

import json

import pytest

from shardlab.cli import main
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.export import export_torchrec, sharding_plan_from_export
from shardlab.plan import Placement, Plan, validate_plan
from shardlab.search import get_sharder, run_sharder

torchrec = pytest.importorskip("torchrec", reason="torchrec is installed by scripts/setup.sh")


@pytest.fixture(scope="module")
def task():
    return generate_task(ntables=12, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=4)


def test_torchrec_planner_constrained_plan_is_valid_and_deterministic(task):
    plan = run_sharder(get_sharder("torchrec"), task)
    validate_plan(task, plan)
    assert plan.method == "torchrec"
    again = run_sharder(get_sharder("torchrec"), task)
    assert again.placements == plan.placements
    assert all(p.rows == task.table(p.table).rows for p in plan.placements)   # table/column-wise only


def test_torchrec_planner_unconstrained_runs(task):
    plan = run_sharder(get_sharder("torchrec_free"), task)
    validate_plan(task, plan)


def test_export_rebuilds_a_torchrec_sharding_plan_covering_every_table(task, tmp_path):
    tw = run_sharder(get_sharder("size_greedy"), task)
    t0 = task.tables[0]
    half = t0.dim // 2
    cw = Plan(tw.task, "hand", tw.ngpu, tuple(
        [p for p in tw.placements if p.table != t0.name]
        + [Placement(t0.name, 0, half, 0, t0.rows, 0), Placement(t0.name, half, half, 0, t0.rows, 3)]))
    data = export_torchrec(task, cw)
    assert data["plan"][t0.name]["sharding_type"] == "column_wise"
    assert data["plan"][task.tables[1].name]["sharding_type"] == "table_wise"
    plan = sharding_plan_from_export(json.loads(json.dumps(data)))
    module_plan = plan.plan["sparse.ebc"]
    assert set(module_plan) == {t.name for t in task.tables}
    for t in task.tables:
        shards = module_plan[t.name].sharding_spec.shards
        assert sum(s.shard_sizes[0] * s.shard_sizes[1] for s in shards) == t.rows * t.dim
    assert module_plan[t0.name].ranks == [0, 3]


def test_export_rejects_layouts_torchrec_cannot_express(task):
    t0 = task.tables[0]
    rest = [Placement(t.name, 0, t.dim, 0, t.rows, 0) for t in task.tables[1:]]
    odd = Plan(task.name, "odd", task.ngpu, tuple(rest + [
        Placement(t0.name, 0, t0.dim, 0, t0.rows // 2, 2),
        Placement(t0.name, 0, t0.dim, t0.rows // 2, t0.rows - t0.rows // 2, 1)]))
    with pytest.raises(ShardlabError, match=f"table '{t0.name}'"):
        export_torchrec(task, odd)


def test_export_cli(task, tmp_path, capsys):
    from shardlab.io import save_plan, save_task

    save_task(task, tmp_path / "t.json")
    save_plan(run_sharder(get_sharder("dim_greedy"), task), tmp_path / "p.json")
    assert main(["export-torchrec", str(tmp_path / "t.json"), str(tmp_path / "p.json"),
                 "--out", str(tmp_path / "e.json")]) == 0
    assert "12 tables (table_wise)" in capsys.readouterr().out
    assert json.loads((tmp_path / "e.json").read_text())["constraints"][task.tables[0].name]["compute_kernels"] == ["fused"]
