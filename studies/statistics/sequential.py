#!/usr/bin/env python
"""Write results/sequential.{json,md}: are the verdicts of a comparison measured with a time budget
(``shardlab.evaluate.sequential``: up to 4 sittings, one look after each at 1 - 0.05/4, stop at the
first decisive look) still wrong no more than 5% of the time although the stopping depends on the
data -- and how many sittings does a verdict take? Against fixed designs of one 95% look: the
sealed run's 8 rounds x 2 sittings, and 4 sittings (the sequential design's most). Nothing is measured: simulated sittings, seconds to a minute.

    .venv/bin/python studies/statistics/sequential.py [--comparisons 400] [--seed 0]

A simulated comparison (as in ``run.py``): per sitting s and round r the paired ratio plan /
reference is exp(log(true ratio) + b_s + e_sr), b_s ~ N(0, tau) per sitting, e_sr ~ N(0, 0.05)
per round; tau = 0.025, the cpu profile's between-sitting spread, which the intervals also assume.
The reference's round costs drift (x U(1, 1.2)) and the plan's are paired with them, as measured.

A decisive verdict is **wrong** when it contradicts the truth: ``faster`` at a true ratio >= 1,
``slower`` at <= 1, ``equivalent`` outside [1/1.05, 1.05] (margin 5%). The rate of wrong decisive
verdicts must stay <= 5% (the nominal error rate) for every true ratio.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from shardlab.constants import EQUIVALENCE_MARGIN, SEQUENTIAL_LOOKS  # noqa: E402
from shardlab.data.hardware_profiles import profile_folder  # noqa: E402
from shardlab.evaluate.sequential import run_sequential  # noqa: E402
from shardlab.evaluate.values import DeviceCost, Evaluation, compare_to_reference  # noqa: E402
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.hardware import git_revision  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TRUE_RATIOS = (1.00, 1.03, 1.05, 1.08, 1.15)
ROUNDS = 8
FIXED_SITTINGS = (2, 4)
WITHIN = 0.05
TAU = profile_folder("cpu").sitting_log_sd


def wrong(said: str, truth: float, margin: float = EQUIVALENCE_MARGIN) -> bool:
    """Whether a verdict contradicts the true ratio (module docstring)."""
    if said == "faster":
        return truth >= 1.0
    if said == "slower":
        return truth <= 1.0
    if said == "equivalent":
        return not (1.0 / (1.0 + margin) <= truth <= 1.0 + margin + 1e-12)
    return False


def simulator(truth: float, rng: np.random.Generator):
    """``sitting`` and ``evaluation`` callables of one simulated comparison (module docstring)."""
    def sitting(s, names):
        b = rng.normal(0.0, TAU)
        base = 10.0 * (1.0 + 0.2 * rng.random(ROUNDS))
        ratio = truth * np.exp(b + rng.normal(0.0, WITHIN, ROUNDS))
        return {"ref": [np.array([[x, 0, 0, 0]]) for x in base],
                "plan": [np.array([[x * q, 0, 0, 0]]) for x, q in zip(base, ratio)]}

    def evaluation(name, runs):
        costs = tuple(tuple(float(m.sum()) for m in r[name]) for r in runs if name in r)
        return Evaluation("sim", name, "measured:sim", (DeviceCost(0, 1, 1, 0, 0, 0.1),), None,
                          tuple(x for c in costs for x in c), None, None, costs if len(costs) > 1 else None)

    return sitting, evaluation


def one(truth: float, seed: int, k: int) -> tuple[str, int, str, str]:
    """(sequential verdict, sittings it took, verdicts of the fixed designs) of comparison ``k``:
    the fixed designs see the same first sittings as the sequential one, and more."""
    rng = np.random.default_rng([seed, k, round(truth * 1000)])
    sitting, evaluation = simulator(truth, rng)
    out, done = run_sequential(sitting, evaluation, ["ref", "plan"], "ref", 1e9, SEQUENTIAL_LOOKS, k,
                               EQUIVALENCE_MARGIN, TAU, "named")
    seq = out["plan"].comparison.verdict or "inconclusive"
    runs = list(done) + [sitting(s, ["ref", "plan"]) for s in range(len(done), max(FIXED_SITTINGS))]
    fixed = [compare_to_reference({"plan": evaluation("plan", runs[:n]), "ref": evaluation("ref", runs[:n])}, "ref", k,
                                  EQUIVALENCE_MARGIN, TAU)["plan"].comparison.verdict or "inconclusive"
             for n in FIXED_SITTINGS]
    return (seq, len(out["plan"].sittings), *fixed)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comparisons", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rows = []
    for truth in TRUE_RATIOS:
        got = [one(truth, args.seed, k) for k in range(args.comparisons)]
        seq, took, *fixed = zip(*got)
        n = len(got)
        rows.append({"true_ratio": truth, "comparisons": n,
                     "sequential": {"wrong": sum(wrong(v, truth) for v in seq) / n,
                                    "inconclusive": seq.count("inconclusive") / n,
                                    "verdicts": {v: seq.count(v) / n for v in sorted(set(seq))},
                                    "mean_sittings": float(np.mean(took)),
                                    "rounds_mean": float(np.mean(took)) * ROUNDS},
                     "fixed": {str(S): {"wrong": sum(wrong(v, truth) for v in f) / n,
                                        "inconclusive": f.count("inconclusive") / n,
                                        "verdicts": {v: f.count(v) / n for v in sorted(set(f))},
                                        "sittings": S, "rounds": S * ROUNDS}
                               for S, f in zip(FIXED_SITTINGS, fixed)}})
        q = rows[-1]
        print(f"true {truth:.2f}: sequential wrong {q['sequential']['wrong']:.3f} inconclusive "
              f"{q['sequential']['inconclusive']:.3f} sittings {q['sequential']['mean_sittings']:.2f}; " +
              "; ".join(f"fixed {S}: wrong {q['fixed'][str(S)]['wrong']:.3f} inconclusive "
                        f"{q['fixed'][str(S)]['inconclusive']:.3f}" for S in FIXED_SITTINGS), flush=True)
    out = {"made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git": git_revision(),
           "settings": {"rounds": ROUNDS, "looks": SEQUENTIAL_LOOKS, "fixed_sittings": list(FIXED_SITTINGS),
                        "within_log_sd": WITHIN, "between_log_sd": TAU, "margin": EQUIVALENCE_MARGIN,
                        "seed": args.seed}, "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    write_json_atomic(RESULTS / "sequential.json", out)
    lines = ["# Verdicts measured with a time budget, simulated (`studies/statistics/sequential.py`)", "",
             f"Made {out['made']} (git {out['git']}); nothing measured. {args.comparisons} simulated comparisons per "
             f"true ratio; {ROUNDS} rounds per sitting; within-sitting log-sd {WITHIN}, between-sitting {TAU} "
             f"(the cpu profile's, also assumed by the intervals); margin {EQUIVALENCE_MARGIN:g}. Sequential: up to "
             f"{SEQUENTIAL_LOOKS} sittings, a look after each at {100 * (1 - 0.05 / SEQUENTIAL_LOOKS):g}%, stop when "
             f"decisive. Fixed: {' or '.join(map(str, FIXED_SITTINGS))} sittings, one 95% look.", "",
             "| true ratio | sequential: wrong | inconclusive | mean sittings | "
             + " | ".join(f"fixed {S}: wrong | inconclusive" for S in FIXED_SITTINGS) + " |",
             "| ---: | ---: | ---: | ---: | " + " | ".join("---: | ---:" for _ in FIXED_SITTINGS) + " |"]
    for r in rows:
        s = r["sequential"]
        lines.append(f"| {r['true_ratio']:.2f} | {s['wrong']:.3f} | {s['inconclusive']:.3f} | {s['mean_sittings']:.2f} | "
                     + " | ".join(f"{r['fixed'][str(S)]['wrong']:.3f} | {r['fixed'][str(S)]['inconclusive']:.3f}"
                                  for S in FIXED_SITTINGS) + " |")
    lines += ["", "Wrong: a decisive verdict against the truth (`faster` at a ratio >= 1, `slower` at <= 1, "
              "`equivalent` outside the margin). The sequential design's rate must stay <= 0.05.", ""]
    write_text_atomic(RESULTS / "sequential.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
