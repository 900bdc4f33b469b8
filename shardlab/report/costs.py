"""Figures and tables of plan costs (ms) from an Evaluation: per-GPU stacked bars of forward
and backward compute and forward and backward all-to-all, one panel per method, titled with
the Evaluation's ``source`` (``measured:...``, ``model:...`` or ``analytic:...``), so a
reader always knows whether a number was measured or predicted."""

from __future__ import annotations

from typing import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from shardlab.evaluate import Evaluation

PARTS = (("fw_compute_ms", "forward compute", "#4C78A8"), ("bw_compute_ms", "backward compute", "#72B7B2"),
         ("fw_comm_ms", "forward all-to-all (incl. waiting)", "#F58518"),
         ("bw_comm_ms", "backward all-to-all", "#E45756"))


def device_cost_figure(evaluations: Mapping[str, Evaluation], height: int | None = None, per_row: int = 5) -> go.Figure:
    """One panel per method (``per_row`` panels a row): per-GPU stacked cost parts (ms); the
    straggler's total and the lower bound (if any) as dashed and dotted lines. Sources are named
    in the title. ``height`` (px) defaults to 150 + 330 per row of panels."""
    names = list(evaluations)
    cols = max(1, min(len(names), per_row))
    rows = max(1, -(-len(names) // cols))
    fig = make_subplots(rows=rows, cols=cols, shared_yaxes=True, vertical_spacing=0.3 / rows,
                        subplot_titles=[f"{m}<br>{evaluations[m].cost_ms:.2f} ms" for m in names])
    for k, m in enumerate(names):
        ev, row, col = evaluations[m], k // cols + 1, k % cols + 1
        x = [f"GPU {d.device}" for d in ev.per_device]
        for key, label, colour in PARTS:
            fig.add_trace(go.Bar(x=x, y=[getattr(d, key) for d in ev.per_device], name=label, legendgroup=label,
                                 showlegend=k == 0, marker_color=colour,
                                 hovertemplate=f"{m} %{{x}}<br>{label}: %{{y:.3f}} ms<extra></extra>"),
                          row=row, col=col)
        fig.add_hline(y=ev.cost_ms, line_dash="dash", line_color="black", row=row, col=col)
        if ev.lower_bound_ms:
            fig.add_hline(y=ev.lower_bound_ms, line_dash="dot", line_color="gray", row=row, col=col)
    sources = sorted({ev.source for ev in evaluations.values()})
    fig.update_layout(barmode="stack", height=height or 150 + 330 * rows, legend_title_text="cost part",
                      margin=dict(t=130),
                      title=f"Per-GPU cost (ms), {' / '.join(sources)}<br><sup>dashed: plan cost (the straggler); "
                            "dotted: lower bound</sup>")
    for row in range(1, rows + 1):
        fig.update_yaxes(title_text="ms", row=row, col=1)
    fig.update_yaxes(matches="y")
    return fig


def cost_summary_rows(evaluations: Mapping[str, Evaluation]) -> list[dict[str, object]]:
    """One row per method: plan cost (ms), ratio to the lower bound, max/mean of per-GPU compute
    (1 = even; totals are near-even by construction, since the forward all-to-all includes
    waiting for the straggler), and the source of the numbers."""
    rows = []
    for m, ev in evaluations.items():
        compute = [d.fw_compute_ms + d.bw_compute_ms for d in ev.per_device]
        mean = sum(compute) / len(compute)
        rows.append({"method": m, "cost (ms)": round(ev.cost_ms, 3),
                     "cost / lower bound": round(ev.cost_ms / ev.lower_bound_ms, 3) if ev.lower_bound_ms else None,
                     "compute max / mean": round(max(compute) / mean, 3) if mean > 0 else None, "source": ev.source})
    return rows
