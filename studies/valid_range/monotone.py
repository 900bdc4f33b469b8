#!/usr/bin/env python
"""How often does a shipped bundle's predicted plan cost fall when a device gets one more table?

Random plans of pool tables (2, 4 or 8 devices, 1 to 8 tables per device on average); one more
pool table goes to a random device; the plan cost (ms, the bundle's own simulation -- a model's
prediction, not a measurement) before and after. Split by where the grown device lies: inside
the compute model's valid range before and after, crossing out of it, or outside both (the
fallback's part, monotone by construction: ``tests/test_valid_range.py``). Writes
``results/monotone.{json,md}``. Nothing is timed.

    .venv/bin/python studies/valid_range/monotone.py --trials 300
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab import constants as C  # noqa: E402
from shardlab.costmodel.bundle import load_bundle  # noqa: E402
from shardlab.costmodel.valid_range import GuardedCompute  # noqa: E402
from shardlab.data.tasks import pool_tables  # noqa: E402
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BUNDLES = (("cpu", "neuroshard_broad"), ("cpu", "autoshard"), ("cpu", "dreamshard"), ("h100", "neuroshard"),
           ("h100", "autoshard"), ("h100", "dreamshard"))


def trial_rows(profile: str, name: str, trials: int, seed: int) -> dict:
    """Per case (inside, crossing, outside): additions tried, how many lowered the plan cost and
    the largest relative drop."""
    bundle = load_bundle(name, profile)
    pool = pool_tables(C.DEFAULT_POOL, "all")
    rng = np.random.default_rng(seed)
    out: dict[str, dict] = {}
    for _ in range(trials):
        g = int(rng.choice([2, 4, 8]))
        n = int(rng.integers(g, 8 * g))
        tables = [pool[i] for i in rng.choice(len(pool), n + 1, replace=False)]
        shards: list[list] = [[] for _ in range(g)]
        for t in tables[:-1]:
            shards[int(rng.integers(g))].append(t)
        k = int(rng.integers(g))
        before = bundle.simulate(shards).cost_ms
        inside_before = bool(bundle.compute.inside([shards[k]])[0]) if isinstance(bundle.compute, GuardedCompute) else False
        shards[k].append(tables[-1])
        after = bundle.simulate(shards).cost_ms
        inside_after = bool(bundle.compute.inside([shards[k]])[0]) if isinstance(bundle.compute, GuardedCompute) else False
        case = "inside" if inside_after else ("crossing" if inside_before else "outside")
        row = out.setdefault(case, {"tried": 0, "fell": 0, "largest_drop": 0.0})
        row["tried"] += 1
        if after < before - 1e-9:
            row["fell"] += 1
            row["largest_drop"] = max(row["largest_drop"], (before - after) / before)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    report = {f"{p}/{n}": trial_rows(p, n, args.trials, args.seed) for p, n in BUNDLES}
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json_atomic(RESULTS / "monotone.json", {"trials": args.trials, "seed": args.seed, "bundles": report})
    lines = ["# Does the predicted plan cost fall when a device gets one more table? (`monotone.py`)", "",
             f"{args.trials} random additions per bundle (seed {args.seed}); plan costs are the bundle's own "
             "predictions. `inside`: the grown device is in the compute model's valid range after the addition; "
             "`crossing`: it leaves the range with it; `outside`: it was outside before. Only the grown device's "
             "compute is placed by case: the all-to-alls may still be the learned comm model's (cpu bundles at 4 "
             "and 8 devices, inside the comm range), which is not monotone either.", "",
             "| bundle | case | additions | cost fell | largest drop |", "|---|---|---|---|---|"]
    for key, cases in report.items():
        for case in ("inside", "crossing", "outside"):
            r = cases.get(case)
            if r:
                lines.append(f"| {key} | {case} | {r['tried']} | {r['fell']} | {r['largest_drop']:.2%} |")
    write_text_atomic(RESULTS / "monotone.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
