"""The words of a search benchmark (:mod:`shardlab.report.benchmark`): what its wins count and
how sure its costs are -- simulated wins are predictions with no uncertainty, measured wins count
only significant ones (paired verdict ``faster``) -- and the benchmark's Markdown page
(``studies/search_benchmark/results/search_benchmark.md``)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from shardlab.constants import BASELINE_METHODS
from shardlab.report.benchmark import significant, wins_label


def wins_note(key: str, rounds: int | None = None) -> str:
    """The sentence (markdown) that says what the wins under cost ``key`` count."""
    if significant(key):
        over = f" over {rounds} paired rounds" if rounds else " over paired rounds"
        return (f"`significant wins vs X` counts only tasks on which the paired per-round ratio method / X"
                f"{over} has a 95% bootstrap interval wholly below 1 (verdict 'faster'); 'equivalent' and "
                "'inconclusive' are not wins, however low the median, and tasks without a verdict (< 3 rounds) are "
                "not compared. Costs are medians over "
                "rounds; `mean 95% CI half-width` is the cost's interval half-width, % of the cost.")
    return ("Predictions carry no uncertainty: `wins vs X` is the fraction of tasks on which the model predicts the "
            "method strictly cheaper than X, with no interval, so not tested for noise.")


def section_title(key: str, rounds: int | None = None) -> str:
    """``simulated costs (no uncertainty)`` or ``measured costs (median of R paired rounds, 95% CIs)``."""
    if significant(key):
        return f"measured costs (median of {rounds or 'R'} paired rounds, 95% CIs)"
    return f"{key.split('_')[0]} costs (no uncertainty)"


def markdown_report(report: Mapping[str, Any], tasks_per_setting: int,
                    baselines: Sequence[str] = BASELINE_METHODS) -> str:
    """The benchmark's Markdown page (``studies/search_benchmark/results/search_benchmark.md``)
    from the JSON report ``studies/search_benchmark/run.py`` writes (date, environment, profile,
    judge, ``rounds`` when measured, summary per cost key,
    neuroshard_search_seconds)."""
    prof, rounds = report["profile"], report.get("rounds")
    lines = ["# Search benchmark", "", f"{report['date']}; {report['environment']['hardware']}; profile cpu "
             f"(batch {prof['batch_size']}); {tasks_per_setting} held-out tasks (pool test tables) per setting"
             + ("; settings `family:<set>`: tasks of the held-out model families (datasets/heldout_models, tables no "
                "training step saw; 4 GPUs; rows capped at 2M for this CPU)" if any(
                    str(r.get("setting", "")).startswith("family:") for r in report.get("rows", ())) else "")
             + "; memory cap 4 GB.",
             f"Simulated: every plan through one cost model ({report['judge']}; a lower bound only where the "
             "model proves one -- the analytic models -- none for learned ones: docs/measurement.md). Measured: fused fbgemm ops per device in turn and gloo all-to-alls between G "
             "real ranks on this machine, waiting included, every plan of a task once per round in shuffled paired "
             "rounds; measured lower bound = all tables fused / G + balanced "
             "all-to-all (not a guarantee on CPU: datasets/cpu/NOTES.md); nan where all tables together exceed the "
             "compute profiler's 8 GB limit, so the bound cannot be measured.", ""]
    for key, sm in report["summary"].items():
        ci = significant(key)
        lines += [f"## {section_title(key, rounds)}", "", wins_note(key, rounds), "",
                  "| setting | method | mean cost (ms) | " + ("mean 95% CI half-width (%) | " if ci else "")
                  + "mean cost / best found | mean cost / lower bound | mean search (s) | "
                  + " | ".join(wins_label(key, b) for b in baselines) + " |",
                  "|---" * (6 + ci + len(baselines)) + "|"]
        for label, s in sm.items():
            setting, m = label.rsplit(" ", 1)
            width = f"{s.get('ci_half_width_pct', float('nan')):.2f} | " if ci else ""
            lines.append(f"| {setting} | {m} | {s['cost_ms']:.2f} | {width}{s.get('ratio_to_best', float('nan')):.3f} | "
                         f"{s['ratio_to_bound']:.3f} | "
                         f"{s['search_s']:.3f} | "
                         + " | ".join(f"{s['wins'].get(b, float('nan')):.2f}" for b in baselines) + " |")
        lines.append("")
    scale = report["neuroshard_search_seconds"]
    lines += ["", "NeuroShard search time: " + ", ".join(f"{k}: {v:.2f} s" for k, v in scale.items())]
    return "\n".join(lines) + "\n"
