"""Figures and the standalone HTML page of a search benchmark (rows of
:func:`shardlab.workflows.benchmark.run_benchmark`): cost / the best plan any method found on
the task, per method (box with every task as a point, one panel per setting), search time per method (s, log axis), and win rates
against each baseline (heatmap per setting). Every figure names where its costs come from
(``simulated by model:...``, no uncertainty, or ``measured:<profile>`` in paired rounds) and,
for measured costs, draws each task's 95% interval and counts only significant wins. The page
embeds plotly.js once and fetches nothing, so it works offline."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from shardlab.constants import BASELINE_METHODS
from shardlab.io import write_json_atomic, write_text_atomic
from shardlab.report.benchmark import (best_found, done, settings_of, significant, skipped, summarise, summary_rows,
                                       to_best)
from shardlab.report.benchmark_text import section_title, wins_note
from shardlab.report.figures import rows_to_html
from shardlab.report.html import figure_html, page_provenance, provenance_table, standalone_page

PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D", "#BAB0AC",
           "#EECA3B", "#17BECF")


def rounds_of(rows: Sequence[dict[str, Any]]) -> int | None:
    """The most paired rounds any measured row was measured in (None without rounds)."""
    counts = [len(r["measured_rounds_ms"]) for r in rows if r.get("measured_rounds_ms")]
    return max(counts) if counts else None


def cost_label(rows: Sequence[dict[str, Any]], key: str = "simulated_ms") -> str:
    """Where the costs under ``key`` come from and how sure they are: ``"simulated by <model
    source> (no uncertainty)"`` or ``"measured on this machine: <source>, median of R paired
    rounds with 95% CIs"`` (every distinct source, joined by ' / ')."""
    field = "source" if key == "measured_ms" else "sim_source"
    sources = " / ".join(sorted({str(r[field]) for r in done(rows, key) if r.get(field)}) or ["?"])
    if key != "measured_ms":
        return f"simulated by {sources} (no uncertainty)"
    rounds = rounds_of(done(rows, key))
    return f"measured on this machine: {sources}" + (f", median of {rounds} paired rounds with 95% CIs" if rounds
                                                      else ", one measurement per plan (no interval)")


def _settings(rows: Sequence[dict[str, Any]], settings: Sequence[str] | str | None) -> list[str]:
    if settings is None:
        return settings_of(rows)
    return [settings] if isinstance(settings, str) else list(settings)


def _colour(methods: Sequence[str], m: str) -> str:
    return PALETTE[list(methods).index(m) % len(PALETTE)]


def ratio_figure(rows: Sequence[dict[str, Any]], methods: Sequence[str], key: str = "simulated_ms",
                 settings: Sequence[str] | str | None = None, height: int = 520) -> go.Figure:
    """Cost / the best cost any method found on the task (dimensionless; 1 = the best, dotted
    line; :func:`~shardlab.report.benchmark.to_best`) per method: a box with every task as a
    point, one panel per setting (default: every setting in ``rows``). Hover gives the task, the
    cost and the best (ms). A ratio to the best found, not to a lower bound: a learned judge has
    no valid bound (docs/measurement.md, "The lower bound")."""
    names = _settings(rows, settings)
    ok = done(rows, key)
    best = best_found(ok, key)
    bars = significant(key)
    fig = make_subplots(rows=1, cols=max(len(names), 1), shared_yaxes=True, subplot_titles=names,
                        horizontal_spacing=0.03)
    for col, setting in enumerate(names, start=1):
        for m in methods:
            mine = [r for r in ok if r["setting"] == setting and r["method"] == m]
            fig.add_trace(go.Box(x=[m] * len(mine), y=[to_best(r, best, key) for r in mine], name=m, legendgroup=m,
                                 showlegend=col == 1, marker_color=_colour(methods, m),
                                 boxpoints=False if bars else "all", jitter=0.4, pointpos=0,
                                 customdata=[[r["task"], r[key], best[(r["setting"], r["task"])]] for r in mine],
                                 hovertemplate=f"{setting} {m}, task %{{customdata[0]}}<br>cost "
                                               "%{customdata[1]:.2f} ms, best found %{customdata[2]:.2f} ms<br>"
                                               "ratio %{y:.3f}<extra></extra>"),
                          row=1, col=col)
            if bars:
                fig.add_trace(_ratio_points(mine, best, m, setting, _colour(methods, m)), row=1, col=col)
        fig.add_hline(y=1.0, line_dash="dot", line_color="gray", row=1, col=col)
    points = ("one point per task, error bars: its cost's 95% CI / the best median" if bars
              else "one point per task")
    fig.update_layout(height=height, margin=dict(t=120), showlegend=False,
                      title="Plan cost / the best plan any method found on the task (1 = the best)<br>"
                            f"<sup>{html.escape(cost_label(rows, key))}; {points}</sup>")
    fig.update_xaxes(tickangle=-45, categoryorder="array", categoryarray=list(methods))
    fig.update_yaxes(title_text="cost / best found", row=1, col=1)
    return fig


def _ratio_points(mine: Sequence[dict[str, Any]], best: Mapping[tuple[str, int], float], method: str, setting: str,
                  colour: str) -> go.Scatter:
    """Measured cost / the task's best median of each task as a point with the cost's 95%
    interval over that best as asymmetric error bars (zero where a row has no interval)."""
    y = [to_best(r, best, "measured_ms") for r in mine]
    ci = [r.get("measured_ci95_ms") for r in mine]
    b = [best[(r["setting"], r["task"])] for r in mine]
    up = [c[1] / bb - v if c else 0.0 for c, bb, v in zip(ci, b, y)]
    down = [v - c[0] / bb if c else 0.0 for c, bb, v in zip(ci, b, y)]
    return go.Scatter(x=[method] * len(mine), y=y, mode="markers", name=method, legendgroup=method, showlegend=False,
                      marker=dict(color=colour, size=7, line=dict(width=1, color="white")),
                      error_y=dict(type="data", symmetric=False, array=up, arrayminus=down, color=colour),
                      customdata=[[r["task"], r["measured_ms"], bb, f"[{c[0]:.2f}, {c[1]:.2f}]" if c else "none"]
                                  for r, bb, c in zip(mine, b, ci)],
                      hovertemplate=f"{setting} {method}, task %{{customdata[0]}}<br>cost %{{customdata[1]:.2f}} ms "
                                    "95% CI %{customdata[3]}, best found %{customdata[2]:.2f} ms<br>ratio %{y:.3f}"
                                    "<extra></extra>")


def search_time_figure(rows: Sequence[dict[str, Any]], methods: Sequence[str],
                       settings: Sequence[str] | str | None = None, height: int = 420) -> go.Figure:
    """Search time (s, log axis) per method, one point per task, coloured by setting: the
    wall-clock time of ``shard`` on this machine, including loading a model or policy."""
    names = _settings(rows, settings)
    fig = go.Figure()
    for k, setting in enumerate(names):
        mine = [r for r in done(rows) if r["setting"] == setting and r["method"] in methods]
        mine.sort(key=lambda r: list(methods).index(r["method"]))
        fig.add_trace(go.Box(x=[r["method"] for r in mine], y=[max(r["search_s"], 1e-6) for r in mine], name=setting,
                             marker_color=PALETTE[k % len(PALETTE)], boxpoints="all", jitter=0.4, pointpos=0,
                             customdata=[r["task"] for r in mine],
                             hovertemplate=f"{setting} %{{x}}, task %{{customdata}}<br>%{{y:.4g}} s<extra></extra>"))
    fig.update_layout(boxmode="group", height=height, legend_title_text="setting",
                      title="Search time per method (s, log axis)<br><sup>wall clock on this machine, one point per "
                            "task</sup>", margin=dict(t=100))
    fig.update_xaxes(categoryorder="array", categoryarray=list(methods))
    fig.update_yaxes(type="log", title_text="search time (s)")
    return fig


def win_matrix(summary: Mapping[tuple[str, str], Mapping[str, Any]], setting: str, methods: Sequence[str],
               baselines: Sequence[str] = BASELINE_METHODS) -> list[list[float | None]]:
    """Win rates of :func:`~shardlab.report.benchmark.summarise` for one setting as a
    ``len(methods) x len(baselines)`` list of lists: fraction in [0, 1] of tasks on which the row
    method wins against the column baseline (strictly cheaper when simulated; significantly
    faster, paired verdict, when measured); None for a method against itself and where there is
    nothing to compare."""
    out = []
    for m in methods:
        wins = summary.get((setting, m), {}).get("wins", {})
        out.append([None if b == m else wins.get(b) for b in baselines])
    return out


def win_rate_figure(rows: Sequence[dict[str, Any]], methods: Sequence[str], key: str = "simulated_ms",
                    baselines: Sequence[str] = BASELINE_METHODS, settings: Sequence[str] | str | None = None,
                    height: int | None = None) -> go.Figure:
    """Heatmap per setting: rows are methods, columns baselines, cells the fraction of tasks
    (0..1) on which the method wins (costs under ``key``: strictly cheaper when simulated, a
    paired verdict ``faster`` when measured); blank where a method meets itself, either was
    skipped or (measured) no verdict exists."""
    names = _settings(rows, settings)
    ran = {r["method"] for r in done(rows, key)}
    baselines = [b for b in baselines if b in ran]
    summary = summarise(rows, methods, key, baselines)
    verb = "is significantly faster than" if significant(key) else "beats"
    fig = make_subplots(rows=1, cols=max(len(names), 1), shared_yaxes=True, subplot_titles=names,
                        horizontal_spacing=0.04)
    for col, setting in enumerate(names, start=1):
        z = win_matrix(summary, setting, methods, baselines)
        fig.add_trace(go.Heatmap(z=z, x=list(baselines), y=list(methods), zmin=0, zmax=1, colorscale="RdBu",
                                 showscale=col == 1, colorbar=dict(title="win rate"),
                                 text=[["" if v is None else f"{v:.2f}" for v in line] for line in z],
                                 texttemplate="%{text}", hoverongaps=False,
                                 hovertemplate=f"{setting}: %{{y}} {verb} %{{x}} on %{{z:.2f}} of tasks<extra></extra>"),
                      row=1, col=col)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=height or 160 + 28 * len(methods), margin=dict(t=120), plot_bgcolor="white",
                      title=f"{_win_title(key)}<br><sup>"
                            f"{html.escape(cost_label(rows, key))}; blank: a method against itself</sup>")
    return fig


def _win_title(key: str) -> str:
    if significant(key):
        return "Significant wins against each baseline (fraction of tasks with paired verdict 'faster')"
    return "Win rate against each baseline (fraction of tasks strictly cheaper; simulated, no uncertainty)"


def benchmark_figures(rows: Sequence[dict[str, Any]], methods: Sequence[str], key: str = "simulated_ms",
                      baselines: Sequence[str] = BASELINE_METHODS, settings: Sequence[str] | str | None = None
                      ) -> dict[str, go.Figure]:
    """The three figures for one cost key: ``ratio``, ``search_time``, ``win_rate``."""
    return {"ratio": ratio_figure(rows, methods, key, settings),
            "search_time": search_time_figure(rows, methods, settings),
            "win_rate": win_rate_figure(rows, methods, key, baselines, settings)}


def benchmark_html(rows: Sequence[dict[str, Any]], methods: Sequence[str], keys: Sequence[str] = ("simulated_ms",),
                   baselines: Sequence[str] = BASELINE_METHODS, provenance: Mapping[str, Any] | None = None,
                   title: str = "Search benchmark") -> str:
    """The page as one HTML string: per cost key the summary table and the ratio and win-rate
    figures, then search time, skipped methods and provenance; plotly.js inlined once."""
    body = []
    for key in keys:
        figs = benchmark_figures(rows, methods, key, baselines)
        note = re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(wins_note(key, rounds_of(rows))))
        heading = section_title(key, rounds_of(rows))
        body += [f"<h2>{html.escape(heading[0].upper() + heading[1:])}</h2>",
                 f"<p>{html.escape(cost_label(rows, key))}. Costs in ms per training step; the figure's ratio is the plan "
                 f"cost over the best any method found on the task.</p>", f'<p class="wins">{note}</p>',
                 f'<div class="wide">{rows_to_html(summary_rows(rows, methods, key, baselines))}</div>',
                 figure_html(figs["ratio"]), figure_html(figs["win_rate"])]
    body += ["<h2>Search time</h2>", figure_html(search_time_figure(rows, methods))]
    skips = skipped(rows)
    if skips:
        body += ["<h2>Skipped</h2>", "<p>Methods that raised an error on a task (not counted above).</p>",
                 rows_to_html([{k: r[k] for k in ("setting", "task", "method", "skipped")} for r in skips])]
    body += ["<h2>Provenance</h2>", provenance_table(provenance or {})]
    head = (f"<p>{len({(r['setting'], r['task']) for r in rows})} held-out tasks over {len(settings_of(rows))} settings\n"
            f"({', '.join(html.escape(s) for s in settings_of(rows))}), {len(methods)} methods.</p>\n")
    return standalone_page(title, head + "".join(body), "\ntd{white-space:nowrap}.wide{overflow-x:auto}")


def write_benchmark(out_dir: str | os.PathLike, rows: Sequence[dict[str, Any]], methods: Sequence[str],
                    keys: Sequence[str] = ("simulated_ms",), baselines: Sequence[str] = BASELINE_METHODS,
                    provenance: Mapping[str, Any] | None = None,
                    environment: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Write ``<out_dir>/benchmark.html`` (:func:`benchmark_html`) and ``<out_dir>/benchmark.json``
    (provenance, methods, every row, and the summary rows per cost key), each atomically;
    returns {"html": path, "json": path}. ``provenance`` is completed with the machine and
    versions (``environment``, as the caller recorded it:
    :func:`~shardlab.report.html.page_provenance`), date and the cost sources."""
    prov = page_provenance({f"costs ({k})": cost_label(rows, k) for k in keys}, provenance, environment)
    out = Path(out_dir)
    page = write_text_atomic(out / "benchmark.html", benchmark_html(rows, methods, keys, baselines, prov))
    data = write_json_atomic(out / "benchmark.json", {
        "provenance": prov, "methods": list(methods), "baselines": list(baselines), "rows": list(rows),
        "summary": {k: summary_rows(rows, methods, k, baselines) for k in keys}})
    return {"html": page, "json": data}


def benchmark_widget(rows: Sequence[dict[str, Any]], methods: Sequence[str], key: str = "simulated_ms",
                     baselines: Sequence[str] = BASELINE_METHODS) -> Any:
    """For JupyterLab: a setting dropdown above the three :func:`benchmark_figures` of that
    setting as plotly ``FigureWidget``s, updated in place through ``batch_update`` (never an
    ``Output`` redraw or ``interactive_output``, which can hang papermill, as measured on this stack).
    Returns the ``VBox`` (``.figures``: name -> FigureWidget, ``.controls``: the dropdown)."""
    import ipywidgets as w

    names = settings_of(rows)
    pick = w.Dropdown(options=names, value=names[0], description="setting")
    figs = {k: go.FigureWidget(f) for k, f in benchmark_figures(rows, methods, key, baselines, names[0]).items()}

    def redraw(*_: Any) -> None:
        new = benchmark_figures(rows, methods, key, baselines, pick.value)
        for k, fw in figs.items():     # one setting always has the same traces (empty where no rows)
            with fw.batch_update():
                for trace, fresh in zip(fw.data, new[k].data):
                    trace.update({a: v for a, v in fresh.to_plotly_json().items() if a not in ("type", "uid")})
                fw.layout.update(new[k].layout.to_plotly_json())

    pick.observe(redraw, names="value")
    box = w.VBox([pick, *figs.values()])
    box.figures, box.controls = figs, {"setting": pick}
    return box
