#!/usr/bin/env python
"""Write results/sitting_spread[_<machine>].{json,md}: how far the paired ratio of the same two
plans moves between sittings on one machine, from two sittings that measured the same tasks with
the same plans, 5 rounds each:

- ``cpu``: the two held-out campaigns ``datasets/cpu_heldout_v2`` and ``datasets/cpu_heldout_verify``,
  made hours apart;
- ``h200``: the two plan sittings of the first H200 lease (``datasets/h200-events`` and its
  ``plans-sitting-2``, minutes apart on one machine, then on a fresh one), as judged by
  ``studies/gpu_compute/lease_report.py`` (measured compute + the labelled comm model).

The estimate is the ``sitting_log_sd`` of ``datasets/<machine>/hardware.json``, the between-sitting
spread every measured interval on that profile accounts for (``shardlab.evaluate.stats.paired_ratio_ci``).

    .venv/bin/python studies/statistics/sitting_spread.py [--machine cpu|h200]

For every task measured in both campaigns and every method whose plan is the same in both, the
paired log ratio plan / reference is taken per sitting against one fixed reference plan
(``lookup_greedy``, the same plan in both; never a reference chosen on the rounds): d_c = the
median over sitting c's R rounds and s_c the sample sd of those rounds. Under the model of
``studies/statistics/run.py`` (log ratio = log true ratio + b_c + e_cr, b_c ~ N(0, tau^2),
e_cr ~ N(0, s^2)) the within-sitting variance of d_c is k_R s_c^2, k_R the variance of the
median of R standard normals (simulated, seeded), and E[(d_1 - d_2)^2] = 2 tau^2 + v, v = k_R
(s_1^2 + s_2^2): the **method-of-moments** estimate is tau^2 = mean((d_1 - d_2)^2 - v) / 2.
The rounds are heavy-tailed (a disturbed round moves s a lot), which biases that towards 0, so
there is also the **matched** estimate: the tau (on a grid of 0.005) whose simulated median
|d_1 - d_2|, every pair drawn with its own s_1, s_2, comes closest to the observed median; it
rounds a small tau to the grid. The one **used** is the larger of the two.
Nothing is measured here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from shardlab.measure.hardware import git_revision  # noqa: E402
from studies.common.heldout import heldout_samples  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CAMPAIGNS = ("cpu_heldout_v2", "cpu_heldout_verify")
#: The H200's two sittings: the lease reports of each (the same plans file, so the same plans).
LEASES = ("lease-20261129T214409", "lease-20261129T215351")
LEASE_RESULTS = Path(__file__).resolve().parents[1] / "gpu_compute" / "results"
REFERENCE = "lookup_greedy"
ROUNDS = 5                                                      # every sitting here: 5 paired rounds
#: Two set-1 runs of the same comparisons an hour apart (the second ``--same-references`` the first),
#: under the design of 2026-12-02 (ops kept for a sitting, interleaved sweeps): their first sittings.
SET1_RUNS = ("set1-20261202T063539Z", "set1-20261202T073541Z")
SET1_RESULTS = Path(__file__).resolve().parents[1] / "set1_development" / "results"
SET1_ROUNDS = 8


GRID = np.round(np.arange(0.0, 0.1001, 0.005), 3)
#: The grid for the set-1 runs, whose spread is wider.
WIDE_GRID = np.round(np.arange(0.0, 0.2501, 0.005), 3)
SIMULATIONS = 400


def median_and_sd(logs: np.ndarray) -> tuple[float, float]:
    """Median of one sitting's log ratios and their sample sd (ddof 1)."""
    return float(np.median(logs)), float(np.std(logs, ddof=1))


def median_variance_factor(rounds: int, seed: int = 0) -> float:
    """k_R: the variance of the median of ``rounds`` standard normals (200,000 draws, seeded)."""
    return float(np.var(np.median(np.random.default_rng([seed, rounds]).standard_normal((200_000, rounds)), axis=1)))


def matched_tau(sds: np.ndarray, rounds: int, observed: float, seed: int = 0,
                grid: np.ndarray = GRID) -> tuple[float, dict[str, float]]:
    """The ``grid`` tau whose simulated median |d_1 - d_2| is closest to ``observed``; ``sds``: (P, 2)
    per-pair within-sitting sds. Returns (tau, grid tau -> simulated median |d|)."""
    rng = np.random.default_rng([seed, 0x7A0])
    noise = rng.standard_normal((SIMULATIONS, len(sds), 2, rounds))
    within = np.median(noise, axis=3) * sds[None, :, :]                 # (sims, P, 2)
    shifts = rng.standard_normal((SIMULATIONS, len(sds), 2))
    sim = {float(t): float(np.mean(np.median(np.abs(np.diff(within + t * shifts, axis=2)[..., 0]), axis=1)))
           for t in grid}
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


def lease_pairs() -> list[dict]:
    """One row per (task, distinct plan) judged in both H200 sittings with 5 rounds in each; a
    method whose rounds repeat another's (the same plan) or the reference's is counted once or not
    at all."""
    reports = [json.loads((LEASE_RESULTS / f"{name}.json").read_text()) for name in LEASES]
    by_task = [{t["task"]: t for t in r["tasks"] if t.get("complete")} for r in reports]
    rows = []
    for task in sorted(set(by_task[0]) & set(by_task[1])):
        evals = [by_task[c][task]["evaluations"] for c in (0, 1)]
        seen = {tuple(evals[0][REFERENCE]["rounds_ms"])}
        for m in sorted(set(evals[0]) & set(evals[1])):
            runs = [np.asarray(e[m]["rounds_ms"]) / np.asarray(e[REFERENCE]["rounds_ms"]) for e in evals]
            if tuple(evals[0][m]["rounds_ms"]) in seen or any(len(r) != ROUNDS for r in runs):
                continue
            seen.add(tuple(evals[0][m]["rounds_ms"]))
            row = {"set": "h200-lease", "index": task, "method": m}
            for name, ratio in zip(LEASES, runs):
                row[name] = median_and_sd(np.log(ratio))
            rows.append(row)
    return rows


def set1_pairs(runs: Sequence[str]) -> list[dict]:
    """One row per (task, method) of two set-1 runs that judged the same comparisons (the second
    with ``--same-references`` the first): the first sitting of each (8 paired rounds, every plan
    measured), against the task's reference, the same plan in both; a plan whose rounds are the
    reference's (the same plan) is left out."""
    from studies.common.records import read_run

    recs = [{r["task"]["name"]: r for r in read_run(SET1_RESULTS / f"{name}.jsonl.gz")[1]} for name in runs]
    rows = []
    for task in sorted(set(recs[0]) & set(recs[1])):
        evs = [recs[c][task]["evaluations"] for c in (0, 1)]
        ref = next(iter(evs[0].values()))["reference"]
        if next(iter(evs[1].values()))["reference"] != ref:
            continue
        for m in evs[0]:
            if m == ref or m not in evs[1] or (recs[0][task]["plans"][m]["placements"]
                                               != recs[1][task]["plans"][m]["placements"]):
                continue
            firsts = [(e[m].get("sittings_ms") or [e[m]["rounds_ms"]])[0] for e in evs]
            refs = [(e[ref].get("sittings_ms") or [e[ref]["rounds_ms"]])[0] for e in evs]
            if any(a == b for a, b in zip(firsts, refs)) or any(len(a) != SET1_ROUNDS for a in firsts):
                continue
            row = {"set": "set1", "index": task, "method": m}
            for name, a, b in zip(runs, firsts, refs):
                row[name] = median_and_sd(np.log(np.asarray(a) / np.asarray(b)))
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machine", choices=("cpu", "h200", "cpu-set1"), default="cpu")
    ap.add_argument("--runs", nargs=2, default=SET1_RUNS, metavar="RUN",
                    help="with --machine cpu-set1: the two set-1 runs (names in studies/set1_development/results)")
    args = ap.parse_args(argv)
    machine = args.machine
    sittings = {"cpu": CAMPAIGNS, "h200": LEASES, "cpu-set1": tuple(args.runs)}[machine]
    rows = {"cpu": pairs, "h200": lease_pairs, "cpu-set1": lambda: set1_pairs(args.runs)}[machine]()
    rounds = SET1_ROUNDS if machine == "cpu-set1" else ROUNDS
    d = np.array([r[sittings[0]][0] - r[sittings[1]][0] for r in rows])
    sds = np.array([[r[c][1] for c in sittings] for r in rows])
    v = median_variance_factor(rounds) * (sds ** 2).sum(axis=1)
    tau_moments = float(np.sqrt(max(0.0, np.mean(d ** 2 - v) / 2)))
    tau_matched, simulated = matched_tau(sds, rounds, float(np.median(np.abs(d))),
                                         grid=WIDE_GRID if machine == "cpu-set1" else GRID)
    out = {"made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git": git_revision(),
           "machine": machine, "campaigns": list(sittings), "reference": REFERENCE, "pairs": len(rows),
           "abs_log_change_median": float(np.median(np.abs(d))), "abs_log_change_p90": float(np.quantile(np.abs(d), 0.9)),
           "within_sd_median": float(np.median(sds)), "within_variance_median": float(np.median(v)),
           "tau_moments": tau_moments, "tau_matched": tau_matched, "tau_used": max(tau_moments, tau_matched), "simulated_median_abs_change": simulated,
           "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    stem = "sitting_spread" + ("" if machine == "cpu" else f"_{machine.replace('-', '_')}")
    where = {"cpu": ' and '.join(f'`datasets/{c}`' for c in sittings),
             "h200": ' and '.join(f'`studies/gpu_compute/results/{c}.json`' for c in sittings),
             "cpu-set1": ' and '.join(f'`studies/set1_development/results/{c}.jsonl.gz` (first sittings)'
                                      for c in sittings)}[machine]
    profile = machine.split("-")[0]
    write_json_atomic(RESULTS / f"{stem}.json", out)
    write_text_atomic(RESULTS / f"{stem}.md", "\n".join([
        f"# Between-sitting spread of paired ratios on the `{profile}` profile (`studies/statistics/sitting_spread.py --machine {machine}`)", "",
        f"Made {out['made']} (git {out['git']}; nothing measured: the rounds of {where}).",
        f"{len(rows)} (task, method) pairs measured with the same plan in both sittings, each against the "
        f"same {'reference' if machine == 'cpu-set1' else f'`{REFERENCE}`'} plan, {rounds} paired rounds per sitting.", "",
        "| statistic | value |", "|---|---|",
        f"| median abs change of the median log ratio between sittings | {out['abs_log_change_median']:.3f} |",
        f"| p90 of that change | {out['abs_log_change_p90']:.3f} |",
        f"| median within-sitting sd of one round's log ratio | {out['within_sd_median']:.3f} |",
        f"| median within-sitting variance of d_1 - d_2 | {out['within_variance_median']:.5f} |",
        f"| between-sitting log-sd tau, method of moments | {tau_moments:.3f} |",
        f"| tau, matched to the median abs change | {tau_matched:.3f} |",
        f"| tau used: the larger | **{out['tau_used']:.3f}** |", "",
        "Simulated median abs change by tau: " + ", ".join(f"{t:g}: {m:.3f}" for t, m in simulated.items()
                                                          if t in (0.0, 0.02, 0.03, 0.04, 0.06, 0.1, 0.15, 0.2)) + ".", "",
        f"Most of the change between the two sittings is what {rounds} noisy rounds per sitting give on their own; "
        f"tau is what remains. It is the `sitting_log_sd` of `datasets/{profile}/hardware.json`, the spread every "
        f"measured interval of the `{profile}` profile adds for sittings it has not seen "
        "(`shardlab.evaluate.stats.paired_ratio_ci`).", ""]))
    print(f"{len(rows)} pairs; tau moments {tau_moments:.4f}, matched {tau_matched:.4f}, used {out['tau_used']:.4f}; "
          f"|d| median {out['abs_log_change_median']:.3f} p90 {out['abs_log_change_p90']:.3f}")


if __name__ == "__main__":
    main()
