#!/usr/bin/env python
"""Does a profile made here in one command predict as well as the shipped one? Run
``shardlab hardware new`` for ``--minutes`` on this machine (settings of the shipped ``cpu``
profile), then judge its fitted cost model and the shipped cpu search model on the same measured
held-out plans (``datasets/cpu_heldout``, ``cpu_heldout_v2``: whole plans of held-out model
families, measured on this machine under ``cpu``; neither model saw them). Writes
``results/<stamp>.json``; the README quotes it.

    .venv/bin/python studies/hardware_new/run.py --minutes 10            # a measurement campaign: run it alone

A rerun with the same ``--name`` resumes measuring (the store is crash-safe) unless ``--judge-only``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.costmodel.bundle import load_bundle  # noqa: E402
from shardlab.data.hardware_profiles import profile_folder  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from shardlab.workflows.hardware_new import new_profile, user_profiles_dir  # noqa: E402
from studies.common.heldout import heldout_errors, heldout_samples  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
HELDOUT = ("cpu_heldout", "cpu_heldout_v2")
#: The target: the made profile's held-out error at most this many times the shipped one's.
WITHIN = 1.5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--name", default="mybox")
    ap.add_argument("--profiles-dir", default=str(ROOT / "runs" / "profiles"))
    ap.add_argument("--judge-only", action="store_true", help="judge the profile already made; measure nothing")
    args = ap.parse_args()
    user_profiles_dir(args.profiles_dir)
    made = None if args.judge_only else new_profile(args.name, args.minutes, like="cpu")
    mine, shipped = profile_folder(args.name), profile_folder("cpu")
    samples = [s for d in HELDOUT for s in heldout_samples(d)]
    models = {f"{args.name}/{mine.search_model}": load_bundle(mine.models_dir / f"{mine.search_model}.json"),
              f"cpu/{shipped.search_model}": load_bundle(shipped.search_model, "cpu")}
    judged = {k: heldout_errors(samples, b)["all"] for k, b in models.items()}
    ours, theirs = (judged[k]["shard_compute"]["mape"] for k in models)
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": " ".join(sys.argv),
           "environment": environment("cpu"), "made": made, "minutes": args.minutes, "heldout": list(HELDOUT),
           "models": judged, "ratio_shard_compute_mape": ours / theirs, "target": f"<= {WITHIN}",
           "met": ours / theirs <= WITHIN}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json"
    write_json_atomic(path, out)
    for k, v in judged.items():
        print(f"{k}: shard compute MAPE {v['shard_compute']['mape']:.3f} ({v['shards']} device shards), "
              f"plan cost median error {v['plan_cost_error_median']:.3f}, Spearman {v['plan_cost_spearman']:.3f} "
              f"({v['plans']} plans)")
    print(f"ratio {ours / theirs:.2f} (target <= {WITHIN}): {'met' if out['met'] else 'not met'} -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
