"""Summaries of a search benchmark's rows (:mod:`shardlab.workflows.benchmark` runs it and
documents the rows): ratio to the best plan any method found on the task, ratio to the lower
bound (only under judges that give one: the analytic models and measurement), win rates against
each baseline, and search time, as numbers and as table rows. Pure functions over rows: nothing here runs a sharder or measures.

Wins: on simulated costs, the fraction of tasks on which a method's predicted cost is strictly
below the baseline's. On measured costs only **significant** wins count: the fraction of tasks
on which the paired per-round ratio method / baseline has a 95% interval wholly below 1 (verdict
``faster``, :mod:`shardlab.evaluate.stats`); ``equivalent``, ``inconclusive`` and ``slower``
are not wins, however low the median, and tasks without a verdict (fewer than 3 rounds) are not
compared.

The figures and the HTML page are in :mod:`shardlab.report.benchmark_figures`, the words in
:mod:`shardlab.report.benchmark_text`.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from shardlab.constants import BASELINE_METHODS

#: Cost keys whose wins count only significant ones (paired verdict ``faster``).
SIGNIFICANT_KEYS = ("measured_ms",)


def bound_key(key: str) -> str:
    """The lower-bound field (ms) that goes with a cost field: ``measured_ms`` ->
    ``measured_bound_ms``, anything else -> ``simulated_bound_ms``."""
    return "measured_bound_ms" if key == "measured_ms" else "simulated_bound_ms"


def done(rows: Iterable[dict[str, Any]], key: str = "simulated_ms") -> list[dict[str, Any]]:
    """The rows that have a cost under ``key`` (skipped rows and unmeasured ones left out)."""
    return [r for r in rows if "skipped" not in r and r.get(key) is not None]


def settings_of(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Setting names in order of first appearance."""
    return list(dict.fromkeys(r["setting"] for r in rows))


def best_found(rows: Iterable[dict[str, Any]], key: str = "simulated_ms") -> dict[tuple[str, int], float]:
    """Per (setting, task): the cheapest cost (ms) under ``key`` that any method's plan reached."""
    out: dict[tuple[str, int], float] = {}
    for r in done(rows, key):
        k = (r["setting"], r["task"])
        out[k] = min(out.get(k, math.inf), float(r[key]))
    return out


def to_best(row: dict[str, Any], best: Mapping[tuple[str, int], float], key: str = "simulated_ms") -> float:
    """A row's cost / the best cost found on its task (:func:`best_found`; dimensionless, >= 1)."""
    b = best[(row["setting"], row["task"])]
    return row[key] / b if b > 0 else float("nan")


def significant(key: str) -> bool:
    """True when wins under cost ``key`` count only significant ones (:data:`SIGNIFICANT_KEYS`)."""
    return key in SIGNIFICANT_KEYS


def wins_label(key: str, baseline: str) -> str:
    """The summary column of wins against ``baseline`` under cost ``key``:
    ``significant wins vs X`` (measured) or ``wins vs X`` (simulated)."""
    return f"{'significant wins' if significant(key) else 'wins'} vs {baseline}"


def beats(mine: Mapping[str, Any], theirs: Mapping[str, Any], key: str, baseline: str) -> bool | None:
    """Whether row ``mine`` wins against row ``theirs`` (``baseline``'s, same task) under cost
    ``key``: strictly cheaper (simulated), or the paired verdict ``faster`` against ``baseline``
    (measured: ``equivalent`` or ``inconclusive`` is no win, however low the median, nor is an
    old record's ``within noise``); None where a measured pair has no verdict (fewer than 3
    rounds), so the task is not compared."""
    if not significant(key):
        return mine[key] < theirs[key]
    verdict = ((mine.get("measured_vs") or {}).get(baseline) or {}).get("verdict")
    return None if verdict is None else verdict == "faster"


def _half_width_pct(row: Mapping[str, Any]) -> float | None:
    """Half the measured cost's 95% interval relative to the cost (%), None without one."""
    ci = row.get("measured_ci95_ms")
    return None if not ci or not row.get("measured_ms") else 50.0 * (ci[1] - ci[0]) / row["measured_ms"]


def summarise(rows: Sequence[dict[str, Any]], methods: Sequence[str], key: str = "simulated_ms",
              baselines: Sequence[str] = BASELINE_METHODS) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (setting, method), in setting then ``methods`` order: ``cost_ms`` (mean cost under
    ``key``, ms), ``ratio_to_best`` (mean over tasks of cost / the best cost any method found on
    the task, :func:`to_best`), ``ratio_to_bound`` (mean over tasks of cost / bound; nan without
    bounds),
    ``search_s`` (mean search time, s), ``wins``: baseline -> fraction (in [0, 1]) of the tasks
    both solved on which the method wins (:func:`beats`: strictly cheaper when simulated, a
    paired verdict ``faster`` when measured; a method is never compared with itself), and for
    measured costs ``ci_half_width_pct`` (mean over tasks of the cost's 95% interval half-width,
    % of the cost; nan without intervals). Skipped rows are left out; a method with no row in a
    setting has no entry."""
    ok = done(rows, key)
    best = best_found(ok, key)
    out = {}
    for setting in settings_of(rows):
        by_method = {m: {r["task"]: r for r in ok if r["setting"] == setting and r["method"] == m}
                     for m in dict.fromkeys([*methods, *baselines])}
        for m in methods:
            mine = by_method[m]
            if not mine:
                continue
            wins = {}
            for b in baselines:
                theirs = by_method[b]
                won = [beats(mine[t], theirs[t], key, b) for t in sorted(set(mine) & set(theirs))]
                won = [w for w in won if w is not None]
                if won and b != m:
                    wins[b] = float(np.mean(won))
            ratios = [r[key] / r[bound_key(key)] for r in mine.values() if r.get(bound_key(key))]
            out[(setting, m)] = {"cost_ms": float(np.mean([r[key] for r in mine.values()])),
                                 "ratio_to_best": float(np.mean([to_best(r, best, key) for r in mine.values()])),
                                 "ratio_to_bound": float(np.mean(ratios)) if ratios else float("nan"),
                                 "search_s": float(np.mean([r["search_s"] for r in mine.values()])), "wins": wins}
            if significant(key):
                widths = [w for w in map(_half_width_pct, mine.values()) if w is not None]
                out[(setting, m)]["ci_half_width_pct"] = float(np.mean(widths)) if widths else float("nan")
    return out


def summary_rows(rows: Sequence[dict[str, Any]], methods: Sequence[str], key: str = "simulated_ms",
                 baselines: Sequence[str] = BASELINE_METHODS) -> list[dict[str, Any]]:
    """:func:`summarise` as table rows (one per setting and method, rounded; methods skipped on
    every task of a setting appear with their count of skips): setting, method, tasks,
    skipped, mean cost (ms), [mean 95% CI half-width (%), measured only], mean cost / best found,
    mean cost / lower bound (None without bounds), mean search (s), and wins against each baseline (:func:`wins_label`)."""
    sm = summarise(rows, methods, key, baselines)
    out = []
    for setting in settings_of(rows):
        for m in methods:
            here = [r for r in rows if r["setting"] == setting and r["method"] == m]
            if not here:
                continue
            s = sm.get((setting, m))
            row = {"setting": setting, "method": m, "tasks": len(done(here, key)),
                   "skipped": sum("skipped" in r for r in here),
                   "mean cost (ms)": _round(s and s["cost_ms"], 2)}
            if significant(key):
                row["mean 95% CI half-width (%)"] = _round(s and s["ci_half_width_pct"], 2)
            row.update({"mean cost / best found": _round(s and s["ratio_to_best"], 3),
                        "mean cost / lower bound": _round(s and s["ratio_to_bound"], 3),
                        "mean search (s)": _round(s and s["search_s"], 4)})
            for b in baselines:
                row[wins_label(key, b)] = _round(s["wins"].get(b) if s else None, 2)
            out.append(row)
    return out


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), digits)


def skipped(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The skipped rows (setting, task, method, skipped = the error's message)."""
    return [r for r in rows if "skipped" in r]
