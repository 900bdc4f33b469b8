"""Scaled tasks (Criteo 1TB, held-out families) and the row-wise benchmark's bookkeeping."""

import pytest

from shardlab.errors import ShardlabError
from shardlab.workflows.criteo import criteo_task, row_layouts, scaled_task, summary
from shardlab.search.row_wise import oversized
from studies.row_wise.tasks import SPECS, build_task, verdicts


def test_a_scaled_criteo_task_keeps_its_shape_and_says_it_was_scaled():
    full = criteo_task(ngpu=8, mem_cap_gb=16.0, row_scale=1, batch_size=256)
    small = criteo_task(ngpu=8, mem_cap_gb=16.0, row_scale=64, batch_size=256)
    assert [max(1, t.rows // 64) for t in full.tables] == [t.rows for t in small.tables]
    assert small.mem_cap_gb == pytest.approx(16.0 / 64)
    assert [full.tables[i].name for i in oversized(full)] == [small.tables[i].name for i in oversized(small)]
    assert all("rows divided by 64" in t.source and "Zipf(1.05)" in t.source for t in small.tables)
    assert "divided" not in full.tables[0].source
    info = summary(small, 64)
    assert info["unscaled_mem_cap_gb"] == pytest.approx(16.0) and info["oversized"] == ["C1", "C20", "C22"]


@pytest.mark.parametrize("field,value", [("row_scale", 0), ("mem_cap_gb", 0.0)])
def test_bad_scaling_fields_are_named(field, value):
    kwargs = {"row_scale": 2, "mem_cap_gb": 1.0, field: value}
    with pytest.raises(ShardlabError, match=field):
        scaled_task([{"name": "a", "rows": 10, "dim": 4}], "t", 2, **kwargs)


def test_every_benchmark_task_has_tables_that_fit_no_device():
    for spec in SPECS:
        if spec.source != "criteo":       # criteo is checked above
            task = build_task(spec, 256)
            assert oversized(task), task.name
            assert sum(map(task.table_bytes, task.tables)) <= 0.9 * task.ngpu * task.mem_cap_bytes, task.name


def test_verdicts_count_only_tasks_where_both_have_a_plan():
    def rec(name, verdict, ref="torchrec_free", ci=None):
        ev = {"verdict": verdict, **({"ratio_ci95": ci} if ci else {})}
        return {"task": name, "reference": ref, "evaluations": {"neuroshard": ev} if verdict else {}}

    # an old record's "within noise" counts as what its interval says now (5% margin)
    out = verdicts([rec("a", "faster"), rec("b", "within noise", ci=[0.98, 1.03]), rec("c", "slower"),
                    rec("d", None), rec("e", "faster", ref=None), rec("f", "within noise", ci=[0.9, 1.1]),
                    rec("g", "inconclusive"), rec("h", "equivalent")])
    assert out["counts"] == {"faster": 1, "slower": 1, "equivalent": 2, "inconclusive": 2}
    assert out["judged"] == 6 and out["not_judged"] == ["d", "e"]
    assert out["faster_or_equivalent_share"] == pytest.approx(3 / 6)


def test_row_layouts_lists_the_devices_of_each_row_split_table():
    from shardlab.plan import Placement, Plan
    from shardlab.tables import Task
    from tests.conftest import make_table

    task = Task("t", 3, 1.0, (make_table("a", rows=100), make_table("b", rows=10)))
    plan = Plan("t", "m", 3, (Placement("a", 0, 16, 50, 50, 2), Placement("a", 0, 16, 0, 50, 1),
                              Placement("b", 0, 16, 0, 10, 0)), 0)
    assert row_layouts(task, plan) == {"a": [1, 2]}
