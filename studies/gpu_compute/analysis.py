"""What a GPU dataset says: the same fused ops timed on CPU and GPU, cost models trained on
one and judged on the other, and measured verdicts between plans' compute.

Inputs are measured records (``datasets/<name>/*.jsonl.gz``): compute samples keyed
``compute:<profile>:<pool>:<split>:s<seed>:<i>`` (sample i of a seed draws the same tables on
every profile, so CPU sample i and GPU sample i are one op timed twice), and ``plan_compute``
records (:mod:`studies.gpu_compute.plan_compute`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab.costmodel.metrics import spearman
from shardlab.evaluate.stats import VERDICTS, bootstrap_median_ci, paired_ratios, verdict


def _op_id(sample: Mapping[str, Any]) -> tuple[str, ...]:
    """The profile-free part of a compute key: (pool, split, seed, index)."""
    parts = sample["key"].split(":")
    return tuple(parts[2:])


def same_ops(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Fused fw+bw ms of the ops measured in both sets, (n,) each, paired by pool, split, seed and
    sample index; a pair whose tables differ (name, rows or dim) is an error, not a match."""
    by_id = {_op_id(s): s for s in b}
    xa, xb = [], []
    for s in a:
        t = by_id.get(_op_id(s))
        if t is None:
            continue
        key = [(x["name"], x["rows"], x["dim"]) for x in s["tables"]]
        if key != [(x["name"], x["rows"], x["dim"]) for x in t["tables"]]:
            raise ValueError(f"same ops: sample {s['key']} and {t['key']} hold different tables")
        xa.append(s["fw_ms"] + s["bw_ms"])
        xb.append(t["fw_ms"] + t["bw_ms"])
    return np.asarray(xa), np.asarray(xb)


def cross_device(a_ms: np.ndarray, b_ms: np.ndarray) -> dict[str, Any]:
    """How one device's costs of the same ops predict another's: rank correlation, and the
    spread of the per-op ratio b / a (a single scale factor would make it constant)."""
    ratio = b_ms / a_ms
    return {"n": int(a_ms.size), "spearman": spearman(a_ms, b_ms),
            "ratio_quantiles": {q: float(np.quantile(ratio, float(q))) for q in ("0.1", "0.5", "0.9")},
            "ratio_p90_over_p10": float(np.quantile(ratio, 0.9) / np.quantile(ratio, 0.1))}


def plan_verdicts(records: Sequence[Mapping[str, Any]], reference: str = "lookup_greedy",
                  seed: int = 0) -> dict[str, Any]:
    """Each method's compute vs ``reference``'s on the same task, in paired rounds: the median
    per-round ratio, its 95% bootstrap interval and the verdict, per (G, task, method); and per
    (G, method) the count of tasks of each verdict (faster / slower / equivalent / inconclusive,
    equivalence margin :data:`~shardlab.constants.EQUIVALENCE_MARGIN`)."""
    tasks: dict[tuple[int, str], dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for r in records:
        if "rounds_cost_ms" in r:
            tasks[(r["ngpu"], r["task"]["name"])][r["method"]] = r
    per_task: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(VERDICTS, 0))
    for (g, name), by_method in sorted(tasks.items()):
        if reference not in by_method:
            continue
        ref = by_method[reference]["rounds_cost_ms"]
        for m, r in sorted(by_method.items()):
            if m == reference:
                continue
            ratios = paired_ratios(r["rounds_cost_ms"], ref)
            ci = bootstrap_median_ci(ratios, seed=seed)
            v = verdict(ci)
            per_task.append({"ngpu": g, "task": name, "method": m, "median_ms": float(np.median(r["rounds_cost_ms"])),
                             "reference_median_ms": float(np.median(ref)), "ratio": float(np.median(ratios)),
                             "ci95": ci, "verdict": v})
            if v is not None:
                counts[f"G={g} {m}"][v] += 1
    return {"reference": reference, "per_task": per_task, "counts": dict(counts)}
