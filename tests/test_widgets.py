"""The balance widget reacts to its controls (no kernel needed) and falls back headless."""

from __future__ import annotations

import plotly.graph_objects as go

from shardlab.costmodel.bundle import load_bundle
from shardlab.data.tasks import generate_task
from shardlab.evaluate import estimate_plan
from shardlab.report.widgets import balance_widget
from shardlab.search import get_sharder, run_sharder
from tests.rounds_fakes import as_measured


def setup():
    task = generate_task(ntables=10, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=12)
    plans = {m: run_sharder(get_sharder(m), task) for m in ("random", "dim_greedy", "neuroshard[columns=false]")}
    sim = {m: estimate_plan(task, p, load_bundle("analytic")) for m, p in plans.items()}
    other = as_measured({m: estimate_plan(task, p, load_bundle("neuroshard")) for m, p in plans.items()})
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
    assert list(fig.data[4 + 2].y) == [d.fw_comm_ms for d in other["neuroshard[columns=false]"].per_device]
    assert other["neuroshard[columns=false]"].source in fig.layout.title.text
    dashed = [s for s in fig.layout.shapes if s.line.dash == "dash"]
    assert sorted(round(s.y0, 6) for s in dashed) == sorted(round(other[m].cost_ms, 6)
                                                           for m in ("dim_greedy", "neuroshard[columns=false]"))


def test_widget_headless_fallback_and_single_source():
    task, plans, sim, _ = setup()
    static = balance_widget(task, plans, sim, interactive=False)
    assert isinstance(static, go.Figure) and not isinstance(static, go.FigureWidget)
    assert balance_widget(task, plans, sim).controls["costs"].disabled
    # predictions passed as the second set (a notebook that did not measure) are not offered as measured
    box = balance_widget(task, plans, sim, sim)
    assert box.controls["costs"].disabled and list(box.controls["costs"].options) == ["simulated"]


def test_widget_shows_measured_intervals_and_the_verdict_of_b_vs_a():
    """Measured in paired rounds: each panel's cost carries its 95% interval (a band shape and
    [lo, hi] in the title) and the caption states plan B against plan A with the paired verdict;
    predictions say they carry no uncertainty."""
    from shardlab.evaluate import compare_to_reference
    task, plans, sim, _ = setup()
    measured = as_measured(sim, rounds=5, seed=4)
    box = balance_widget(task, plans, sim, measured, interactive=True, seed=4)
    fig, controls = box.figure, box.controls
    assert "predicted, no uncertainty" in box.caption.value
    assert not [s for s in fig.layout.shapes if s.type == "rect"]
    controls["costs"].value = "measured"
    a, b = controls["plan A"].value, controls["plan B"].value
    bands = sorted((round(s.y0, 9), round(s.y1, 9)) for s in fig.layout.shapes if s.type == "rect")
    assert bands == sorted((round(measured[m].ci95_ms[0], 9), round(measured[m].ci95_ms[1], 9)) for m in (a, b))
    lo, hi = measured[a].ci95_ms
    assert f"[{lo:.2f}, {hi:.2f}]" in fig.layout.annotations[0].text
    want = compare_to_reference({a: measured[a], b: measured[b]}, reference=a, seed=4)[b].comparison
    assert want.verdict in box.caption.value and f"x{want.ratio:.3f} [{want.ratio_ci95[0]:.3f}" in box.caption.value
    controls["plan B"].value = "dim_greedy"
    want = compare_to_reference({a: measured[a], "dim_greedy": measured["dim_greedy"]}, reference=a, seed=4)
    assert f"dim_greedy: {measured['dim_greedy'].cost_ms:.3f} ms" in box.caption.value
    assert f"x{want['dim_greedy'].comparison.ratio:.3f}" in box.caption.value


def test_headless_fallback_keeps_the_intervals():
    task, plans, sim, _ = setup()
    measured = as_measured(sim, rounds=5)
    static = balance_widget(task, plans, sim, measured, interactive=False)
    rects = [s for s in static.layout.shapes if s.type == "rect"]
    assert sorted((round(s.y0, 9), round(s.y1, 9)) for s in rects) == sorted(
        (round(e.ci95_ms[0], 9), round(e.ci95_ms[1], 9)) for e in measured.values())
    assert "95% CI" in static.layout.title.text


def test_the_dotted_bound_is_drawn_and_named_only_where_the_model_gives_one():
    """The analytic model proves a lower bound; the learned one gives none, so its figure has
    neither the dotted line nor the words for it."""
    from shardlab.report.costs import BOUND_NOTE, device_cost_figure

    task, plans, sim, _ = setup()
    learned = {m: estimate_plan(task, p, load_bundle("neuroshard")) for m, p in plans.items()}
    assert all(e.lower_bound_ms is None for e in learned.values())
    assert all(0 < e.lower_bound_ms <= e.cost_ms for e in sim.values())
    with_bound, without = device_cost_figure(sim), device_cost_figure(learned)
    assert BOUND_NOTE in with_bound.layout.title.text and BOUND_NOTE not in without.layout.title.text
    assert any(s.line.dash == "dot" for s in with_bound.layout.shapes)
    assert not any(s.line.dash == "dot" for s in without.layout.shapes)
    box = balance_widget(task, plans, learned, interactive=True)
    assert "dotted" not in box.caption.value
