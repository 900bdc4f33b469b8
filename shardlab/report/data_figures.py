"""Plotly figures of the shipped table pools against the published DLRM locality statistics
(numbers from :mod:`shardlab.data.stats`; nothing here computes statistics of its own).

:func:`published_comparison_figure` puts the pool's aggregate reuse histograms beside the
published ones; :func:`per_table_figure` shows how varied single tables are and how few carry
the lookups; :func:`feature_distributions_figure` the table features by train/test half;
:func:`table_reuse_figure` one table; :func:`table_explorer` a table picker (ipywidgets
``Dropdown`` + ``FigureWidget`` updated by ``observe``, never ``interactive_output``; a static
figure when ``interactive`` is False); :func:`criteo_figure` the pool's sizes beside Criteo's.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from shardlab.data.tasks import TablePool
from shardlab.data.stats import (BIN_LABELS, bin_differences, compare_histograms,
                                 lookup_concentration, per_table_histograms)

POOL_COLOUR, PUB_COLOUR, OTHER_COLOUR = "#4C78A8", "#F58518", "#BAB0AC"
SPLIT_COLOURS = {"train": "#4C78A8", "test": "#E45756"}


def _short_source(ref: Mapping[str, Any]) -> str:
    files = ref["files"]
    shown = files[0] if len(files) == 1 else f"mean of {len(files)} files {files[0]} .."
    return f"published {ref['year']}: {shown}"


def published_comparison_figure(agg: Mapping[str, Any], ref: Mapping[str, Any], label: str,
                                height: int = 640) -> go.Figure:
    """2 x 2 panels over the 17 reuse bins (x: accesses per row in one batch). Top: fraction of
    lookups (left) and of distinct rows (right) per bin, pool aggregate ``agg`` (bars, from
    :func:`shardlab.data.stats.pool_aggregate`) beside the published reference ``ref`` (bars,
    :func:`shardlab.data.stats.published_reference`), each other published file of that year as
    a grey line. Bottom: pool - published per bin, in percentage points. ``label`` names the
    pool selection in the legend and title."""
    cmp = compare_histograms(agg, ref)
    diff = bin_differences(agg, ref)
    fig = make_subplots(rows=2, cols=2, shared_xaxes=True, vertical_spacing=0.1,
                        row_heights=(0.65, 0.35), subplot_titles=(
                            f"share of lookups per bin (L1 {cmp['l1_access']:.3f})",
                            f"share of distinct rows per bin (L1 {cmp['l1_unique']:.3f})",
                            "pool - published, lookups (percentage points)",
                            "pool - published, distinct rows (percentage points)"))
    x = list(BIN_LABELS)
    others = f"other published files of {ref['year']} ({len(ref['others'])})"
    for col, kind in ((1, "access"), (2, "unique")):
        for k, other in enumerate(ref["others"]):
            fig.add_trace(go.Scatter(x=x, y=other[f"{kind}_hist"], mode="lines", opacity=0.6,
                                     line=dict(color=OTHER_COLOUR, width=1), name=others,
                                     legendgroup="others", showlegend=col == 1 and k == 0,
                                     hovertemplate=f"{other['file']}<br>%{{x}}: %{{y:.3f}}<extra></extra>"),
                          row=1, col=col)
        for name, hist, colour in ((label, agg[f"{kind}_hist"], POOL_COLOUR),
                                   (_short_source(ref), ref[f"{kind}_hist"], PUB_COLOUR)):
            fig.add_trace(go.Bar(x=x, y=list(hist), name=name, legendgroup=name, marker_color=colour,
                                 showlegend=col == 1,
                                 hovertemplate=f"{name}<br>%{{x}} accesses: %{{y:.4f}}<extra></extra>"),
                          row=1, col=col)
        d = 100 * diff[kind]
        fig.add_trace(go.Bar(x=x, y=d.tolist(), showlegend=False,
                             marker_color=[POOL_COLOUR if v >= 0 else "#E45756" for v in d],
                             hovertemplate="%{x} accesses: %{y:+.2f} pp<extra></extra>"), row=2, col=col)
    fig.update_xaxes(title_text="accesses per row in one batch", row=2)
    fig.update_yaxes(title_text="fraction", row=1, col=1)
    fig.update_layout(barmode="group", height=height, legend=dict(orientation="h", y=-0.18),
                      title=f"Reuse histograms: {label} against the published statistics<br><sup>"
                            f"pooling {agg['avg_pooling']:.2f} (published {ref['avg_pooling']:.2f}), "
                            f"distinct/lookups {agg['unique_fraction']:.4f} (published "
                            f"{ref['unique_fraction']:.4f}); counts from the pool's stored "
                            f"one-batch stats</sup>")
    return fig


def per_table_figure(l1: Sequence[float], features: Mapping[str, Any], height: int = 420
                     ) -> go.Figure:
    """Left: histogram of each table's accesses-histogram L1 to the published aggregate
    (``l1``, shape [n], from :func:`shardlab.data.stats.per_table_l1`), one colour per split.
    Right: share of all lookups held by the k heaviest tables against k / n (``features`` from
    :func:`shardlab.data.stats.table_features`: ``n_lookups`` and ``split``)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "per-table L1 of the lookup histogram to the published aggregate",
        "share of lookups held by the heaviest tables"))
    l1 = np.asarray(l1, dtype=np.float64)
    split = np.asarray(features["split"])
    for name, colour in SPLIT_COLOURS.items():
        sel = (split == name) & ~np.isnan(l1)
        if sel.any():
            fig.add_trace(go.Histogram(x=l1[sel], name=name, marker_color=colour, opacity=0.6,
                                       xbins=dict(start=0, end=2, size=0.05), legendgroup=name),
                          row=1, col=1)
    share = lookup_concentration(features["n_lookups"])
    k = np.arange(1, len(share) + 1)
    fig.add_trace(go.Scatter(x=k / len(share), y=share, mode="lines", name="cumulative share",
                             line=dict(color="black"), customdata=k,
                             hovertemplate="top %{customdata} tables: %{y:.1%} of lookups<extra></extra>"),
                  row=1, col=2)
    fig.update_xaxes(title_text="L1 (0 = same histogram, 2 = disjoint)", range=[0, 2], row=1, col=1)
    fig.update_xaxes(title_text="fraction of tables (heaviest first)", row=1, col=2)
    fig.update_yaxes(title_text="tables", row=1, col=1)
    fig.update_yaxes(title_text="fraction of lookups", range=[0, 1.02], row=1, col=2)
    fig.update_layout(barmode="overlay", height=height,
                      title="Single tables are far from the aggregate; a minority carry the lookups")
    return fig


#: (feature key, axis title, log10 axis) of the feature panels.
FEATURE_PANELS = (("rows", "log10 rows", True), ("dim", "dim (stored; tasks redraw dims)", False),
                  ("pooling_factor", "log10 pooling factor (lookups / sample)", True),
                  ("size_gb", "log10 size (GB, fp32)", True),
                  ("reuse", "log10 lookups per distinct row (hotness)", True),
                  ("touched_frac", "distinct rows touched / rows", False))


def feature_distributions_figure(features: Mapping[str, Any], title: str, height: int = 620
                                 ) -> go.Figure:
    """2 x 3 histograms of the table features (``features`` from
    :func:`shardlab.data.stats.table_features`), train and test halves overlaid: rows, dim,
    pooling factor, size (GB), hotness (lookups per distinct row touched in one batch) and the
    fraction of rows touched; skewed ones on a log10 axis (zeros and NaNs left out)."""
    fig = make_subplots(rows=2, cols=3, vertical_spacing=0.16, horizontal_spacing=0.07,
                        subplot_titles=[p[1] for p in FEATURE_PANELS])
    split = np.asarray(features["split"])
    for i, (key, _, log) in enumerate(FEATURE_PANELS):
        r, c = divmod(i, 3)
        x = np.asarray(features[key], dtype=np.float64)
        for name, colour in SPLIT_COLOURS.items():
            v = x[(split == name) & np.isfinite(x) & ((x > 0) if log else True)]
            if not v.size:
                continue
            fig.add_trace(go.Histogram(x=np.log10(v) if log else v, name=name, legendgroup=name,
                                       showlegend=i == 0, marker_color=colour, opacity=0.6,
                                       nbinsx=40), row=r + 1, col=c + 1)
    fig.update_yaxes(title_text="tables", col=1)
    fig.update_layout(barmode="overlay", height=height, legend_title_text="split",
                      title=f"Table features, {title}")
    return fig


def table_reuse_figure(pool: TablePool, index: int, ref: Mapping[str, Any], height: int = 380
                       ) -> go.Figure:
    """One table (``pool.tables[index]``): its lookup and distinct-row histograms over the 17
    reuse bins (bars, from its stored counts) with the published aggregate as a line."""
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True,
                        subplot_titles=("share of lookups", "share of distinct rows"))
    _fill_table_figure(fig, pool, index, ref, first=True)
    fig.update_xaxes(title_text="accesses per row in one batch")
    fig.update_yaxes(title_text="fraction", col=1)
    fig.update_layout(height=height)
    return fig


def _fill_table_figure(fig: go.Figure, pool: TablePool, index: int, ref: Mapping[str, Any],
                       first: bool) -> None:
    """Add (``first``) or overwrite the four traces of :func:`table_reuse_figure`, and its title."""
    t, s = pool.tables[index], pool.stats[index]
    h = per_table_histograms(pool, [index])
    x = list(BIN_LABELS)
    traces = []
    for col, kind in ((1, "access"), (2, "unique")):
        traces.append((col, go.Bar(x=x, y=h[kind][0].tolist(), name=t.name, marker_color=POOL_COLOUR,
                                   showlegend=col == 1, legendgroup="table")))
        traces.append((col, go.Scatter(x=x, y=list(ref[f"{kind}_hist"]), mode="lines+markers",
                                       name="published aggregate", line=dict(color=PUB_COLOUR),
                                       showlegend=col == 1, legendgroup="pub")))
    if first:
        for col, tr in traces:
            fig.add_trace(tr, row=1, col=col)
    else:
        for k, (_, tr) in enumerate(traces):
            fig.data[k].y, fig.data[k].name = tr.y, tr.name
    reuse = s["n_lookups"] / s["n_unique"] if s["n_unique"] else float("nan")
    fig.layout.title = (f"table {t.name}: {t.rows:,} rows, dim {t.dim}, pooling "
                        f"{t.pooling_factor:.3g}<br><sup>{s['n_lookups']:,} lookups on "
                        f"{s['n_unique']:,} distinct rows in one batch of {s['batch_size']:,} "
                        f"(hotness {reuse:.3g})</sup>")


def table_explorer(pool: TablePool, indices: Sequence[int], ref: Mapping[str, Any],
                   interactive: bool = False) -> Any:
    """A table picker over ``indices`` (sorted by lookups, heaviest first): an ipywidgets
    ``VBox`` of a ``Dropdown`` and a ``FigureWidget`` of :func:`table_reuse_figure` when
    ``interactive``; otherwise the static figure of the heaviest table (no widgets)."""
    order = sorted(indices, key=lambda i: -pool.stats[i]["n_lookups"])
    if not order:
        raise ValueError("table_explorer: no tables selected")
    if not interactive:
        return table_reuse_figure(pool, order[0], ref)
    import ipywidgets as w

    fig = go.FigureWidget(table_reuse_figure(pool, order[0], ref))
    options = [(f"{pool.tables[i].name} ({pool.stats[i]['n_lookups']:,} lookups)", i) for i in order]
    pick = w.Dropdown(options=options, value=order[0], description="table")

    def redraw(*_: Any) -> None:
        with fig.batch_update():
            _fill_table_figure(fig, pool, pick.value, ref, first=False)

    pick.observe(redraw, names="value")
    box = w.VBox([pick, fig])
    box.figure, box.controls = fig, {"table": pick}
    return box


def criteo_figure(features: Mapping[str, Any], criteo: Mapping[str, Mapping[str, Any]],
                  label: str, height: int = 420) -> go.Figure:
    """Empirical CDFs of rows (left) and of table size (GB, fp32 weights at each table's own
    dim; right) for the pool selection (``features`` from
    :func:`shardlab.data.stats.table_features`) and each Criteo dataset (``criteo``: name ->
    :func:`shardlab.data.stats.criteo_tables`), both on log axes."""
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True,
                        subplot_titles=("rows per table", "size per table (GB, fp32)"))
    sets = {label: features, **criteo}
    colours = (POOL_COLOUR, "#54A24B", "#B279A2", "#9D755D")
    for k, (name, d) in enumerate(sets.items()):
        for col, key in ((1, "rows"), (2, "size_gb")):
            x = np.sort(np.asarray(d[key], dtype=np.float64))
            y = np.arange(1, len(x) + 1) / len(x)
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line_shape="hv", name=name,
                                     legendgroup=name, showlegend=col == 1,
                                     line=dict(color=colours[k % len(colours)])), row=1, col=col)
    fig.update_xaxes(type="log")
    fig.update_xaxes(title_text="rows", row=1, col=1)
    fig.update_xaxes(title_text="GB", row=1, col=2)
    fig.update_yaxes(title_text="fraction of tables", row=1, col=1)
    fig.update_layout(height=height, title="Table sizes: the synthetic pool beside the real Criteo tables")
    return fig
