"""Live figures for JupyterLab: any plotly figure as a ``FigureWidget`` (anywidget) with a
detail pane that shows the clicked point (its trace, x, y and hover text, e.g. the tables of a
measured sample). Headless runs (``interactive=False``) get the plain figure back, so papermill
never waits on a widget (no ``interactive_output``, as measured on this stack)."""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go


def _describe(trace: Any, i: int) -> str:
    """HTML for point ``i`` of ``trace``: name, x, y and its hover text, if any."""
    def pick(values: Any) -> Any:
        if values is None or isinstance(values, str):
            return values
        return values[i] if i < len(values) else None

    x, y, text = pick(trace.x), pick(trace.y), pick(trace.text)
    fmt = (lambda v: f"{v:.4g}") if isinstance(y, float) else str
    parts = [f"<b>{html.escape(str(trace.name or 'point'))}</b>", f"x = {html.escape(fmt(x))}",
             f"y = {html.escape(fmt(y))}"]
    if text:
        parts.append(html.escape(str(text)).replace("&lt;br&gt;", "<br>"))
    return " &middot; ".join(parts)


def point_inspector(fig: go.Figure, interactive: bool = True, hint: str = "Click a point for its details.") -> Any:
    """``fig`` live (``interactive``): an ipywidgets ``VBox`` of the figure as a FigureWidget and an
    HTML pane describing the last clicked point; ``box.figure`` and ``box.pane`` expose both.
    Not interactive: ``fig`` itself, unchanged (show it with ``fig.show()``)."""
    if not interactive:
        return fig
    import ipywidgets as w

    live = go.FigureWidget(fig)
    pane = w.HTML(f"<small>{html.escape(hint)}</small>")

    def clicked(trace: Any, points: Any, _state: Any) -> None:
        if points.point_inds:
            pane.value = _describe(trace, points.point_inds[0])

    for trace in live.data:
        trace.on_click(clicked)
    box = w.VBox([live, pane])
    box.figure, box.pane = live, pane
    return box


def show(fig: go.Figure, interactive: bool = False, hint: str = "Click a point for its details.") -> None:
    """Display ``fig``: live with a click-for-details pane when ``interactive`` (JupyterLab),
    else as a static figure (headless papermill runs)."""
    if interactive:
        from IPython.display import display

        display(point_inspector(fig, True, hint))
    else:
        fig.show()
