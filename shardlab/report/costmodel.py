"""Figures of cost-model training and accuracy: learning curves, predicted vs measured, and
error by tables per shard. Every title names what the numbers are (model predictions against
measured costs, with the hardware profile)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go


def learning_curve_figure(history: Sequence[Mapping[str, Any]], title: str = "") -> go.Figure:
    """Train and validation loss per epoch (log scale); one pair of lines per device count for
    comm models (their history rows carry ``world_size``)."""
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for h in history:
        groups.setdefault(h.get("world_size"), []).append(h)
    fig = go.Figure()
    for g, rows in groups.items():
        tag = "" if g is None else f" G={g}"
        epochs = [r["epoch"] for r in rows]
        fig.add_trace(go.Scatter(x=epochs, y=[r["train_loss"] for r in rows], name=f"train{tag}", mode="lines"))
        fig.add_trace(go.Scatter(x=epochs, y=[r["val_loss"] for r in rows], name=f"validation{tag}", mode="lines"))
    fig.update_layout(title=title or "Learning curves (MSE on the training target)", xaxis_title="epoch",
                      yaxis_title="loss", yaxis_type="log")
    return fig


def predicted_vs_measured_figure(series: Mapping[str, tuple], title: str,
                                 spreads: Mapping[str, tuple] | None = None) -> go.Figure:
    """Scatter of predicted against measured ms (log axes) with y = x; ``series`` maps a label
    to (predicted ms, measured ms, tables per shard[, per-shard description]), arrays of [n];
    ``spreads`` (optional) maps a label to (p25 ms, p75 ms) of each measurement's timed runs,
    drawn as horizontal error bars."""
    fig = go.Figure()
    lo, hi = np.inf, 0.0
    for label, (pred, true, n, *about) in series.items():
        text = [f"{k} tables" + (f": {a}" if about else "") for k, a in zip(n, about[0] if about else n)]
        bars = None
        if spreads and label in spreads:
            p25, p75 = (np.asarray(x, dtype=float) for x in spreads[label])
            bars = dict(type="data", symmetric=False, array=np.maximum(p75 - np.asarray(true), 0),
                        arrayminus=np.maximum(np.asarray(true) - p25, 0), thickness=1)
        fig.add_trace(go.Scatter(x=true, y=pred, mode="markers", name=label, opacity=0.6, text=text, error_x=bars))
        lo, hi = min(lo, float(np.min(true)), float(np.min(pred))), max(hi, float(np.max(true)), float(np.max(pred)))
    if hi > 0:
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured",
                                 line=dict(dash="dash", color="gray")))
    fig.update_layout(title=title, xaxis_title="measured fwd+bwd (ms)", yaxis_title="predicted fwd+bwd (ms)",
                      xaxis_type="log", yaxis_type="log")
    return fig


def error_by_tables_figure(result: Mapping[str, Any], set_name: str = "unseen_tables") -> go.Figure:
    """MAPE per model, by tables per shard, on one held-out set of
    :func:`~shardlab.costmodel.metrics.assess.assess`'s result."""
    models = result.get(set_name, {}).get("models", {})
    fig = go.Figure()
    for name, e in models.items():
        bins = list(e["by_tables"])
        fig.add_trace(go.Bar(x=bins, y=[e["by_tables"][b]["mape"] for b in bins], name=name))
    fig.update_layout(title=f"Error by tables per shard ({set_name.replace('_', ' ')}; predictions vs measured)",
                      xaxis_title="tables per shard", yaxis_title="MAPE", barmode="group")
    return fig


def heldout_error_table(models: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """Markdown rows (header first) of held-out-family errors: per model and set, plans, shard
    compute MAPE, plan-cost error median and p90, Spearman of plan costs
    (``studies.common.heldout.heldout_errors`` per model)."""
    lines = ["| model | set | plans | shard compute MAPE | plan-cost error median | p90 | Spearman (plans) |",
             "|---|---|---|---|---|---|---|"]
    for n, sets in models.items():
        for name, e in sets.items():
            lines.append(f"| {n} | {name} | {e['plans']} | {e['shard_compute']['mape']:.3f} | "
                         f"{e['plan_cost_error_median']:.3f} | {e['plan_cost_error_p90']:.3f} | "
                         f"{e['plan_cost_spearman']:.3f} |")
    return lines
