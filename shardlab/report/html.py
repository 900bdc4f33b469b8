"""Standalone HTML plan-comparison reports: one file that works offline (plotly.js embedded
once, never fetched), with the task, each method's cost, ratio to the lower bound and search
time, per-GPU balance charts, and provenance (hardware profile, cost model, versions, seed)."""

from __future__ import annotations

import datetime as dt
import html
import os
from pathlib import Path
from typing import Any, Mapping

import plotly
import plotly.offline

from shardlab.evaluate import Evaluation
from shardlab.plan import Plan
from shardlab.report.costs import cost_summary_rows, device_cost_figure
from shardlab.report.figures import device_load_figure, rows_to_html, task_summary
from shardlab.tables import Task

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}code{background:#f6f6f6;padding:1px 4px}
.prov td{text-align:left}"""


def report_html(task: Task, plans: Mapping[str, Plan], evaluations: Mapping[str, Evaluation],
                provenance: Mapping[str, Any], title: str = "") -> str:
    """The report as one HTML string (module docstring)."""
    rows = cost_summary_rows(evaluations)
    for row in rows:
        plan = plans.get(str(row["method"]))
        row["search (s)"] = None if plan is None or plan.search_seconds is None else round(plan.search_seconds, 4)
        row["seed"] = None if plan is None else plan.seed
    figs = [device_cost_figure(evaluations), device_load_figure(task, plans, height=640)]
    parts = [fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False}) for fig in figs]
    prov_rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                        for k, v in provenance.items())
    title = title or f"Plan comparison: {task.name}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style>
<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script></head>
<body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(task_summary(task))}</p>
<h2>Cost per method</h2>
<p>Costs in ms per training step at the cost source's batch size; the source column says whether a
number was measured or predicted, and by what. The plan cost is the straggler's compute plus
forward (waiting included) and backward all-to-all.</p>
{rows_to_html(rows)}
<h2>Per-GPU balance</h2>
{parts[0]}
<h2>Per-GPU load known without measurement</h2>
{parts[1]}
<h2>Provenance</h2>
<table class="prov">{prov_rows}</table>
</body></html>
"""


def write_report(path: str | os.PathLike, task: Task, plans: Mapping[str, Plan],
                 evaluations: Mapping[str, Evaluation], provenance: Mapping[str, Any] | None = None,
                 title: str = "") -> Path:
    """Write :func:`report_html` atomically to ``path``; returns the path. ``provenance`` is
    completed with the date, plotly version and the evaluations' sources."""
    from shardlab.profile.provenance import environment

    prov = {**environment("cpu"), "plotly": plotly.__version__,
            "report date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "cost sources": ", ".join(sorted({e.source for e in evaluations.values()})), **(provenance or {})}
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(report_html(task, plans, evaluations, prov, title), encoding="utf-8")
    os.replace(tmp, out)
    return out
