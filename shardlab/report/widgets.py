"""Interactive per-GPU cost balance (ipywidgets + plotly FigureWidget, which needs anywidget).

:func:`balance_widget` shows two plans side by side (a method selector for each), per GPU the
stacked forward compute, backward compute, forward all-to-all (waiting included) and backward
all-to-all, the plan cost and the lower bound as lines, and on hover the tables on that GPU;
a toggle switches between simulated (model) and measured costs where both exist. Measured in
paired rounds, each plan's cost shows its 95% interval (a grey band around the dashed line and
``[lo, hi]`` in the panel title) and the caption states plan B against plan A: the paired ratio,
its interval and the verdict; predictions say they carry no uncertainty. Updates go
through ``FigureWidget.batch_update`` (never ``interactive_output``, which can hang papermill:
docs/measurement.md). With ``interactive=False`` (headless runs) it returns a static figure instead.
"""

from __future__ import annotations

import html
from typing import Any, Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from shardlab.evaluate import Evaluation, device_tables
from shardlab.plan import Plan
from shardlab.report.costs import BOUND_NOTE, PARTS, device_cost_figure
from shardlab.report.uncertainty import is_measured, pair_text
from shardlab.tables import Task


def _hover(task: Task, plan: Plan) -> list[str]:
    return [", ".join(t.name for t in ts) or "(empty)" for ts in device_tables(task, plan)]


def _panel(fig: go.Figure, col: int, method: str, ev: Evaluation, hover: list[str]) -> list[dict[str, Any]]:
    """Write one plan's bars into subplot ``col`` (traces 4*(col-1) .. 4*col-1) and its title;
    returns its shapes: the plan-cost line, its 95% interval as a band (measured in rounds) and
    the bound line."""
    x = [f"GPU {d.device}" for d in ev.per_device]
    for k, (key, label, _) in enumerate(PARTS):
        tr = fig.data[4 * (col - 1) + k]
        tr.x, tr.y, tr.customdata = x, [getattr(d, key) for d in ev.per_device], hover
        tr.hovertemplate = f"{method} %{{x}}<br>{label}: %{{y:.3f}} ms<br>tables: %{{customdata}}<extra></extra>"
    bound = f", bound {ev.lower_bound_ms:.2f} ms" if ev.lower_bound_ms else ""
    ci = f" [{ev.ci95_ms[0]:.2f}, {ev.ci95_ms[1]:.2f}]" if ev.ci95_ms else ""
    fig.layout.annotations[col - 1].text = f"<b>{method}</b><br>cost {ev.cost_ms:.2f} ms{ci}{bound}"
    xref, yref = ("x domain", "y") if col == 1 else ("x2 domain", "y2")
    lines: list[dict[str, Any]] = []
    if ev.ci95_ms:
        lines.append(dict(type="rect", xref=xref, yref=yref, x0=0, x1=1, y0=ev.ci95_ms[0], y1=ev.ci95_ms[1],
                          fillcolor="black", opacity=0.18, line=dict(width=0), layer="above"))
    lines.append(dict(type="line", xref=xref, yref=yref, x0=0, x1=1, y0=ev.cost_ms, y1=ev.cost_ms,
                      line=dict(dash="dash", color="black")))
    if ev.lower_bound_ms:
        lines.append(dict(type="line", xref=xref, yref=yref, x0=0, x1=1, y0=ev.lower_bound_ms, y1=ev.lower_bound_ms,
                          line=dict(dash="dot", color="gray")))
    return lines


def measured_costs(evaluations: Mapping[str, Evaluation]) -> bool:
    """True when any of ``evaluations`` was measured (the widget's ``measured`` toggle needs them)."""
    return any(is_measured(e) for e in evaluations.values())


def balance_widget(task: Task, plans: Mapping[str, Plan], simulated: Mapping[str, Evaluation],
                   measured: Mapping[str, Evaluation] | None = None, interactive: bool = True,
                   seed: int = 0) -> Any:
    """The balance view (module docstring): an ipywidgets ``VBox`` when ``interactive`` (``.figure``,
    ``.controls``, ``.caption``: the HTML under the figure), else a static plotly figure of every
    plan (simulated costs, or measured where given, with their intervals). ``measured`` may be
    predictions too (a notebook that did not measure passes its one set of Evaluations): the
    toggle offers measured costs only when they were measured. ``seed``: the bootstrap of the
    plan B vs plan A interval."""
    if not interactive:
        return device_cost_figure(measured if measured and measured_costs(measured) else simulated)
    import ipywidgets as w

    methods = list(simulated)
    sources = {"simulated": simulated, **({"measured": measured} if measured and measured_costs(measured) else {})}
    fig = go.FigureWidget(make_subplots(rows=1, cols=2, shared_yaxes=True, subplot_titles=("plan A", "plan B")))
    for col in (1, 2):
        for key, label, colour in PARTS:
            fig.add_bar(x=[], y=[], name=label, legendgroup=label, showlegend=col == 1, marker_color=colour,
                        row=1, col=col)
    fig.update_layout(barmode="stack", height=500, yaxis_title="ms", margin=dict(t=150, r=20),
                      legend=dict(orientation="h", yanchor="bottom", y=1.16, x=0, title_text=""))
    left = w.Dropdown(options=methods, value=methods[0], description="plan A")
    right = w.Dropdown(options=methods, value=methods[-1], description="plan B")
    source = w.ToggleButtons(options=list(sources), value="simulated", description="costs",
                             disabled=len(sources) == 1)
    caption = w.HTML()

    def redraw(*_: Any) -> None:
        evs = sources[source.value]
        with fig.batch_update():
            lines = []
            for col, pick in ((1, left.value), (2, right.value)):
                lines += _panel(fig, col, pick, evs[pick], _hover(task, plans[pick]))
            fig.layout.shapes = lines
            fig.layout.title = f"Per-GPU cost (ms), {evs[left.value].source}"
        band = "; grey band: its 95% CI over rounds" if any(evs[p].ci95_ms for p in (left.value, right.value)) else ""
        bound = BOUND_NOTE if any(evs[p].lower_bound_ms for p in (left.value, right.value)) else ""
        vs = html.escape(pair_text(left.value, evs[left.value], right.value, evs[right.value], seed))
        caption.value = (f"<b>plan B vs plan A</b>: {vs}<br><small>{task.name}: {len(task.tables)} tables on "
                         f"{task.ngpu} GPUs. Dashed: plan cost (the straggler){band}{bound}. Hover a "
                         "bar for the tables on that GPU.</small>")

    for control in (left, right, source):
        control.observe(redraw, names="value")
    redraw()
    fig.layout.autosize = True
    box = w.VBox([w.HBox([left, right, source]), fig, caption], layout=w.Layout(width="100%"))
    box.figure, box.controls, box.caption = fig, {"plan A": left, "plan B": right, "costs": source}, caption
    return box
