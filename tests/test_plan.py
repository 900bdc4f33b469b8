"""Plan validation: coverage exactly once, devices in range, memory under the cap; JSON."""

from __future__ import annotations

import pytest

from shardlab import InfeasibleError, Placement, Plan, ShardlabError, Task, validate_plan
from shardlab.io import load_plan, save_plan
from tests.conftest import make_table


def _task() -> Task:
    return Task("p", 2, 1.0, (make_table("a", 100, 16), make_table("b", 200, 8)))


def test_table_wise_plan_is_valid_and_round_trips(tmp_path):
    task = _task()
    plan = Plan.table_wise(task, [0, 1], "manual", seed=3, search_seconds=0.5)
    validate_plan(task, plan)
    assert load_plan(save_plan(plan, tmp_path / "plan.json")) == plan


def test_column_and_row_wise_blocks_are_valid():
    task = _task()
    plan = Plan("p", "mixed", 2, (Placement("a", 0, 8, 0, 100, 0), Placement("a", 8, 8, 0, 100, 1),
                                  Placement("b", 0, 8, 0, 150, 0), Placement("b", 0, 8, 150, 50, 1)))
    validate_plan(task, plan)


def test_table_covered_twice():
    task = _task()
    plan = Plan("p", "x", 2, (Placement("a", 0, 16, 0, 100, 0), Placement("a", 8, 8, 0, 100, 1),
                              Placement("b", 0, 8, 0, 200, 1)))
    with pytest.raises(ShardlabError, match="table 'a' is covered twice"):
        validate_plan(task, plan)


def test_table_not_covered():
    task = _task()
    with pytest.raises(ShardlabError, match="table 'b' is not placed"):
        validate_plan(task, Plan("p", "x", 2, (Placement("a", 0, 16, 0, 100, 0),)))
    half = Plan("p", "x", 2, (Placement("a", 0, 8, 0, 100, 0), Placement("b", 0, 8, 0, 200, 1)))
    with pytest.raises(ShardlabError, match="table 'a' is not covered whole"):
        validate_plan(task, half)


def test_device_out_of_range():
    with pytest.raises(ShardlabError, match="table 'a': field 'device' = 2"):
        Plan("p", "x", 2, (Placement("a", 0, 16, 0, 100, 2),))
    with pytest.raises(ShardlabError, match="'device'"):
        Placement("a", 0, 16, 0, 100, -1)


def test_block_outside_table_and_unknown_table():
    task = _task()
    with pytest.raises(ShardlabError, match="lies outside"):
        validate_plan(task, Plan("p", "x", 2, (Placement("a", 0, 32, 0, 100, 0),
                                               Placement("b", 0, 8, 0, 200, 1))))
    with pytest.raises(ShardlabError, match="table 'zz' is not in task"):
        validate_plan(task, Plan("p", "x", 2, (Placement("zz", 0, 8, 0, 10, 0),)))


def test_memory_over_cap_names_device():
    a = make_table("a", 40_000_000, 16)  # 2.4 GB
    task = Task("m", 2, 4.0, (a, make_table("b", 40_000_000, 16)))
    plan = Plan.table_wise(task, [0, 0], "x")
    with pytest.raises(InfeasibleError, match="device 0 holds 4.768 GB, 0.768 GB over"):
        validate_plan(task, plan)
    validate_plan(task, Plan.table_wise(task, [0, 1], "x"))


def test_plan_must_match_task():
    task = _task()
    plan = Plan("other", "x", 2, (Placement("a", 0, 16, 0, 100, 0), Placement("b", 0, 8, 0, 200, 1)))
    with pytest.raises(ShardlabError, match="'task'"):
        validate_plan(task, plan)


def test_plan_json_missing_field():
    with pytest.raises(ShardlabError, match="field 'device' is missing"):
        Plan.from_dict({"task": "p", "method": "x", "ngpu": 2,
                        "placements": [{"table": "a", "col_offset": 0, "cols": 16,
                                        "row_offset": 0, "rows": 100}]})
