"""Plotly figures of plans.

:func:`device_load_figure` shows, per device and per method, what is known without any
measurement: memory (GB, with the cap), dim sum and embedding lookups per batch. It is titled
as such; measured or modelled costs (ms) are drawn by other figures once they exist.
"""

from __future__ import annotations

import html
from typing import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from shardlab.constants import GB
from shardlab.loads import device_loads, imbalance
from shardlab.plan import Plan
from shardlab.tables import Task

LOAD_TITLE = "Per-GPU load known without measurement (counts, not costs)"


def _hover_tables(names: tuple[str, ...], per_line: int = 6) -> str:
    if not names:
        return "(empty)"
    lines = [", ".join(names[i:i + per_line]) for i in range(0, len(names), per_line)]
    return "<br>".join(lines)


def device_load_figure(task: Task, plans: Mapping[str, Plan], height: int = 720) -> go.Figure:
    """Grouped bars, one group per device and one colour per method, in three rows:
    memory (GB) with the cap as a dashed line, dim sum (columns), lookups per batch
    (millions of embedding values). Hover lists the tables on the device."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=("Memory (GB)", "Dim sum (columns sent in the all-to-all)",
                                        "Lookups per batch (millions of values gathered)"))
    devices = [f"GPU {d}" for d in range(task.ngpu)]
    palette = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6",
               "#9D755D", "#BAB0AC", "#EECA3B")
    for k, (method, plan) in enumerate(plans.items()):
        loads = device_loads(task, plan)
        hover = [f"{method}, GPU {l.device}: {len(l.tables)} blocks<br>{_hover_tables(l.tables)}"
                 for l in loads]
        rows = ([l.mem_gb for l in loads], [l.dim_sum for l in loads],
                [l.lookups / 1e6 for l in loads])
        for r, values in enumerate(rows, start=1):
            fig.add_trace(go.Bar(x=devices, y=values, name=method, legendgroup=method,
                                 showlegend=r == 1, marker_color=palette[k % len(palette)],
                                 customdata=hover,
                                 hovertemplate="%{customdata}<br>%{y:.4g}<extra></extra>"),
                          row=r, col=1)
    fig.add_hline(y=task.mem_cap_gb, line_dash="dash", line_color="black", row=1, col=1,
                  annotation_text=f"cap {task.mem_cap_gb:g} GB", annotation_position="top left")
    fig.update_layout(title=f"{LOAD_TITLE}<br><sup>task {task.name}: {len(task.tables)} tables, "
                            f"{task.ngpu} GPUs, batch {task.batch_size}</sup>",
                      barmode="group", height=height, legend_title_text="method")
    return fig


def load_summary_rows(task: Task, plans: Mapping[str, Plan]) -> list[dict[str, object]]:
    """One row per method: max memory (GB), max/mean of dim sum and of lookups, search time (s)."""
    rows = []
    for method, plan in plans.items():
        loads = device_loads(task, plan)
        rows.append({"method": method,
                     "max_mem_gb": round(max(l.mem_gb for l in loads), 3),
                     "dim_sum_max_over_mean": round(imbalance([l.dim_sum for l in loads]), 3),
                     "lookups_max_over_mean": round(imbalance([l.lookups for l in loads]), 3),
                     "search_seconds": plan.search_seconds})
    return rows


def rows_to_html(rows: list[dict[str, object]]) -> str:
    """A plain HTML table of ``rows`` (list of dicts with the same keys)."""
    if not rows:
        return "<p>(no rows)</p>"
    keys = list(rows[0])
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r[k]))}</td>" for k in keys) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def task_summary(task: Task) -> str:
    """One line describing a task: tables, devices, cap (GB), batch, total table memory (GB)."""
    total = sum(task.table_bytes(t) for t in task.tables) / GB
    dims = sorted({t.dim for t in task.tables})
    return (f"task {task.name}: {len(task.tables)} tables (dims {dims}), {task.ngpu} GPUs x "
            f"{task.mem_cap_gb:g} GB, batch {task.batch_size}, {task.weights_precision}, "
            f"{task.optimizer}; tables use {total:.2f} GB of {task.ngpu * task.mem_cap_gb:g} GB")
