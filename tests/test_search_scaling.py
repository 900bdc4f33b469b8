"""The search-scaling study's pieces: tasks beyond the pool are augmented and say so; a
point reports what the report needs; the figure is log-log."""

from __future__ import annotations

from studies.search_scaling.figure import scaling_figure
from studies.search_scaling.scaling import scaling_task, time_search


def test_a_task_larger_than_the_pool_is_augmented_and_says_so():
    small, said = scaling_task(50, 8)
    assert len(small.tables) == 50 and "augmented" not in said
    big, said = scaling_task(1000, 8)
    names = [t.name for t in big.tables]
    assert len(names) == len(set(names)) == 1000
    assert said.startswith("augmented") and any("@d" in n for n in names)
    assert all(big.block_bytes(t.rows, t.dim) <= big.mem_cap_bytes for t in big.tables)


def test_a_point_reports_time_cost_memory_and_the_same_plan_again():
    tw = time_search(30, 4, column_wise=False)
    cw = time_search(30, 4, column_wise=True)
    for row in (tw, cw):
        assert row["search_s"] > 0 and row["simulated_ms"] > 0
        assert row["peak_rss_mb"] >= row["rss_before_mb"] > 0
    assert (cw["search"], tw["search"], tw["column_blocks"]) == ("column-wise", "table-wise", 0)
    again = time_search(30, 4, column_wise=True)
    assert (again["simulated_ms"], again["column_blocks"]) == (cw["simulated_ms"], cw["column_blocks"])


def test_scaling_figure_is_log_log_with_the_before_search_dashed():
    rows = [{"tables": n, "gpus": 8, "search": "column-wise", "batched": b, "search_s": s}
            for n, b, s in ((50, True, 0.1), (100, True, 0.3), (100, False, 2.0))]
    rows.append({"tables": 200, "gpus": 8, "search": "column-wise", "batched": True, "error": "over 600 s"})
    fig = scaling_figure(rows)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert [t.line.dash for t in fig.data] == ["solid", "dash"]
    assert list(fig.data[0].x) == [50, 100]
