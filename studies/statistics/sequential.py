#!/usr/bin/env python
"""Write results/sequential.{json,md}: are the verdicts of a comparison measured with a time budget
(``shardlab.evaluate.sequential``: a look after each sitting at a boundary fixed in advance, stop
at the first decisive look) still wrong no more than 5% of the time although the stopping depends
on the data -- and how many sittings does a verdict take? Each design of :data:`DESIGNS` (a
spending function and a budget of B sittings: the shipped ``constants.SEQUENTIAL_SPENDING`` with
budgets of 8 and of 2 sittings, Pocock's with 8) against fixed designs of one 95% look at 2, 4
and 8 sittings (the sealed run's 8 rounds x 2 sittings among them). A simulated sitting takes one
unit of a simulated clock, so a budget of B units holds B sittings (at most
``constants.SEQUENTIAL_LOOKS``). Nothing is measured: simulated sittings, about ten minutes.

    .venv/bin/python studies/statistics/sequential.py [--comparisons 400] [--seed 0]
    .venv/bin/python studies/statistics/sequential.py --report    # rewrite the .md from the .json

A simulated comparison (as in ``run.py``): per sitting s and round r the paired ratio plan /
reference is exp(log(true ratio) + b_s + e_sr), b_s ~ N(0, tau) per sitting, e_sr ~ N(0, w) per
round; tau = 0.025, the cpu profile's between-sitting spread, which the intervals also assume,
and in a third setting, with chance 0.1 a sitting shifted as a whole by N(0, 0.15) more (set 1's
runs of 2026-12-02 showed such sittings: one op 20-40% apart from its other sittings, consistently
over the sitting's rounds), which the intervals do not assume;
w = 0.05 (the noise study's tasks of 24-26 tables) or 0.20 (the median within-sitting log-sd of a
round's paired ratio over the development set's 12 small tasks, set 1, measured at 8 x 2:
``studies/set1_development``). The reference's round costs drift (x U(1, 1.2)) and the plan's are
paired with them, as measured.

A decisive verdict is **wrong** when it contradicts the truth: ``faster`` at a true ratio >= 1,
``slower`` at <= 1, ``equivalent`` outside [1/1.05, 1.05] (margin 5%). The rate of wrong decisive
verdicts must stay <= 5% (the nominal error rate) for every true ratio and design.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from shardlab import constants as C  # noqa: E402
from shardlab.constants import EQUIVALENCE_MARGIN, SEQUENTIAL_LOOKS, SEQUENTIAL_SPENDING  # noqa: E402
from shardlab.data.hardware_profiles import profile_folder  # noqa: E402
from shardlab.evaluate.sequential import run_sequential  # noqa: E402
from shardlab.evaluate.evaluation import DeviceCost, Evaluation  # noqa: E402
from shardlab.evaluate.reference import compare_to_reference  # noqa: E402
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.hardware import git_revision  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TRUE_RATIOS = (1.00, 1.03, 1.05, 1.08, 1.15)
ROUNDS = 8
FIXED_SITTINGS = (2, 4, 8)
#: Noise settings (module docstring): within-sitting log-sd of a round's paired ratio, and the
#: chance that a sitting sits apart as a whole, shifted by N(0, SHIFT) on top of tau.
NOISES = ((0.05, 0.0), (0.20, 0.0), (0.05, 0.1))
SHIFT = 0.15
TAU = profile_folder("cpu").sitting_log_sd
#: Sequential designs, name -> (spending function, budget in sittings): the shipped one first.
DESIGNS = {f"{SEQUENTIAL_SPENDING}, budget 8": (SEQUENTIAL_SPENDING, 8, C.SEQUENTIAL_MIN_SITTINGS),
           "pocock, budget 8": ("pocock", 8, C.SEQUENTIAL_MIN_SITTINGS),
           f"{SEQUENTIAL_SPENDING}, budget 2": (SEQUENTIAL_SPENDING, 2, C.SEQUENTIAL_MIN_SITTINGS),
           f"{SEQUENTIAL_SPENDING}, budget 8, a verdict from sitting 1": (SEQUENTIAL_SPENDING, 8, 1)}


def wrong(said: str, truth: float, margin: float = EQUIVALENCE_MARGIN) -> bool:
    """Whether a verdict contradicts the true ratio (module docstring)."""
    if said == "faster":
        return truth >= 1.0
    if said == "slower":
        return truth <= 1.0
    if said == "equivalent":
        return not (1.0 / (1.0 + margin) <= truth <= 1.0 + margin + 1e-12)
    return False


def simulator(truth: float, within: float, rng: np.random.Generator, apart: float = 0.0):
    """``sitting`` and ``evaluation`` callables of one simulated comparison (module docstring)."""
    def sitting(s, names):
        b = rng.normal(0.0, TAU) + (rng.normal(0.0, SHIFT) if rng.random() < apart else 0.0)
        base = 10.0 * (1.0 + 0.2 * rng.random(ROUNDS))
        ratio = truth * np.exp(b + rng.normal(0.0, within, ROUNDS))
        return {"ref": [np.array([[x, 0, 0, 0]]) for x in base],
                "plan": [np.array([[x * q, 0, 0, 0]]) for x, q in zip(base, ratio)]}

    def evaluation(name, runs):
        costs = tuple(tuple(float(m.sum()) for m in r[name]) for r in runs if name in r)
        return Evaluation("sim", name, "measured:sim", (DeviceCost(0, 1, 1, 0, 0, 0.1),), None,
                          tuple(x for c in costs for x in c), None, None, costs if len(costs) > 1 else None)

    return sitting, evaluation


def one(truth: float, within: float, seed: int, k: int, apart: float = 0.0) -> tuple:
    """(per design: (verdict, sittings it took)), then the fixed designs' verdicts, of comparison
    ``k``: every design sees the same sittings, as many as it asks for, and the fixed designs the
    same first sittings."""
    rng = np.random.default_rng([seed, k, round(truth * 1000), round(within * 1000)] + ([round(apart * 1000)] if apart else []))
    sitting, evaluation = simulator(truth, within, rng, apart)
    cache: list = []

    def shared(s, names):                  # sitting s, drawn once and shown to every design
        while len(cache) <= s:
            cache.append(sitting(len(cache), names))
        return cache[s]

    seq = []
    for spending, budget, first in DESIGNS.values():
        clock = [0]                        # simulated time: one unit per sitting

        def timed(s, names):
            clock[0] += 1
            return shared(s, names)

        out, _ = run_sequential(timed, evaluation, ["ref", "plan"], "ref", budget, SEQUENTIAL_LOOKS, k,
                                EQUIVALENCE_MARGIN, TAU, "named", clock=lambda: clock[0], started=0,
                                spending=spending, min_sittings=first)
        c = out["plan"].comparison
        seq.append((c.verdict or "inconclusive", len(out["plan"].sittings), c.confidence))
    runs = [shared(s, ["ref", "plan"]) for s in range(max(FIXED_SITTINGS))]
    fixed = [compare_to_reference({"plan": evaluation("plan", runs[:n]), "ref": evaluation("ref", runs[:n])}, "ref", k,
                                  EQUIVALENCE_MARGIN, TAU)["plan"].comparison.verdict or "inconclusive"
             for n in FIXED_SITTINGS]
    return seq, fixed


def summary(said, truth: float) -> dict:
    """Rates of wrong and inconclusive verdicts, and of each verdict, in ``said``."""
    n = len(said)
    return {"wrong": sum(wrong(v, truth) for v in said) / n, "inconclusive": said.count("inconclusive") / n,
            "verdicts": {v: said.count(v) / n for v in sorted(set(said))}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comparisons", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report", type=Path, metavar="JSON",
                    help="rewrite the .md beside a stored results .json from it; simulates nothing")
    args = ap.parse_args(argv)
    if args.report:
        write_text_atomic(args.report.with_suffix(".md"), markdown(json.loads(args.report.read_text())))
        return
    rows = []
    for within, apart in NOISES:
        for truth in TRUE_RATIOS:
            got = [one(truth, within, args.seed, k, apart) for k in range(args.comparisons)]
            row = {"within_log_sd": within, "sittings_apart": apart, "true_ratio": truth, "comparisons": len(got),
                   "sequential": {}, "fixed": {}}
            for d, name in enumerate(DESIGNS):
                said, took = [g[0][d][0] for g in got], [g[0][d][1] for g in got]
                row["sequential"][name] = {**summary(said, truth), "mean_sittings": float(np.mean(took)),
                                           "mean_rounds": float(np.mean(took)) * ROUNDS,
                                           "levels_at_stop": sorted({round(g[0][d][2], 6) for g in got})}
            for f, S in enumerate(FIXED_SITTINGS):
                row["fixed"][str(S)] = {**summary([g[1][f] for g in got], truth), "sittings": S, "rounds": S * ROUNDS}
            rows.append(row)
            print(f"w {within:.2f} apart {apart:.2f} true {truth:.2f}: " + "; ".join(
                f"{n} wrong {q['wrong']:.3f} inc {q['inconclusive']:.3f} sit {q['mean_sittings']:.2f}"
                for n, q in row["sequential"].items()) + "; " + "; ".join(
                f"fixed {S} wrong {q['wrong']:.3f} inc {q['inconclusive']:.3f}" for S, q in row["fixed"].items()),
                flush=True)
    out = {"made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git": git_revision(),
           "settings": {"rounds": ROUNDS, "designs": {n: {"spending": sp, "budget_sittings": b,
                                                          "most_sittings": SEQUENTIAL_LOOKS, "first_decisive_sitting": f}
                                                      for n, (sp, b, f) in DESIGNS.items()},
                        "fixed_sittings": list(FIXED_SITTINGS), "noises": [list(n) for n in NOISES], "shift_log_sd": SHIFT,
                        "first_decisive_sitting": C.SEQUENTIAL_MIN_SITTINGS,
                        "between_log_sd": TAU, "margin": EQUIVALENCE_MARGIN, "seed": args.seed}, "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    write_json_atomic(RESULTS / f"sequential-{stamp}.json", out)      # each run a new file, never over an earlier one
    write_text_atomic(RESULTS / f"sequential-{stamp}.md", markdown(out))
    print(markdown(out))


def markdown(out: dict) -> str:
    """The results' markdown from their JSON (``out``)."""
    st, rows = out["settings"], out["rows"]
    names = list(st["designs"])
    fixed = st["fixed_sittings"]
    n = rows[0]["comparisons"]
    lines = ["# Verdicts measured with a time budget, simulated (`studies/statistics/sequential.py`)", "",
             f"Made {out['made']} (git {out['git']}); nothing measured. {n} simulated comparisons per "
             f"true ratio and noise; {st['rounds']} rounds per sitting; between-sitting log-sd {st['between_log_sd']} "
             f"(the cpu profile's, also assumed by the intervals); margin {st['margin']:g}. Sequential designs (a look "
             "after each sitting, stop when decisive; each look a repeated confidence interval by alpha spending on "
             "the budget's time scale, the last look spending what is left): " + ", ".join(f"`{k}`" for k in names)
             + f" (a budget of B sittings). Fixed: {', '.join(map(str, fixed))} sittings, one 95% look. `{names[0]}` "
             "is the shipped design.", "",
             f"Looks before sitting {st.get('first_decisive_sitting', 1)} spend nothing unless they are the last "
             "(but in the design that says otherwise). "
             f"Sittings apart: the chance that a sitting is shifted as a whole by N(0, {st.get('shift_log_sd', 0)}) on "
             "top of the between-sitting spread (an op built slow for a sitting, as set 1 showed), which the "
             "intervals do not assume.", "",
             "Each cell: wrong / inconclusive / mean sittings (sequential), wrong / inconclusive (fixed).", "",
             "| within-sitting log-sd | sittings apart | true ratio | " + " | ".join(f"`{k}`" for k in names) + " | "
             + " | ".join(f"fixed {S}" for S in fixed) + " |",
             "| ---: | ---: | ---: | " + " | ".join("---" for _ in names) + " | " + " | ".join("---" for _ in fixed) + " |"]
    for r in rows:
        lines.append(f"| {r['within_log_sd']:.2f} | {r.get('sittings_apart', 0):.2f} | {r['true_ratio']:.2f} | " + " | ".join(
            f"{q['wrong']:.3f} / {q['inconclusive']:.3f} / {q['mean_sittings']:.2f}" for q in r["sequential"].values())
            + " | " + " | ".join(f"{q['wrong']:.3f} / {q['inconclusive']:.3f}" for q in r["fixed"].values()) + " |")
    lines += ["", "Wrong: a decisive verdict against the truth (`faster` at a ratio >= 1, `slower` at <= 1, "
              "`equivalent` outside the margin). Every sequential design's rate must stay <= 0.05.", ""]
    return "\n".join(lines)

if __name__ == "__main__":
    main()
