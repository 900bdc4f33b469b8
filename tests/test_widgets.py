"""The balance widget reacts to its controls (no kernel needed) and falls back headless."""

from __future__ import annotations

import plotly.graph_objects as go

from shardlab.costmodel.bundle import load_bundle
from shardlab.data.tasks import generate_task
from shardlab.evaluate import estimate_plan
from shardlab.report.widgets import balance_widget
from shardlab.search import get_sharder, run_sharder


def setup():
    task = generate_task(ntables=10, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=12)
    plans = {m: run_sharder(get_sharder(m), task) for m in ("random", "dim_greedy", "neuroshard_tw")}
    sim = {m: estimate_plan(task, p, load_bundle("analytic")) for m, p in plans.items()}
    other = {m: estimate_plan(task, p, load_bundle("neuroshard")) for m, p in plans.items()}
    return task, plans, sim, other


def test_widget_redraws_on_selection_and_source_toggle():
    task, plans, sim, other = setup()
    box = balance_widget(task, plans, sim, other, interactive=True)
    fig, controls = box.figure, box.controls
    assert isinstance(fig, go.FigureWidget) and len(fig.data) == 8
    assert list(fig.data[0].y) == [d.fw_compute_ms for d in sim["random"].per_device]
    controls["plan A"].value = "dim_greedy"
    assert list(fig.data[1].y) == [d.bw_compute_ms for d in sim["dim_greedy"].per_device]
    assert fig.layout.annotations[0].text.startswith("<b>dim_greedy</b><br>cost ")
    assert any("t" in c for c in fig.data[0].customdata)          # hover lists tables
    controls["costs"].value = "measured"
    assert list(fig.data[4 + 2].y) == [d.fw_comm_ms for d in other["neuroshard_tw"].per_device]
    assert other["neuroshard_tw"].source in fig.layout.title.text
    dashed = [s for s in fig.layout.shapes if s.line.dash == "dash"]
    assert sorted(round(s.y0, 6) for s in dashed) == sorted(round(other[m].cost_ms, 6)
                                                           for m in ("dim_greedy", "neuroshard_tw"))


def test_widget_headless_fallback_and_single_source():
    task, plans, sim, _ = setup()
    static = balance_widget(task, plans, sim, interactive=False)
    assert isinstance(static, go.Figure) and not isinstance(static, go.FigureWidget)
    assert balance_widget(task, plans, sim).controls["costs"].disabled
