#!/usr/bin/env python
"""The 14-table Ali-CCP task on 2 GPUs with three of its plans only: do the two modes of
`neuroshard` against `torchrec` (about 0.85 and 1.07, README) appear outside set 1's nine-plan
rounds? Measures (run it alone): 4 fixed sittings x 8 paired rounds of `torchrec`, `neuroshard`
and `dreamshard` (the plans of run set1-20261202T132237Z), reference `torchrec`, profile cpu,
journaled to ``--journal`` (``--all-plans``: the run's nine plans, as set 1 measured them;
``--lead K``: K untimed passes of an op before each timed one); prints each sitting's median ratio to `torchrec` and the median of
`neuroshard`'s device-0 compute (fw + bw ms) per sitting, and the seconds per timed plan-round
(every overhead included). One process per call; call it
several times for several processes.

    .venv/bin/python studies/set1_development/three_plans.py --journal /tmp/three.jsonl
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from shardlab import constants as C  # noqa: E402
from shardlab.evaluate.measured import MeasuredEvaluator  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from shardlab.tables import Task  # noqa: E402

RUN = Path(__file__).resolve().parent / "results" / "set1-20261202T132237Z.jsonl.gz"
PLANS = ("torchrec", "neuroshard", "dreamshard")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--journal", required=True, help="JSON-lines file every measurement is appended to")
    ap.add_argument("--all-plans", action="store_true", help="all nine of the run's plans, as set 1 measured them")
    ap.add_argument("--lead", type=int, default=C.SWEEP_LEAD_PASSES,
                    help="untimed passes of an op before each timed one (constants.SWEEP_LEAD_PASSES)")
    ap.add_argument("--sittings", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0, help="the evaluator's seed (round and sweep orders)")
    ap.add_argument("--no-pin", action="store_true", help="pin neither the ranks nor the measuring process to cores")
    ap.add_argument("--spacer", type=int, default=C.OP_SPACER_BYTES,
                    help="most bytes allocated before each op is built (constants.OP_SPACER_BYTES)")
    ap.add_argument("--in-process", action="store_true",
                    help="every sitting in this process, as before sittings had processes of their own")
    args = ap.parse_args(argv)
    C.SWEEP_LEAD_PASSES, C.OP_SPACER_BYTES = args.lead, args.spacer
    rec = next(r for r in map(json.loads, gzip.open(RUN, "rt")) if r["kind"] == "task" and "-14x2-" in r["task"]["name"])
    task = Task.from_dict(rec["task"])
    names = list(rec["plans"]) if args.all_plans else PLANS
    plans = {m: Plan.from_dict(rec["plans"][m]) for m in names}
    ev = MeasuredEvaluator(profile="cpu", rounds=8, sittings=args.sittings, reference="torchrec", progress=False,
                           seed=args.seed, pin=not args.no_pin, fresh_process=not args.in_process, journal=args.journal)
    out = ev.evaluate(task, plans)
    ref = out["torchrec"].sittings
    for m in PLANS[1:]:
        print(m, "median ratio per sitting:",
              [round(float(np.median(np.divide(a, b))), 3) for a, b in zip(out[m].sittings, ref)])
    dev0: dict = {}
    for r in map(json.loads, open(args.journal)):
        if r.get("item") == "neuroshard" and isinstance(r.get("round"), int) and r["round"] >= 0:
            dev0.setdefault(r["sitting"], []).append(float(np.sum(np.array(r["ms"])[0, :2])))
    print("neuroshard device-0 compute ms per sitting:", {k: round(float(np.median(v)), 2) for k, v in dev0.items()})
    timed = sum(1 for r in ev.measured_ if r[0] >= 0 and r[1] in plans)
    print(f"measuring took {ev.seconds_:.1f} s for {timed} timed plan-rounds "
          f"({ev.seconds_ / timed:.3f} s per plan-round, warm-ups and rank starts included)")
    print("host:", environment("cpu").get("hardware"))     # the VM's host CPU changes from day to day


if __name__ == "__main__":
    main()
