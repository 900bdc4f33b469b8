"""Figures and summaries of measured compute samples (the store's ``compute`` and ``single``
kinds): measured cost against table features, and fused cost against the sum of single-table
costs -- the non-additivity the seed papers build on. Every figure says its numbers are
measured and under which hardware profile."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from shardlab.evaluate import fused_and_summed

__all__ = ["sample_features", "sample_label", "fused_and_summed", "cost_vs_features_figure", "fused_vs_sum_figure",
           "campaign_summary"]


def sample_features(sample: Mapping[str, Any]) -> dict[str, float]:
    """Per-sample aggregates: tables, dim sum, lookups per batch (batch x sum pooling x dim),
    weights (millions), and the measured total (ms)."""
    tables = sample["tables"]
    batch = sample["profile"]["batch_size"]
    return {"n_tables": len(tables), "dim_sum": sum(t["dim"] for t in tables),
            "lookups_m": batch * sum(t["pooling_factor"] * t["dim"] for t in tables) / 1e6,
            "weights_m": sum(t["rows"] * t["dim"] for t in tables) / 1e6,
            "total_ms": sample["total_ms"]}


def sample_label(sample: Mapping[str, Any], most: int = 8) -> str:
    """The sample's table names (at most ``most``, then a count), with their dims."""
    tables = sample["tables"]
    names = [f"{t.get('name', '?')}@{t['dim']}" for t in tables[:most]]
    return ", ".join(names) + (f" and {len(tables) - most} more" if len(tables) > most else "")


def cost_vs_features_figure(samples: list[Mapping[str, Any]]) -> go.Figure:
    """Measured fused forward+backward time (ms) against dim sum, lookups and weights."""
    feats = [sample_features(s) for s in samples]
    prof = samples[0]["profile"]["name"] if samples else "?"
    fig = make_subplots(rows=1, cols=3, shared_yaxes=True, subplot_titles=(
        "dim sum", "lookups per batch (millions of values)", "weights (millions)"))
    y = [f["total_ms"] for f in feats]
    text = [f"{f['n_tables']} tables: " + sample_label(s) for f, s in zip(feats, samples)]
    for col, key in enumerate(("dim_sum", "lookups_m", "weights_m"), start=1):
        fig.add_trace(go.Scatter(x=[f[key] for f in feats], y=y, mode="markers", text=text,
                                 marker=dict(color=[f["n_tables"] for f in feats], colorscale="Viridis",
                                             showscale=col == 3, colorbar=dict(title="tables")),
                                 showlegend=False), row=1, col=col)
    fig.update_yaxes(title_text="measured fwd+bwd (ms)", row=1, col=1)
    fig.update_layout(title=f"Measured fused TBE cost vs table features (measured:{prof}, {len(feats)} samples)")
    return fig


def fused_vs_sum_figure(samples: list[Mapping[str, Any]], singles: Mapping[str, Mapping[str, Any]]) -> go.Figure:
    """Fused time against the sum of the same tables measured one by one (ms), with y = x."""
    fused, summed, n = fused_and_summed(samples, singles)
    prof = samples[0]["profile"]["name"] if samples else "?"
    hi = float(max(fused.max(initial=0), summed.max(initial=0))) * 1.05 or 1.0
    fig = go.Figure([go.Scatter(x=summed, y=fused, mode="markers", name="samples",
                                marker=dict(color=n, colorscale="Viridis", showscale=True,
                                            colorbar=dict(title="tables")),
                                text=[f"{k} tables, ratio {f / s:.2f}" for f, s, k in zip(fused, summed, n)]),
                     go.Scatter(x=[0, hi], y=[0, hi], mode="lines", name="fused = sum",
                                line=dict(dash="dash", color="gray"))])
    ratio = float(np.median(fused / summed)) if len(fused) else float("nan")
    fig.update_layout(title=f"Fused cost vs sum of single-table costs (measured:{prof}); "
                            f"median fused/sum = {ratio:.2f} over {len(fused)} samples",
                      xaxis_title="sum of single-table fwd+bwd (ms)", yaxis_title="fused fwd+bwd (ms)")
    return fig


def campaign_summary(samples: list[Mapping[str, Any]], singles: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Numbers to quote: samples, median relative spread ((p75 - p25) / median of the total),
    median and range of fused / sum-of-singles over samples of 2+ tables."""
    spread = [(s["total_spread_ms"][1] - s["total_spread_ms"][0]) / s["total_ms"] for s in samples if s["total_ms"] > 0]
    fused, summed, n = fused_and_summed(samples, singles)
    multi = n >= 2
    ratio = fused[multi] / summed[multi] if multi.any() else np.array([np.nan])
    return {"samples": len(samples), "median_relative_spread": float(np.median(spread)) if spread else float("nan"),
            "fused_over_sum_median": float(np.median(ratio)), "fused_over_sum_min": float(np.min(ratio)),
            "fused_over_sum_max": float(np.max(ratio)), "multi_table_samples_compared": int(multi.sum())}
