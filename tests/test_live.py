"""Live figures: the click-for-details pane, and the static fallback headless."""

from __future__ import annotations

import plotly.graph_objects as go

from shardlab.report.live import point_inspector
from shardlab.report.measured import sample_label


def test_point_inspector_shows_the_clicked_point():
    fig = go.Figure(go.Scatter(x=[1.0, 2.0], y=[3.0, 4.5], text=["2 tables: a@16, b<br>x", "1 table"], name="unseen"))
    box = point_inspector(fig, interactive=True)
    trace = box.figure.data[0]
    assert "Click a point" in box.pane.value
    points = type("Points", (), {"point_inds": [1], "xs": [2.0], "ys": [4.5]})()
    trace._dispatch_on_click(points, None)               # what a click in the browser triggers
    assert "<b>unseen</b>" in box.pane.value and "y = 4.5" in box.pane.value and "1 table" in box.pane.value
    points.point_inds = [0]
    trace._dispatch_on_click(points, None)
    assert "a@16, b<br>x" in box.pane.value and "y = 3" in box.pane.value


def test_headless_returns_the_figure_itself():
    fig = go.Figure(go.Bar(y=[1, 2]))
    assert point_inspector(fig, interactive=False) is fig


def test_sample_label_names_tables_and_dims():
    sample = {"tables": [{"name": f"t{i}", "dim": 8 * (i + 1)} for i in range(10)]}
    assert sample_label(sample, most=3) == "t0@8, t1@16, t2@24 and 7 more"
