"""Honest accuracy of compute cost models on held-out measured samples, split two ways:

- ``seen_tables``: the test split (by key) of the campaign on the pool's *train* tables:
  unseen shards, but their tables (at some dim) were in the training data;
- ``unseen_tables``: samples of the campaign on the pool's *test* tables, none of which any
  model was trained on.

Baselines beside the models: the analytic model and the *sum of single-table costs* (each
table measured alone on the same machine, summed: exact if fused costs were additive).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from shardlab.costmodel.metrics import errors, split_samples
from shardlab.profile.records import ComputeRecord, as_compute_records
from shardlab.profile.campaign import singles_of

#: Bins of tables per shard for the error breakdown.
TABLE_BINS = ((1, 1), (2, 4), (5, 8), (9, 12), (13, 15))


def held_out_sets(compute_samples: Sequence[ComputeRecord | Mapping[str, Any]]) -> dict[str, list[ComputeRecord]]:
    """{"train", "val", "seen_tables", "unseen_tables"}: the pool-train campaign's splits by key,
    and every sample of the pool-test campaign (keys ``compute:<profile>:<pool>:<split>:...``)."""
    records = as_compute_records(compute_samples, "held-out sets")
    on_train = [r for r in records if r.key.split(":")[3] == "train"]
    on_test = [r for r in records if r.key.split(":")[3] == "test"]
    parts = split_samples(on_train)
    return {"train": parts["train"], "val": parts["val"], "seen_tables": parts["test"], "unseen_tables": on_test}


def singles_index(singles: Sequence[ComputeRecord | Mapping[str, Any]]) -> dict[str, ComputeRecord]:
    """Single-table samples (kind ``single``) by key."""
    return {r.key: r for r in as_compute_records(singles, "single-table samples")}


def sum_of_singles(samples: Sequence[ComputeRecord], singles: Mapping[str, ComputeRecord]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(summed single-table total ms, mask of samples whose tables were all measured alone), (n,)
    each; the single-table samples of a sample by :func:`~shardlab.profile.campaign.singles_of`."""
    out, ok = np.full(len(samples), np.nan), np.zeros(len(samples), dtype=bool)
    for i, s in enumerate(samples):
        alone = singles_of(s.to_dict(), singles)
        if alone is not None:
            out[i] = sum(x.total_ms for x in alone)
            ok[i] = True
    return out, ok


def predictions(models: Mapping[str, Any], samples: Sequence[ComputeRecord | Mapping[str, Any]],
                singles: Mapping[str, ComputeRecord] | None = None) -> dict[str, np.ndarray]:
    """Predicted fused fwd+bwd ms of every sample, (n,) per model name (plus ``sum_of_singles``,
    nan where a table was not measured alone)."""
    records = as_compute_records(samples, "predictions")
    shards = [r.tables for r in records]
    out = {name: np.asarray(m.predict(shards)).sum(axis=1) for name, m in models.items()}
    if singles is not None:
        out["sum_of_singles"] = sum_of_singles(records, singles)[0]
    return out


def assess(models: Mapping[str, Any], sets: Mapping[str, Sequence[ComputeRecord | Mapping[str, Any]]],
           singles: Mapping[str, ComputeRecord] | None = None) -> dict[str, Any]:
    """Metrics (:func:`~shardlab.costmodel.metrics.errors`) of every model and baseline on each
    held-out set, on the samples all of them can predict, and broken down by tables per shard."""
    out: dict[str, Any] = {}
    for set_name in ("seen_tables", "unseen_tables"):
        samples = as_compute_records(sets.get(set_name, []), f"held-out set '{set_name}'")
        if not samples:
            continue
        true = np.array([s.fw_ms + s.bw_ms for s in samples])
        preds = predictions(models, samples, singles)
        common = np.all([np.isfinite(p) for p in preds.values()], axis=0)
        n_tables = np.array([len(s.tables) for s in samples])
        entry: dict[str, Any] = {"samples": len(samples), "compared": int(common.sum()), "models": {}}
        for name, p in preds.items():
            m = common & np.isfinite(p)
            if m.sum() < 2:
                continue
            by_n = {}
            for lo, hi in TABLE_BINS:
                b = m & (n_tables >= lo) & (n_tables <= hi)
                if b.sum() >= 2:
                    by_n[f"{lo}-{hi}"] = errors(p[b], true[b])
            entry["models"][name] = {**errors(p[m], true[m]), "by_tables": by_n}
        out[set_name] = entry
    return out


def markdown_table(result: Mapping[str, Any]) -> list[str]:
    """Markdown lines: one table per held-out set, a row per model."""
    lines = []
    for set_name, entry in result.items():
        lines += [f"### {set_name.replace('_', ' ')}: {entry['compared']} of {entry['samples']} samples compared", "",
                  "| model | MAPE | median APE | p90 APE | MSE (ms²) | Spearman | Kendall |",
                  "|---|---|---|---|---|---|---|"]
        for name, e in entry["models"].items():
            lines.append(f"| {name} | {e['mape']:.3f} | {e['median_ape']:.3f} | {e['p90_ape']:.3f} | "
                         f"{e['mse']:.1f} | {e['spearman']:.3f} | {e['kendall']:.3f} |")
        lines.append("")
    return lines
