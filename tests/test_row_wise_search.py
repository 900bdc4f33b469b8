"""NeuroShard with row blocks: tables that fit no device are cut into
pinned row blocks in TorchRec's layouts, the layout chosen by the cost model; plans validate,
export and rebuild as TorchRec ShardingPlans."""

import json

import pytest

from shardlab.data.tasks import pool_tables
from shardlab.errors import InfeasibleError
from shardlab.torchrec.export import export_torchrec, sharding_plan_from_export
from shardlab.plan import Placement, Plan, validate_plan
from shardlab.search import get_sharder, run_sharder
from shardlab.search.blocks import Block, whole_blocks
from shardlab.search.row_wise import RowBlocks, RowChoice, choose_rows, oversized, row_choices, row_metadata
from shardlab.tables import Task


def _task(ngpu=4, share=0.45, n=12, name="rw"):
    """Pool test tables at dim 64 with the cap at ``share`` of the largest table's memory."""
    tables = tuple(t.with_dim(64) for t in pool_tables("dlrm-synth", "test")[:n])
    probe = Task("probe", ngpu, 1.0, tables, 4096)
    big = max(tables, key=probe.table_bytes)
    return Task(name, ngpu, probe.table_bytes(big) * share / 2**30, tables, 4096)


def _row_placements(task, plan):
    whole = {t.name: t.rows for t in task.tables}
    split = {q.table for q in plan.placements if q.rows != whole[q.table]}
    return {name: sorted((p.row_offset, p.rows, p.device) for p in plan.placements if p.table == name)
            for name in split}


@pytest.mark.parametrize("method", ["neuroshard[columns=false]", "neuroshard"])
def test_neuroshard_row_splits_the_tables_that_fit_no_device(method):
    task = _task()
    big = [task.tables[i].name for i in oversized(task)]
    assert big                                                    # the task needs row blocks
    plan = run_sharder(get_sharder(method), task, seed=0)
    validate_plan(task, plan)
    rows = _row_placements(task, plan)
    assert sorted(rows) == sorted(big)
    for name, blocks in rows.items():
        layout = plan.metadata["row_wise"][name]
        devices = [d for _, _, d in blocks]
        assert devices == list(range(layout["first_device"], layout["first_device"] + layout["blocks"]))
        assert sum(n for _, n, _ in blocks) == next(t.rows for t in task.tables if t.name == name)
    data = json.loads(json.dumps(export_torchrec(task, plan)))
    for name in big:
        assert data["plan"][name]["sharding_type"] == plan.metadata["torchrec_sharding_types"][name]
    rebuilt = sharding_plan_from_export(data, task).plan["sparse.ebc"]
    assert set(rebuilt) == {t.name for t in task.tables}


def test_tasks_without_oversized_tables_are_untouched():
    task = _task(share=1.5)
    assert not oversized(task)
    a = run_sharder(get_sharder("neuroshard[columns=false]"), task)
    b = run_sharder(get_sharder("neuroshard[columns=false]", row_wise=False), task)
    assert set(a.placements) == set(b.placements) and "row_wise" not in a.metadata


def test_layouts_tried_are_row_wise_and_table_row_wise_per_host():
    task = _task(ngpu=4, share=0.6)                               # the biggest table needs 2 blocks
    i = max(range(len(task.tables)), key=lambda k: task.table_bytes(task.tables[k]))
    assert row_choices(task, i, host_size=2) == [RowChoice(2, 0), RowChoice(4, 0), RowChoice(2, 2)]
    assert row_choices(task, i, host_size=8) == [RowChoice(2, 0), RowChoice(4, 0)]
    assert RowChoice(2, 2).sharding_type == "table_row_wise" and RowChoice(4, 0).sharding_type == "row_wise"


def test_a_table_row_wise_layout_on_the_second_host_exports_as_table_row_wise():
    task = _task(ngpu=4, share=0.6)
    i = max(range(len(task.tables)), key=lambda k: task.table_bytes(task.tables[k]))
    choice = {i: RowChoice(2, 2)}
    blocks = RowBlocks(task, Block).state(whole_blocks(task), choice)
    others = iter([0, 1] * len(task.tables))
    placements = tuple(Placement(b.parent, b.col_offset, b.cols, b.row_offset, b.table.rows,
                                 b.device if b.device >= 0 else next(others)) for b in blocks)
    plan = Plan(task.name, "test", task.ngpu, placements, 0, metadata=row_metadata(task, choice))
    validate_plan(task, plan)
    data = export_torchrec(task, plan, local_world_size=2)
    name = task.tables[i].name
    assert data["plan"][name]["sharding_type"] == "table_row_wise"
    assert [s["placement"].split("/")[0] for s in data["plan"][name]["shards"]] == ["rank:2", "rank:3"]


def test_coordinate_descent_takes_the_cheapest_layout():
    task = _task(ngpu=4, share=0.6)
    whole = whole_blocks(task)

    def cost_many(states, choices):                               # pretend more blocks are cheaper
        assert len(choices) == len(states)
        return [100.0 - sum(1 for b in s if b.device >= 0) for s in states]

    for combos in (256, 1):                                       # every combination; coordinate descent
        _, choice, evaluated = choose_rows(task, whole, cost_many, Block, host_size=2, max_combos=combos)
        assert all(c == RowChoice(4, 0) for c in choice.values()) and evaluated > 1

    def fewer_blocks_cheaper(states, choices):
        return [float(sum(1 for b in s if b.device >= 0)) for s in states]

    _, choice, _ = choose_rows(task, whole, fewer_blocks_cheaper, Block, host_size=2)
    assert all(c.k == 2 for c in choice.values())


def test_a_table_that_fits_no_device_in_any_split_is_named():
    task = _task(ngpu=2, share=0.3)
    with pytest.raises(InfeasibleError, match="fits no device even in 2 row blocks"):
        run_sharder(get_sharder("neuroshard[columns=false]"), task)


def test_a_neuroshard_row_wise_plan_trains_in_torchrec():
    pytest.importorskip("torchrec", reason="torchrec is installed by scripts/setup.sh")
    from shardlab.torchrec import torchrec_plans
    from shardlab.measure.hardware import profile_with

    by_rows = sorted((t for t in pool_tables("dlrm-synth", "test") if t.rows <= 50_000), key=lambda t: t.rows)
    small = tuple(t.with_dim(16) for t in [by_rows[-1], *by_rows[:3]])     # one big table, three tiny ones
    probe = Task("probe", 2, 1.0, small, 64)
    task = Task("rw-torchrec", 2, probe.table_bytes(small[0]) * 0.6 / 2**30, small, 64)
    plan = run_sharder(get_sharder("neuroshard[columns=false]"), task)
    assert plan.metadata["row_wise"]
    ev = torchrec_plans(task, {"neuroshard[columns=false]": plan}, profile_with("cpu", batch_size=64), rounds=3, steps=1,
                        warmup_steps=1)
    e = ev["neuroshard[columns=false]"]
    assert e.source.startswith("measured:torchrec-cpu") and len(e.rounds_ms) == 3
    assert all(d.fw_compute_ms > 0 for d in e.per_device)
