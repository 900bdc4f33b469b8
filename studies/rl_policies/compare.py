#!/usr/bin/env python
"""Benchmark (not a test): RL policy files against each other and two references, MEASURED on
this machine (every plan of a task through `evaluate.measure_plans`: real fused fbgemm ops,
gloo all-to-alls between G real ranks), on held-out tasks (pool test tables). Writes
results/policy_comparison.{json,md}.

    .venv/bin/python studies/rl_policies/compare.py --dreamshard old=a.pt new=b.pt --autoshard old=c.pt new=d.pt
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.data.tasks import generate_task  # noqa: E402
from shardlab.evaluate import measure_plans  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from shardlab.search import get_sharder, run_sharder  # noqa: E402
from shardlab.search.autoshard import AutoShardAgent  # noqa: E402
from shardlab.search.dreamshard import DreamShardAgent  # noqa: E402
from studies.common.methods import TABLE_WISE  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
REFERENCES = ("lookup_greedy", TABLE_WISE)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dreamshard", nargs="*", default=[], help="LABEL=PATH of DreamShard policies")
    ap.add_argument("--autoshard", nargs="*", default=[], help="LABEL=PATH of AutoShard policies")
    ap.add_argument("--settings", nargs="*", default=["4x30", "8x50"], help="GxN: G devices, N tables")
    ap.add_argument("--tasks", type=int, default=3, help="held-out tasks per setting")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    agents = {f"dreamshard[{s.split('=')[0]}]": DreamShardAgent.load(s.split("=", 1)[1]) for s in args.dreamshard}
    agents.update({f"autoshard[{s.split('=')[0]}]": AutoShardAgent.load(s.split("=", 1)[1]) for s in args.autoshard})
    rows = []
    for setting in args.settings:
        g, n = (int(x) for x in setting.split("x"))
        for k in range(args.tasks):
            task = generate_task(ntables=n, ngpu=g, batch_size=4096, seed=700 + k, split="test")
            plans = {m: run_sharder(get_sharder(m), task) for m in REFERENCES}
            plans.update({m: a.plan(task) for m, a in agents.items()})
            evs = measure_plans(task, plans, "cpu", lower_bound=False, progress=False)
            rows.append({"setting": setting, "task_seed": 700 + k, **{m: e.cost_ms for m, e in evs.items()}})
            print(setting, k, " ".join(f"{m} {e.cost_ms:.2f}" for m, e in evs.items()), flush=True)
    methods = [*REFERENCES, *agents]
    means = {s: {m: float(np.mean([r[m] for r in rows if r["setting"] == s])) for m in methods} for s in args.settings}
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "environment": environment("cpu"),
              "command": " ".join(sys.argv), "policies": {"dreamshard": args.dreamshard, "autoshard": args.autoshard},
              "source": "measured:cpu", "rows": rows, "mean_cost_ms": means}
    out = Path(args.out)
    write_json_atomic(out / "policy_comparison.json", report)
    lines = ["# RL policies, measured", "", f"{report['date']}; {report['environment']['hardware']}; profile cpu "
             f"(batch 4096); {args.tasks} held-out tasks per setting (pool test tables, memory cap 4 GB); every plan "
             "measured once (fused fbgemm ops, gloo all-to-alls between G ranks, waiting included), so single "
             "numbers carry this VM's noise (~5-25%).", "", f"    {report['command']}", "",
             "| setting | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for s in args.settings:
        lines.append(f"| {s} | " + " | ".join(f"{means[s][m]:.2f}" for m in methods) + " |")
    (out / "policy_comparison.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
