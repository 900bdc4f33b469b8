"""How accurate cost models are: held-out splits, error metrics, and the assessment of compute
models on held-out measured samples.

Splits are by sample key (a stable hash), so the same sample lands in the same split on every
machine and run, and adding samples never moves old ones between splits.

:func:`assess` splits held-out compute samples two ways:

- ``seen_tables``: the test split (by key) of the campaign on the pool's *train* tables:
  unseen shards, but their tables (at some dim) were in the training data;
- ``unseen_tables``: samples of the campaign on the pool's *test* tables, none of which any
  model was trained on.

Baselines beside the models: the analytic model and the *sum of single-table costs* (each
table measured alone on the same machine, summed: exact if fused costs were additive).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence, TypeVar

import numpy as np

from shardlab.measure.records import ComputeRecord, as_compute_records, sample_key, singles_of

S = TypeVar("S")


def split_of(key: str, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> str:
    """``"train"``, ``"val"`` or ``"test"`` for a sample key (stable; default 80/10/10)."""
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    if h < fractions[0]:
        return "train"
    return "val" if h < fractions[0] + fractions[1] else "test"


def split_samples(samples: Sequence[S]) -> dict[str, list[S]]:
    """Samples (records or JSON rows) grouped by :func:`split_of` their key, in their order."""
    out: dict[str, list[S]] = {"train": [], "val": [], "test": []}
    for s in samples:
        out[split_of(sample_key(s))].append(s)  # type: ignore[arg-type]
    return out


def errors(pred: Sequence[float], true: Sequence[float]) -> dict[str, float]:
    """Error summary of predictions vs measurements (ms): ``mape`` (mean |rel. error|, a
    fraction), ``median_ape``, ``p90_ape``, ``mse`` (ms^2), ``rmse_ms``, and the rank
    correlations ``spearman`` and ``kendall``."""
    p = np.asarray(pred, dtype=float).ravel()
    t = np.asarray(true, dtype=float).ravel()
    if p.shape != t.shape or p.size == 0:
        raise ValueError(f"errors: pred and true need the same non-zero length, got {p.size} and {t.size}")
    ape = np.abs(p - t) / np.maximum(np.abs(t), 1e-9)
    return {"n": int(t.size), "mape": float(ape.mean()), "median_ape": float(np.median(ape)),
            "p90_ape": float(np.quantile(ape, 0.9)), "mse": float(np.mean((p - t) ** 2)),
            "rmse_ms": float(np.sqrt(np.mean((p - t) ** 2))), "spearman": spearman(p, t), "kendall": kendall(p, t)}


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two 1-D arrays (ties broken by order; nan if constant)."""
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-a of two 1-D arrays (pairs tied in either count as neither); O(n^2) memory
    in blocks, fine for the few thousand held-out samples here."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    n = len(a)
    if n < 2:
        return float("nan")
    total = 0.0
    for i in range(0, n, 512):
        da = np.sign(a[i:i + 512, None] - a[None, :])
        db = np.sign(b[i:i + 512, None] - b[None, :])
        total += float((da * db).sum())
    return total / (n * (n - 1))


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
    each; the single-table samples of a sample by :func:`~shardlab.measure.records.singles_of`."""
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
    """Metrics (:func:`errors`) of every model and baseline on each
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
