"""Standalone HTML plan-comparison reports: one file that works offline (plotly.js embedded
once, never fetched), with the task, each method's cost, ratio to the lower bound and search
time, per-GPU balance charts, and provenance (hardware profile, cost model, versions, seed).

Where costs were measured in paired rounds the report shows their uncertainty: each plan's cost
with its 95% interval (error bars, bands, ``[lo, hi]``), its ratio to the reference plan with
that ratio's interval and the verdict; predictions are labelled as carrying no uncertainty
(:mod:`shardlab.report.uncertainty`)."""

from __future__ import annotations

import datetime as dt
import html
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import plotly
import plotly.graph_objects as go
import plotly.offline

from shardlab.evaluate import Evaluation
from shardlab.io import write_text_atomic
from shardlab.plan import Plan
from shardlab.report.costs import cost_summary_rows, device_cost_figure, plan_cost_figure
from shardlab.report.figures import device_load_figure, rows_to_html, task_summary
from shardlab.report.uncertainty import uncertainty_note, with_comparisons
from shardlab.tables import Task

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}code{background:#f6f6f6;padding:1px 4px}
.prov td{text-align:left}"""


def figure_html(fig: go.Figure) -> str:
    """One figure as an HTML fragment that uses the page's inlined plotly.js."""
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})


def provenance_table(provenance: Mapping[str, Any]) -> str:
    """Provenance as a two-column HTML table (keys and values escaped)."""
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                   for k, v in provenance.items())
    return f'<table class="prov">{rows}</table>'


def standalone_page(title: str, body: str, extra_style: str = "") -> str:
    """A complete offline HTML page: ``title`` as heading, ``body`` (HTML) below it, plotly.js
    inlined once in the head (never fetched)."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}{extra_style}</style>
<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script></head>
<body>
<h1>{html.escape(title)}</h1>
{body}
</body></html>
"""


#: What a page says of its machine and versions when the caller passed none.
NO_ENVIRONMENT: Mapping[str, Any] = {"machine and versions": "not given"}


def page_provenance(sources: Mapping[str, str], provenance: Mapping[str, Any] | None = None,
                    environment: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A report's provenance: the machine and versions (``environment``, as the caller recorded
    it, e.g. :func:`shardlab.measure.hardware.environment`; :data:`NO_ENVIRONMENT` when not
    given: this layer only draws, it does not inspect the machine), plotly version, date, the
    cost ``sources`` (label -> source text), then the caller's ``provenance`` (which wins on
    equal keys)."""
    return {**(NO_ENVIRONMENT if environment is None else environment), "plotly": plotly.__version__,
            "report date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            **sources, **(provenance or {})}


def _sources(evaluations: Iterable[Evaluation]) -> str:
    return ", ".join(sorted({e.source for e in evaluations}))


#: Provenance keys shown above the costs as well: which hardware profile the plans were made for
#: and which profile (and how) the cost columns are for.
PROFILE_KEYS = ("plans made for", "costs")


def report_html(task: Task, plans: Mapping[str, Plan], evaluations: Mapping[str, Evaluation],
                provenance: Mapping[str, Any], title: str = "", seed: int = 0) -> str:
    """The report as one HTML string (module docstring). Evaluations without any comparison are
    compared to the best baseline here (statistics only, bootstrap ``seed``)."""
    evaluations = with_comparisons(evaluations, seed)
    rows = cost_summary_rows(evaluations)
    for row in rows:
        plan = plans.get(str(row["method"]))
        row["search (s)"] = None if plan is None or plan.search_seconds is None else round(plan.search_seconds, 4)
        row["seed"] = None if plan is None else plan.seed
    figs = [plan_cost_figure(evaluations), device_cost_figure(evaluations),
            device_load_figure(task, plans, height=640)]
    hardware = "".join(f"<li>{html.escape(key)}: {html.escape(str(provenance[key]))}</li>"
                       for key in PROFILE_KEYS if key in provenance)
    body = f"""<p>{html.escape(task_summary(task))}</p>
{f'<ul class="profiles">{hardware}</ul>' if hardware else ''}
<h2>Cost per method</h2>
<p>Costs in ms per training step at the cost source's batch size; the source column says whether a
number was measured or predicted, and by what. The plan cost is the straggler's compute plus
forward (waiting included) and backward all-to-all.</p>
<p class="uncertainty">{html.escape(uncertainty_note(evaluations))}</p>
{rows_to_html(rows)}
{figure_html(figs[0])}
<h2>Per-GPU balance</h2>
{figure_html(figs[1])}
<h2>Per-GPU load known without measurement</h2>
{figure_html(figs[2])}
<h2>Provenance</h2>
{provenance_table(provenance)}"""
    return standalone_page(title or f"Plan comparison: {task.name}", body)


def write_report(path: str | os.PathLike, task: Task, plans: Mapping[str, Plan],
                 evaluations: Mapping[str, Evaluation], provenance: Mapping[str, Any] | None = None,
                 title: str = "", environment: Mapping[str, Any] | None = None) -> Path:
    """Write :func:`report_html` atomically to ``path``; returns the path. ``provenance`` is
    completed with the machine and versions (``environment``: :func:`page_provenance`), the
    date, plotly version and the evaluations' sources."""
    prov = page_provenance({"cost sources": _sources(evaluations.values())}, provenance, environment)
    return write_text_atomic(path, report_html(task, plans, evaluations, prov, title))
