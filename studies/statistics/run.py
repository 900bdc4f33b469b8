#!/usr/bin/env python
"""Write results/coverage.{json,md}: how often nominal-95% intervals of a paired ratio cover the
true ratio, on simulated sittings -- the bootstrap over all rounds pooled as one sitting (flat)
against the hierarchical bootstrap over sittings (``shardlab.evaluate.stats.hierarchical_median_ci``)
-- and how often each verdict (faster / slower / equivalent / inconclusive, margin 5%) comes out
when the true ratio is 1.0, 1.03 and 1.10. Nothing is measured; a simulation of seconds to minutes.

    .venv/bin/python studies/statistics/run.py [--comparisons 500] [--seed 0]

A simulated comparison: S sittings of R paired rounds; the per-round ratio plan / reference is
exp(log(true ratio) + b_s + e_sr), b_s ~ N(0, between-sitting log-sd) once per sitting (the
machine's drift between sittings), e_sr ~ N(0, within-sitting log-sd) per round. The true ratio
is the median of that distribution. The true ratio only scales every round, and both intervals
scale with it (a percentile bootstrap of a median is scale-equivariant), so every comparison is
drawn once at ratio 1 and its interval at ratio r is r times that one (same noise; checked on
the first comparisons of every setting): coverage does not depend on the true ratio, and the
verdict rates at 1.0, 1.03 and 1.10 come from the same simulated comparisons.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from shardlab.constants import EQUIVALENCE_MARGIN  # noqa: E402
from shardlab.data.hardware_profiles import profile_folder  # noqa: E402
from shardlab.evaluate.stats import (N_BOOT, VERDICTS, hierarchical_median_ci, verdict,  # noqa: E402
                                     with_sitting_spread)
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.hardware import git_revision  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: Rounds per sitting, sittings per comparison, between-sitting log-sd (the settings' grid).
ROUNDS, SITTINGS, BETWEEN = (5, 8), (1, 2, 4, 8), (0.0, 0.03, 0.07)
#: Within-sitting (per-round) log-sd: about what a paired ratio shows on the 2-core VM.
WITHIN = 0.05
#: True ratios plan / reference whose verdict rates are reported.
TRUE_RATIOS = (1.0, 1.03, 1.10)
#: The ways of making the interval: every sitting its own (hierarchical), all rounds as one sitting
#: (flat), or hierarchical widened by the cpu profile's known between-sitting spread (what shardlab
#: reports on that profile: ``paired_ratio_ci(..., sitting_sd=profile_folder("cpu").sitting_log_sd)``).
METHODS = ("hierarchical", "flat", "with_spread")
#: The between-sitting log-sd the ``with_spread`` intervals assume (the cpu profile's estimate).
KNOWN_SPREAD = profile_folder("cpu").sitting_log_sd


def simulate(rounds: int, sittings: int, between: float, within: float, comparisons: int,
             seed: int) -> np.ndarray:
    """Per-round paired ratios of ``comparisons`` simulated comparisons at true ratio 1, shape
    (comparisons, sittings, rounds) (module docstring; log-sds dimensionless)."""
    rng = np.random.default_rng([seed, rounds, sittings, round(1000 * between), round(1000 * within)])
    offsets = rng.normal(0.0, between, (comparisons, sittings, 1))
    return np.exp(offsets + rng.normal(0.0, within, (comparisons, sittings, rounds)))


def intervals(ratios: np.ndarray, method: str, seed: int) -> np.ndarray:
    """The 95% interval of every comparison's median ratio, shape (comparisons, 2): hierarchical
    over its sittings, (``flat``) all its rounds as one sitting, or (``with_spread``) the
    hierarchical one widened by :data:`KNOWN_SPREAD`; bootstrap seed ``seed + i`` for comparison i."""
    out = np.empty((len(ratios), 2))
    for i, comparison in enumerate(ratios):
        groups = [comparison.ravel()] if method == "flat" else list(comparison)
        centre, ci = hierarchical_median_ci(groups, seed=seed + i)
        if method == "with_spread":
            within = hierarchical_median_ci(groups, seed=seed + i, resample_sittings=False)[1]
            ci = with_sitting_spread(centre, ci, within, KNOWN_SPREAD, len(groups))
        out[i] = ci
    return out


def check_scaling(ratios: np.ndarray, method: str, seed: int, ci: np.ndarray, checks: int = 3) -> None:
    """The premise that an interval at true ratio r is r times the one at 1, on the first comparisons."""
    for r in TRUE_RATIOS[1:]:
        again = intervals(ratios[:checks] * r, method, seed)
        if not np.allclose(again, ci[:checks] * r, rtol=1e-12, atol=0):
            raise AssertionError(f"{method}: the interval at ratio {r} is not {r} x the one at 1")


def setting_row(rounds: int, sittings: int, between: float, comparisons: int, seed: int) -> dict:
    """Coverage, interval width and verdict rates of both methods for one setting."""
    ratios = simulate(rounds, sittings, between, WITHIN, comparisons, seed)
    row = {"rounds_per_sitting": rounds, "sittings": sittings, "between_sd": between, "within_sd": WITHIN,
           "comparisons": comparisons}
    for method in METHODS:
        if method == "flat" and sittings == 1:          # one sitting: the same bootstrap, the same numbers
            row[method] = row["hierarchical"]
            continue
        ci = intervals(ratios, method, seed)
        check_scaling(ratios, method, seed, ci)
        rates = {}
        for r in TRUE_RATIOS:
            said = [verdict((lo * r, hi * r), EQUIVALENCE_MARGIN) for lo, hi in ci]
            rates[f"{r:g}"] = {v: said.count(v) / comparisons for v in VERDICTS}
        row[method] = {"coverage": float(np.mean((ci[:, 0] <= 1.0) & (1.0 <= ci[:, 1]))),
                       "median_half_width": float(np.median((ci[:, 1] - ci[:, 0]) / 2.0)),
                       "verdict_rates": rates}
    return row


def pct(x: float) -> str:
    """A share as a whole percentage."""
    return f"{100 * x:.0f}%"


def markdown(report: dict) -> str:
    """The report's markdown page."""
    rows = report["settings"]
    n = rows[0]["comparisons"] if rows else 0
    lines = ["# Coverage of nominal-95% paired-ratio intervals over sittings (`studies/statistics/run.py`)", "",
             f"Made {report['date']} (git {report['git']}; a simulation, nothing measured, {report['seconds']:.0f} s). "
             f"{n} simulated comparisons per setting; each: S sittings of R paired rounds, per-round ratio "
             f"exp(log(true ratio) + b_s + e_sr), b_s ~ N(0, between-sitting log-sd), e_sr ~ N(0, {WITHIN}). "
             f"Intervals: percentile bootstrap of the median ({N_BOOT} resamples), **hierarchical** (sittings "
             "resampled with replacement, then rounds within each), **flat** (all rounds pooled as one sitting; "
             "with one sitting the same bootstrap as hierarchical) or **with spread** (hierarchical, each side "
             "widened in log space to at least sqrt(w^2 + (1.96 tau)^2 / S), w the side's half-width with the "
             f"sittings held fixed, tau = {KNOWN_SPREAD} the cpu profile's between-sitting spread estimated in "
             "`results/sitting_spread.md`: what shardlab reports on that profile). Coverage does not depend on "
             "the true ratio (module docstring of the driver); where the true between-sitting sd exceeds the "
             "assumed tau, few sittings under-cover.", "",
             "## Coverage (share of comparisons whose 95% interval contains the true ratio)", "",
             "| rounds per sitting | sittings | " + " | ".join(f"between-sitting sd {b:g}: hierarchical / flat / with spread"
                                                            for b in BETWEEN) + " |",
             "|---|---|" + "---|" * len(BETWEEN)]
    for rounds in ROUNDS:
        for s in SITTINGS:
            cells = []
            for b in BETWEEN:
                row = _row(rows, rounds, s, b)
                cells.append("-" if row is None else " / ".join(pct(row[m]["coverage"]) for m in METHODS))
            lines.append(f"| {rounds} | {s} | " + " | ".join(cells) + " |")
    lines += ["", "## Median interval half-width (ratio units; hierarchical / flat / with spread)", "",
              "| rounds per sitting | sittings | " + " | ".join(f"sd {b:g}" for b in BETWEEN) + " |",
              "|---|---|" + "---|" * len(BETWEEN)]
    for rounds in ROUNDS:
        for s in SITTINGS:
            cells = []
            for b in BETWEEN:
                row = _row(rows, rounds, s, b)
                cells.append("-" if row is None else " / ".join(f"{row[m]['median_half_width']:.3f}" for m in METHODS))
            lines.append(f"| {rounds} | {s} | " + " | ".join(cells) + " |")
    for method in METHODS:
        lines += ["", f"## Verdict rates, {method} intervals (margin {EQUIVALENCE_MARGIN:.0%}; "
                      "faster / slower / equivalent / inconclusive)", "",
                  "True ratio 1.0: any 'faster' or 'slower' is a false alarm, 'equivalent' is right. 1.03: inside "
                  "the margin, 'slower' and 'equivalent' are both true. 1.10: 'slower' is right, 'faster' and "
                  "'equivalent' are wrong.", "",
                  "| rounds | sittings | between sd | " + " | ".join(f"true {r:g}" for r in TRUE_RATIOS) + " |",
                  "|---|---|---|" + "---|" * len(TRUE_RATIOS)]
        for row in rows:
            if method == "flat" and row["sittings"] == 1:
                continue
            rates = row[method]["verdict_rates"]
            cells = [" / ".join(pct(rates[f"{r:g}"][v]) for v in VERDICTS) for r in TRUE_RATIOS]
            lines.append(f"| {row['rounds_per_sitting']} | {row['sittings']} | {row['between_sd']:g} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _row(rows: list[dict], rounds: int, sittings: int, between: float) -> dict | None:
    return next((r for r in rows if (r["rounds_per_sitting"], r["sittings"], r["between_sd"])
                 == (rounds, sittings, between)), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comparisons", type=int, default=500, help="simulated comparisons per setting (>= 400)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = []
    for rounds in ROUNDS:
        for s in SITTINGS:
            for b in BETWEEN:
                row = setting_row(rounds, s, b, args.comparisons, args.seed)
                rows.append(row)
                print(f"R={rounds} S={s} between={b:g}: coverage " + ", ".join(
                    f"{m} {row[m]['coverage']:.3f}" for m in METHODS), flush=True)
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git": git_revision(),
              "command": " ".join(sys.argv), "numpy": np.__version__, "seed": args.seed, "n_boot": N_BOOT,
              "within_sd": WITHIN, "known_spread": KNOWN_SPREAD, "equivalence_margin": EQUIVALENCE_MARGIN, "true_ratios": list(TRUE_RATIOS),
              "seconds": time.perf_counter() - t0, "settings": rows}
    out = Path(args.out)
    write_json_atomic(out / "coverage.json", report)
    write_text_atomic(out / "coverage.md", markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
