"""Figure of RL training: the probe learning curve of a policy."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go


def probe_curve_figure(curves: Mapping[str, Sequence[Mapping[str, Any]]], title: str = "") -> go.Figure:
    """One line per policy: the probe ratio (policy / lookup-greedy predicted cost, geometric mean
    over the probe tasks) against the update, with error bars of +- one geometric standard
    deviation over the tasks. ``curves``: policy name -> probes (``update``, ``probe_ratio``,
    ``probe_ratios``)."""
    fig = go.Figure()
    for name, probes in curves.items():
        if not probes:
            continue
        x = [p["update"] + 1 for p in probes]
        y = np.array([p["probe_ratio"] for p in probes])
        gsd = np.array([np.exp(np.std(np.log(p["probe_ratios"]))) for p in probes])
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=name,
                                 error_y={"type": "data", "symmetric": False, "array": y * gsd - y,
                                          "arrayminus": y - y / gsd}))
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="lookup_greedy")
    fig.update_layout(title=title or "Probe: policy / lookup-greedy cost (judged by a fixed model: a simulation)",
                      xaxis_title="update", yaxis_title="cost ratio (geometric mean over probe tasks)",
                      height=420, template="plotly_white")
    return fig
