"""Figures and tables of plan costs (ms) from Evaluations: per-GPU stacked bars of forward
and backward compute and forward and backward all-to-all, one panel per method, and one bar per
plan of its cost; each titled with the Evaluations' ``source`` (``measured:...``, ``model:...``
or ``analytic:...``), so a reader always knows whether a number was measured or predicted.

Costs measured in paired rounds carry their 95% interval (error bars, shaded bands, ``[lo,
hi]``) and, against the reference plan, the paired ratio with its interval and the verdict;
predictions say they carry no uncertainty (:mod:`shardlab.report.uncertainty`)."""

from __future__ import annotations

from typing import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from shardlab.evaluate import Evaluation
from shardlab.report.uncertainty import (NO_UNCERTAINTY, ci_text, is_measured, ratio_text, reference_of,
                                         verdict_text)

PARTS = (("fw_compute_ms", "forward compute", "#4C78A8"), ("bw_compute_ms", "backward compute", "#72B7B2"),
         ("fw_comm_ms", "forward all-to-all (incl. waiting)", "#F58518"),
         ("bw_comm_ms", "backward all-to-all", "#E45756"))

#: Plan-cost bars: every plan, and the reference plan (also hatched).
PLAN_COLOUR, REFERENCE_COLOUR = "#4C78A8", "#9D755D"

#: The figure's words for the dotted line, shown only where an evaluation has a bound (a
#: learned model gives none: docs/measurement.md, "The lower bound").
BOUND_NOTE = "; dotted: lower bound"


def _panel_title(method: str, ev: Evaluation) -> str:
    ci = f" [{ev.ci95_ms[0]:.2f}, {ev.ci95_ms[1]:.2f}]" if ev.ci95_ms else ""
    return f"{method}<br>{ev.cost_ms:.2f} ms{ci}"


def device_cost_figure(evaluations: Mapping[str, Evaluation], height: int | None = None, per_row: int = 5) -> go.Figure:
    """One panel per method (``per_row`` panels a row): per-GPU stacked cost parts (ms); the
    plan cost (the straggler; the median over rounds when measured in rounds) as a dashed line
    with its 95% interval as a grey band, and the lower bound (if any) as a dotted line. Sources
    are named in the title. ``height`` (px) defaults to 150 + 330 per row of panels."""
    names = list(evaluations)
    cols = max(1, min(len(names), per_row))
    rows = max(1, -(-len(names) // cols))
    fig = make_subplots(rows=rows, cols=cols, shared_yaxes=True, vertical_spacing=0.3 / rows,
                        subplot_titles=[_panel_title(m, evaluations[m]) for m in names])
    for k, m in enumerate(names):
        ev, row, col = evaluations[m], k // cols + 1, k % cols + 1
        x = [f"GPU {d.device}" for d in ev.per_device]
        for key, label, colour in PARTS:
            fig.add_trace(go.Bar(x=x, y=[getattr(d, key) for d in ev.per_device], name=label, legendgroup=label,
                                 showlegend=k == 0, marker_color=colour,
                                 hovertemplate=f"{m} %{{x}}<br>{label}: %{{y:.3f}} ms<extra></extra>"),
                          row=row, col=col)
        if ev.ci95_ms:
            fig.add_hrect(y0=ev.ci95_ms[0], y1=ev.ci95_ms[1], fillcolor="black", opacity=0.18, line_width=0,
                          row=row, col=col)
        fig.add_hline(y=ev.cost_ms, line_dash="dash", line_color="black", row=row, col=col)
        if ev.lower_bound_ms:
            fig.add_hline(y=ev.lower_bound_ms, line_dash="dot", line_color="gray", row=row, col=col)
    sources = sorted({ev.source for ev in evaluations.values()})
    band = ("; grey band: its 95% CI over rounds" if any(e.ci95_ms for e in evaluations.values())
            else "" if any(is_measured(e) for e in evaluations.values()) else f" ({NO_UNCERTAINTY})")
    fig.update_layout(barmode="stack", height=height or 150 + 330 * rows, legend_title_text="cost part",
                      margin=dict(t=130),
                      title=f"Per-GPU cost (ms), {' / '.join(sources)}<br><sup>dashed: plan cost (the straggler)"
                            f"{band}{BOUND_NOTE if any(e.lower_bound_ms for e in evaluations.values()) else ''}</sup>")
    for row in range(1, rows + 1):
        fig.update_yaxes(title_text="ms", row=row, col=1)
    fig.update_yaxes(matches="y")
    return fig


def _error_bars(evaluations: Mapping[str, Evaluation]) -> dict[str, object]:
    """Asymmetric plotly ``error_y`` (ms above and below each plan's cost) from ``ci95_ms``;
    zero where a plan has no interval, invisible when none has."""
    evs = list(evaluations.values())
    up = [e.ci95_ms[1] - e.cost_ms if e.ci95_ms else 0.0 for e in evs]
    down = [e.cost_ms - e.ci95_ms[0] if e.ci95_ms else 0.0 for e in evs]
    return dict(type="data", symmetric=False, array=up, arrayminus=down, visible=any(e.ci95_ms for e in evs),
                color="black", thickness=1.5, width=6)


def plan_cost_figure(evaluations: Mapping[str, Evaluation], height: int = 460) -> go.Figure:
    """One bar per plan: its cost (ms; the median over rounds when measured in rounds) with the
    95% interval as error bars, the reference plan hatched, the lower bound dotted; under each
    name its ratio to the reference and the verdict (or :data:`NO_UNCERTAINTY` for predictions).
    Hover repeats the numbers with their intervals."""
    names = list(evaluations)
    evs = [evaluations[m] for m in names]
    ref = reference_of(evaluations)
    ticks = [f"<b>{m}</b><br>{_tick_note(m, e)}" for m, e in zip(names, evs)]
    custom = [[ci_text(e), ratio_text(m, e) or "-", verdict_text(m, e) or "-"] for m, e in zip(names, evs)]
    fig = go.Figure(go.Bar(x=names, y=[e.cost_ms for e in evs], error_y=_error_bars(evaluations),
                           marker_color=[REFERENCE_COLOUR if m == ref else PLAN_COLOUR for m in names],
                           marker_pattern_shape=["/" if m == ref else "" for m in names], customdata=custom,
                           name="plan cost", showlegend=False,
                           hovertemplate="%{x}: %{y:.3f} ms<br>95% CI: %{customdata[0]}<br>ratio vs "
                                         f"{ref or '-'}: %{{customdata[1]}}<br>%{{customdata[2]}}<extra></extra>"))
    bound = next((e.lower_bound_ms for e in evs if e.lower_bound_ms), None)
    if bound:
        fig.add_hline(y=bound, line_dash="dot", line_color="gray", annotation_text=f"lower bound {bound:.2f} ms",
                      annotation_position="top left")
    fig.update_xaxes(tickmode="array", tickvals=names, ticktext=ticks)
    fig.update_layout(height=height, yaxis_title="plan cost (ms)", margin=dict(t=110, b=120),
                      title=f"Plan cost (ms), {' / '.join(sorted({e.source for e in evs}))}<br><sup>"
                            f"{_figure_note(evaluations, ref)}</sup>")
    return fig


def _tick_note(name: str, ev: Evaluation) -> str:
    """Under a bar: ``reference``, ``x0.953 faster`` or ``x0.953 (predicted)``."""
    c = ev.comparison
    if c is None:
        return ""
    if c.reference == name:
        return "reference"
    verdict = verdict_text(name, ev)
    return f"x{c.ratio:.3f} " + ("(predicted)" if verdict == NO_UNCERTAINTY else verdict)


def _figure_note(evaluations: Mapping[str, Evaluation], ref: str | None) -> str:
    evs = list(evaluations.values())
    vs = f"; hatched: the reference, {ref}" if ref else ""
    if any(e.ci95_ms for e in evs):
        rounds = max(len(e.rounds_ms or ()) for e in evs)
        return f"median over {rounds} paired rounds; error bars: 95% bootstrap CI of the median{vs}"
    if any(is_measured(e) for e in evs):
        return f"measured without an interval (< 3 rounds){vs}"
    return f"{NO_UNCERTAINTY}{vs}"


def cost_summary_rows(evaluations: Mapping[str, Evaluation]) -> list[dict[str, object]]:
    """One row per method: plan cost (ms; median over rounds when measured in rounds), with
    ``cost 95% CI (ms)`` and ``rounds`` when any plan was measured in rounds, ratio to the lower
    bound and to the best plan found (``bound rests on``: what each bound is, where an evaluation
    says), ratio to the reference plan (``ratio vs <ref> [95% CI]`` when any ratio has an
    interval, else ``ratio vs <ref>``) and ``verdict`` (``reference`` on the reference's row;
    :data:`NO_UNCERTAINTY` for predictions), max/mean of per-GPU compute (1 = even; totals are
    near-even by construction, since the forward all-to-all includes waiting for the
    straggler), and the source of the numbers."""
    evs = evaluations.values()
    rounds = any(e.rounds_ms for e in evs)
    ref = reference_of(evaluations)
    ratio_key = f"ratio vs {ref}" + (" [95% CI]" if any(e.comparison and e.comparison.ratio_ci95 for e in evs) else "")
    rows = []
    best = min(e.cost_ms for e in evs) if evaluations else 0.0
    said = any(e.bound_source for e in evs)
    for m, ev in evaluations.items():
        compute = [d.fw_compute_ms + d.bw_compute_ms for d in ev.per_device]
        mean = sum(compute) / len(compute)
        row: dict[str, object] = {"method": m, "cost (ms)": round(ev.cost_ms, 3)}
        if rounds:
            row.update({"cost 95% CI (ms)": ci_text(ev), "rounds": len(ev.rounds_ms or ()) or None})
        row["cost / lower bound"] = round(ev.cost_ms / ev.lower_bound_ms, 3) if ev.lower_bound_ms else None
        row["cost / best found"] = round(ev.cost_ms / best, 3) if best > 0 else None
        if said:
            row["bound rests on"] = ev.bound_source
        if ref is not None:
            row.update({ratio_key: ratio_text(m, ev), "verdict": verdict_text(m, ev)})
        row.update({"compute max / mean": round(max(compute) / mean, 3) if mean > 0 else None, "source": ev.source})
        rows.append(row)
    return rows
