"""The per-GPU load figure and summary: titled as counts (no costs), one trace per method and
panel, values equal to the plan's loads."""

from __future__ import annotations

import pytest

from shardlab.loads import device_loads, imbalance
from shardlab.report.figures import (LOAD_TITLE, device_load_figure, load_summary_rows,
                                     rows_to_html, task_summary)
from shardlab.search import run_sharders


def test_load_figure(small_task):
    plans = run_sharders(small_task, ["size_greedy", "random"], seed=0)
    fig = device_load_figure(small_task, plans)
    assert LOAD_TITLE in fig.layout.title.text and "without measurement" in LOAD_TITLE
    assert len(fig.data) == 2 * 3
    loads = device_loads(small_task, plans["random"])
    mem, dims, lookups = [t for t in fig.data if t.name == "random"]
    assert list(mem.y) == pytest.approx([l.mem_gb for l in loads])
    assert list(dims.y) == [l.dim_sum for l in loads]
    assert list(lookups.y) == pytest.approx([l.lookups / 1e6 for l in loads])
    assert "t0" in "".join(mem.customdata)  # hover lists tables


def test_loads_count_what_the_plan_holds(small_task):
    plan = run_sharders(small_task, ["dim_greedy"])["dim_greedy"]
    loads = device_loads(small_task, plan)
    assert sum(l.dim_sum for l in loads) == sum(t.dim for t in small_task.tables)
    total = sum(small_task.batch_size * t.pooling_factor * t.dim for t in small_task.tables)
    assert sum(l.lookups for l in loads) == pytest.approx(total)
    assert imbalance([1.0, 1.0]) == 1.0 and imbalance([2.0, 0.0]) == 2.0


def test_summary(small_task):
    plans = run_sharders(small_task, ["dim_greedy", "size_greedy"])
    rows = load_summary_rows(small_task, plans)
    assert [r["method"] for r in rows] == ["dim_greedy", "size_greedy"]
    html = rows_to_html(rows)
    assert html.count("<tr>") == 3 and "dim_sum_max_over_mean" in html
    assert "6 tables" in task_summary(small_task)
