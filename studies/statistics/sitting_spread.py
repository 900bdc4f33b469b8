#!/usr/bin/env python
"""Write results/sitting_spread.{json,md}: how far the paired ratio of the same two plans moves
between sittings on this machine, estimated from the two held-out campaigns that measured the
same tasks with the same plans (``datasets/cpu_heldout_v2`` and ``datasets/cpu_heldout_verify``,
5 rounds each, made hours apart). The estimate is
the ``sitting_log_sd`` of ``datasets/cpu/hardware.json``, the between-sitting spread every measured
interval on the ``cpu`` profile accounts for (``shardlab.evaluate.stats.paired_ratio_ci``).

    .venv/bin/python studies/statistics/sitting_spread.py

For every task measured in both campaigns and every method whose plan is the same in both, the
paired log ratio plan / reference is taken per sitting against one fixed reference plan
(``lookup_greedy``, the same plan in both; never a reference chosen on the rounds): d_c = the
median over sitting c's R rounds and s_c the sample sd of those rounds. Under the model of
``studies/statistics/run.py`` (log ratio = log true ratio + b_c + e_cr, b_c ~ N(0, tau^2),
e_cr ~ N(0, s^2)) the within-sitting variance of d_c is k_R s_c^2, k_R the variance of the
median of R standard normals (simulated, seeded), and E[(d_1 - d_2)^2] = 2 tau^2 + v, v = k_R
(s_1^2 + s_2^2): the **method-of-moments** estimate is tau^2 = mean((d_1 - d_2)^2 - v) / 2.
The rounds are heavy-tailed (a disturbed round moves s a lot), which biases that towards 0, so
the **matched** estimate is the one used: the tau (on a grid of 0.005) whose simulated median
|d_1 - d_2|, every pair drawn with its own s_1, s_2, comes closest to the observed median.
Nothing is measured here.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from shardlab.profile.hardware import git_revision  # noqa: E402
from studies.common.heldout import heldout_samples  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CAMPAIGNS = ("cpu_heldout_v2", "cpu_heldout_verify")
REFERENCE = "lookup_greedy"


GRID = np.round(np.arange(0.0, 0.1001, 0.005), 3)
SIMULATIONS = 400


def median_and_sd(logs: np.ndarray) -> tuple[float, float]:
    """Median of one sitting's log ratios and their sample sd (ddof 1)."""
    return float(np.median(logs)), float(np.std(logs, ddof=1))


def median_variance_factor(rounds: int, seed: int = 0) -> float:
    """k_R: the variance of the median of ``rounds`` standard normals (200,000 draws, seeded)."""
    return float(np.var(np.median(np.random.default_rng([seed, rounds]).standard_normal((200_000, rounds)), axis=1)))


def matched_tau(sds: np.ndarray, rounds: int, observed: float, seed: int = 0) -> tuple[float, dict[str, float]]:
    """The grid tau whose simulated median |d_1 - d_2| is closest to ``observed``; ``sds``: (P, 2)
    per-pair within-sitting sds. Returns (tau, grid tau -> simulated median |d|)."""
    rng = np.random.default_rng([seed, 0x7A0])
    noise = rng.standard_normal((SIMULATIONS, len(sds), 2, rounds))
    within = np.median(noise, axis=3) * sds[None, :, :]                 # (sims, P, 2)
    shifts = rng.standard_normal((SIMULATIONS, len(sds), 2))
    sim = {float(t): float(np.mean(np.median(np.abs(np.diff(within + t * shifts, axis=2)[..., 0]), axis=1)))
           for t in GRID}
    return min(sim, key=lambda t: abs(sim[t] - observed)), sim


def pairs() -> list[dict]:
    """One row per (task, method) measured with the same plan in both campaigns."""
    by_task = [{(s["set"], s["index"], repr(s["task"])): s for s in heldout_samples(c)} for c in CAMPAIGNS]
    rows = []
    for key in sorted(set(by_task[0]) & set(by_task[1]), key=lambda k: (k[0], k[1])):
        a, b = by_task[0][key], by_task[1][key]
        if REFERENCE not in a["plans"] or REFERENCE not in b["plans"]:
            continue
        same = lambda m: set(Plan.from_dict(a["plans"][m]).placements) == set(Plan.from_dict(b["plans"][m]).placements)  # noqa: E731
        if not same(REFERENCE):
            continue
        for m in a["plans"]:
            if m == REFERENCE or m not in b["plans"] or not same(m):
                continue
            row = {"set": key[0], "index": key[1], "method": m}
            for c, s in zip(CAMPAIGNS, (a, b)):
                ratio = np.asarray(s["evaluations"][m]["rounds_ms"]) / np.asarray(s["evaluations"][REFERENCE]["rounds_ms"])
                row[c] = median_and_sd(np.log(ratio))
            rows.append(row)
    return rows


def main() -> None:
    rows = pairs()
    rounds = 5                                                  # both campaigns: --rounds 5
    d = np.array([r[CAMPAIGNS[0]][0] - r[CAMPAIGNS[1]][0] for r in rows])
    sds = np.array([[r[c][1] for c in CAMPAIGNS] for r in rows])
    v = median_variance_factor(rounds) * (sds ** 2).sum(axis=1)
    tau_moments = float(np.sqrt(max(0.0, np.mean(d ** 2 - v) / 2)))
    tau_matched, simulated = matched_tau(sds, rounds, float(np.median(np.abs(d))))
    out = {"made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git": git_revision(),
           "campaigns": list(CAMPAIGNS), "reference": REFERENCE, "pairs": len(rows),
           "abs_log_change_median": float(np.median(np.abs(d))), "abs_log_change_p90": float(np.quantile(np.abs(d), 0.9)),
           "within_sd_median": float(np.median(sds)), "within_variance_median": float(np.median(v)),
           "tau_moments": tau_moments, "tau_matched": tau_matched, "simulated_median_abs_change": simulated,
           "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    write_json_atomic(RESULTS / "sitting_spread.json", out)
    write_text_atomic(RESULTS / "sitting_spread.md", "\n".join([
        "# Between-sitting spread of paired ratios on the `cpu` profile (`studies/statistics/sitting_spread.py`)", "",
        f"Made {out['made']} (git {out['git']}; nothing measured: the rounds of {' and '.join(f'`datasets/{c}`' for c in CAMPAIGNS)}).",
        f"{len(rows)} (task, method) pairs measured with the same plan in both campaigns, each against the "
        f"same `{REFERENCE}` plan, 5 paired rounds per sitting.", "",
        "| statistic | value |", "|---|---|",
        f"| median abs change of the median log ratio between sittings | {out['abs_log_change_median']:.3f} |",
        f"| p90 of that change | {out['abs_log_change_p90']:.3f} |",
        f"| median within-sitting sd of one round's log ratio | {out['within_sd_median']:.3f} |",
        f"| median within-sitting variance of d_1 - d_2 | {out['within_variance_median']:.5f} |",
        f"| between-sitting log-sd tau, method of moments | {tau_moments:.3f} |",
        f"| tau, matched to the median abs change (used) | **{tau_matched:.3f}** |", "",
        "Simulated median abs change by tau: " + ", ".join(f"{t:g}: {m:.3f}" for t, m in simulated.items()
                                                          if t in (0.0, 0.02, 0.03, 0.04, 0.06, 0.1)) + ".", "",
        "Most of the change between the two sittings is what 5 noisy rounds per sitting give on their own; "
        "the matched tau is what remains. It is the `sitting_log_sd` of `datasets/cpu/hardware.json`, the spread every "
        "measured interval of the `cpu` profile adds for sittings it has not seen "
        "(`shardlab.evaluate.stats.paired_ratio_ci`).", ""]))
    print(f"{len(rows)} pairs; tau moments {tau_moments:.4f}, matched {tau_matched:.4f}; "
          f"|d| median {out['abs_log_change_median']:.3f} p90 {out['abs_log_change_p90']:.3f}")


if __name__ == "__main__":
    main()
