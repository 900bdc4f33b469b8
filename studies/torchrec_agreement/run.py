#!/usr/bin/env python
"""Measurement campaign (runs alone): on the search benchmark's held-out pool tasks, every
method's plan measured by shardlab's measured evaluator and by real TorchRec training steps,
each in paired rounds (studies.torchrec_agreement.agreement), into a crash-safe store; then
results/torchrec_agreement.{json,md}: rank correlation per task and the pairs of plans the two
evaluators order oppositely, with what tells those plans apart.

    .venv/bin/python studies/torchrec_agreement/run.py --store runs/cpu/agreement.db [--tasks 2]
        [--settings 4x10-60] [--rounds 5] [--steps 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab import constants as C  # noqa: E402
from shardlab.workflows.benchmark import benchmark_tasks  # noqa: E402
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from shardlab.measure.store import SampleStore  # noqa: E402
from studies.common.methods import TABLE_WISE, split_methods  # noqa: E402
from studies.torchrec_agreement.agreement import KIND, agreement, measure_agreement  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = [*C.BASELINE_METHODS, TABLE_WISE, "neuroshard"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--tasks", type=int, default=2, help="benchmark tasks per setting")
    ap.add_argument("--settings", default="4x10-60")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated sharder specs")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--name", default="torchrec_agreement", help="report file stem under --out")
    args = ap.parse_args()
    tasks = benchmark_tasks(args.settings.split(","), args.tasks, seed=0)
    labelled = [(f"{name}:{k % args.tasks}", t) for k, (name, t) in enumerate(tasks)]
    added = measure_agreement(args.store, labelled, split_methods(args.methods), rounds=args.rounds, steps=args.steps)
    print(f"agreement: {added} tasks measured into {args.store}")
    with SampleStore(args.store) as store:
        samples = list(store.samples(KIND))
    result = agreement(samples)
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "environment": environment("cpu"),
              "command": " ".join(sys.argv), "rounds": args.rounds, "steps": args.steps, **result}
    out = Path(args.out)
    write_json_atomic(out / f"{args.name}.json", report)
    write_text_atomic(out / f"{args.name}.md", markdown(report))
    return 0


def markdown(r: dict) -> str:
    """The report's page."""
    lines = ["# shardlab's measured evaluator against real TorchRec training steps", "",
             f"Made {r['date']} by `{r['command']}`. Every plan of a task measured twice on this CPU, each in "
             f"{r['rounds']} paired, interleaved rounds: `measured:cpu` (each device's fused fbgemm op, then gloo "
             f"all-to-alls; plan cost = slowest device) and `measured:torchrec-cpu` ({r['steps']} training steps per "
             "round in TorchRec's DistributedModelParallel, fused kernel, gloo ranks; plan cost = median step of the "
             "slowest rank). Nothing simulated.", "",
             f"Mean Spearman over tasks: **{r['mean_spearman']:.3f}**; pairs of plans ordered oppositely with at "
             f"least one significant verdict: **{r['disagreeing_pairs']} of {r['pairs']}**.", "",
             "| task | tables x GPUs | plans | Spearman | measured ms (min-max, spread) | "
             "TorchRec step ms (min-max, spread) |", "|---|---|---|---|---|---|"]
    for t in r["tasks"]:
        m, q = list(t["measured_ms"].values()), list(t["torchrec_ms"].values())
        lines.append(f"| {t['label']} | {t['tables']} x {t['ngpu']} | {t['plans']} | {t['spearman']:.3f} | "
                     f"{min(m):.1f}-{max(m):.1f} (x{max(m) / min(m):.2f}) | {min(q):.1f}-{max(q):.1f} "
                     f"(x{max(q) / min(q):.2f}) |")
    cores = os.cpu_count() or 1
    shared = any(t["ngpu"] > cores for t in r["tasks"])
    lines += ["", "## Why they differ here", "",
              "Spread = slowest plan / fastest plan of a task. The measured evaluator times each device's fused op "
              "alone (as on G independent GPUs), so the plan with the busiest device loses clearly."]
    if shared:
        lines[-1] += (f" TorchRec's step runs all G ranks at once; on this {cores}-core CPU more ranks than cores "
                      "share them, so each rank's step also waits for cores the other ranks use and its time follows "
                      "the *total* work of all ranks -- nearly the same for every plan of a task -- plus input "
                      "distribution and per-step overhead no plan changes. Plans spread far less under TorchRec "
                      "here, and most disagreements are the measured evaluator's significant gaps that TorchRec on "
                      "shared cores cannot see. This is the likely cause, not a proven one (compare "
                      "`torchrec_agreement_2ranks.md`, one rank per core).")
    else:
        lines[-1] += (f" Here every rank had a core of this {cores}-core CPU, so TorchRec's step is not "
                      "flattened by shared cores; remaining differences come from what TorchRec's step adds "
                      "(input distribution of every lookup, output all-to-all, framework overhead) and from noise "
                      "between plans that lie close together.")
    lines[-1] += (" Whether the two evaluators agree on GPUs is not measured yet (it needs a multi-GPU host).")
    lines += ["", "## Where they disagree", "",
              "Ratio a / b and verdict under each evaluator; facts: shards, column splits, and the busiest rank's "
              "tables and lookups per sample (TorchRec's input distribution and per-shard work scale with these; "
              "shardlab's measured evaluator times one fused op per device and an all-to-all of pooled outputs).", "",
              "| task | a | b | measured a/b | TorchRec a/b | a: shards, splits, busiest tables, lookups | "
              "b: shards, splits, busiest tables, lookups |", "|---|---|---|---|---|---|---|"]

    def facts(f):
        return f"{f['shards']}, {f['splits']}, {f['busiest_tables']}, {f['busiest_lookups_per_sample']:.0f}"

    for t in r["tasks"]:
        for p in t["disagreements"]:
            lines.append(f"| {t['label']} | {p['a']} | {p['b']} | {p['measured']['ratio']:.3f} "
                         f"{p['measured']['verdict'] or '-'} | {p['torchrec']['ratio']:.3f} {p['torchrec']['verdict'] or '-'} "
                         f"| {facts(t['facts'][p['a']])} | {facts(t['facts'][p['b']])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
