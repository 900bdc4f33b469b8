"""Interactive per-GPU cost balance (ipywidgets + plotly FigureWidget, which needs anywidget).

:func:`balance_widget` shows two plans side by side (a method selector for each), per GPU the
stacked forward compute, backward compute, forward all-to-all (waiting included) and backward
all-to-all, the plan cost and the lower bound as lines, and on hover the tables on that GPU;
a toggle switches between simulated (model) and measured costs where both exist. Updates go
through ``FigureWidget.batch_update`` (never ``interactive_output``, which can hang papermill:
STACK_NOTES.md). With ``interactive=False`` (headless runs) it returns a static figure instead.
"""

from __future__ import annotations

from typing import Any, Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from shardlab.evaluate import Evaluation, device_tables
from shardlab.plan import Plan
from shardlab.report.costs import PARTS, device_cost_figure
from shardlab.tables import Task


def _hover(task: Task, plan: Plan) -> list[str]:
    return [", ".join(t.name for t in ts) or "(empty)" for ts in device_tables(task, plan)]


def _panel(fig: go.Figure, col: int, method: str, ev: Evaluation, hover: list[str]) -> list[dict[str, Any]]:
    """Write one plan's bars into subplot ``col`` (traces 4*(col-1) .. 4*col-1) and its title;
    returns its plan-cost and bound lines (shapes)."""
    x = [f"GPU {d.device}" for d in ev.per_device]
    for k, (key, label, _) in enumerate(PARTS):
        tr = fig.data[4 * (col - 1) + k]
        tr.x, tr.y, tr.customdata = x, [getattr(d, key) for d in ev.per_device], hover
        tr.hovertemplate = f"{method} %{{x}}<br>{label}: %{{y:.3f}} ms<br>tables: %{{customdata}}<extra></extra>"
    bound = f", bound {ev.lower_bound_ms:.2f} ms" if ev.lower_bound_ms else ""
    fig.layout.annotations[col - 1].text = f"<b>{method}</b><br>cost {ev.cost_ms:.2f} ms{bound}"
    xref, yref = ("x domain", "y") if col == 1 else ("x2 domain", "y2")
    lines: list[dict[str, Any]] = []
    lines.append(dict(type="line", xref=xref, yref=yref, x0=0, x1=1, y0=ev.cost_ms, y1=ev.cost_ms,
                      line=dict(dash="dash", color="black")))
    if ev.lower_bound_ms:
        lines.append(dict(type="line", xref=xref, yref=yref, x0=0, x1=1, y0=ev.lower_bound_ms, y1=ev.lower_bound_ms,
                          line=dict(dash="dot", color="gray")))
    return lines


def balance_widget(task: Task, plans: Mapping[str, Plan], simulated: Mapping[str, Evaluation],
                   measured: Mapping[str, Evaluation] | None = None, interactive: bool = True) -> Any:
    """The balance view (module docstring): an ipywidgets ``VBox`` when ``interactive``, else a
    static plotly figure of every plan (simulated costs, or measured where given)."""
    if not interactive:
        return device_cost_figure(measured or simulated)
    import ipywidgets as w

    methods = list(simulated)
    sources = {"simulated": simulated, **({"measured": measured} if measured else {})}
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
        caption.value = (f"<small>{task.name}: {len(task.tables)} tables on {task.ngpu} GPUs. Dashed: plan cost "
                         "(the straggler); dotted: lower bound. Hover a bar for the tables on that GPU.</small>")

    for control in (left, right, source):
        control.observe(redraw, names="value")
    redraw()
    fig.layout.autosize = True
    box = w.VBox([w.HBox([left, right, source]), fig, caption], layout=w.Layout(width="100%"))
    box.figure, box.controls = fig, {"plan A": left, "plan B": right, "costs": source}
    return box
