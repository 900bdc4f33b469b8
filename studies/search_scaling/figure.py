"""Figure of NeuroShard's search time at scale (``studies/search_scaling/run.py``)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import plotly.graph_objects as go


def scaling_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Search time (s) against the number of tables, log-log: one line per (search, GPUs) of
    the batched search's rows (``tables``, ``gpus``, ``search``, ``batched``, ``search_s``);
    the one-state-at-a-time search (``batched`` false) as dashed lines where it ran. One search
    per point: no error bars (a timing, not a comparison)."""
    fig = go.Figure()
    keys = sorted({(r["search"], r["gpus"], r["batched"]) for r in rows if "search_s" in r},
                  key=lambda k: (k[0], not k[2], k[1]))
    for search, gpus, batched in keys:
        pts = sorted((r["tables"], r["search_s"]) for r in rows if "search_s" in r
                     and (r["search"], r["gpus"], r["batched"]) == (search, gpus, batched))
        if not pts:
            continue
        fig.add_trace(go.Scatter(
            x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
            name=f"{search}, {gpus} GPUs" + ("" if batched else " (one state at a time)"),
            line={"dash": "solid" if batched else "dash"},
            hovertemplate="%{x} tables: %{y:.3f} s<extra>" + f"{search}, {gpus} GPUs</extra>"))
    fig.update_xaxes(type="log", title="tables")
    fig.update_yaxes(type="log", title="search time (s)")
    fig.update_layout(title="NeuroShard search time (one process per point; this machine)", template="plotly_white",
                      height=560, legend={"font": {"size": 10}})
    return fig
