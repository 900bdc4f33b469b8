#!/usr/bin/env python
"""Measurement campaign (runs alone): plans on the held-out model families, every task's plans
measured together in paired interleaved rounds (studies.common.heldout), into a crash-safe
store (resumable), then exported as a shipped dataset with PROVENANCE.md.

    .venv/bin/python studies/heldout_search/measure.py --store runs/cpu/heldout.db --out datasets/cpu_heldout \
        [--tasks 3] [--rounds 3] [--ngpu 4] [--max-rows 2000000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.data.tasks import datasets_dir  # noqa: E402
from shardlab.io import write_text_atomic  # noqa: E402
from shardlab.measure.store import export_store  # noqa: E402
from studies.common.heldout import METHODS, POOL_SET, SETS, measure_heldout  # noqa: E402

#: Where each kind of held-out set's tables come from (PROVENANCE.md names only the sets measured).
FAMILY_SOURCE = ("`datasets/heldout_models/` (public configs; lookups an assumed Zipf(1.05); rows capped "
                 "for this CPU, the cap in each table's `source`)")
POOL_SOURCE = "the dlrm-synth pool's test half (`studies.common.heldout.pool_tasks`)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--out", default=None, help="export the store here when done (a datasets/ folder)")
    ap.add_argument("--sets", nargs="+", default=list(SETS[:-1]), choices=SETS,
                    help="held-out sets: model families, or 'pool' (the pool's test tables); default every family")
    ap.add_argument("--tasks", type=int, default=3, help="tasks per held-out set")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ngpu", type=int, default=4)
    ap.add_argument("--max-rows", type=int, default=2_000_000, help="row cap for this CPU (recorded per table)")
    ap.add_argument("--model", default=None, help="bundle every NeuroShard method searches with (default: "
                                                  "each registration's)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS),
                    help="sharder specs whose plans are measured (<spec>+verify<K>: that sharder verified)")
    args = ap.parse_args()
    added = measure_heldout(args.store, sets=args.sets, tasks_per_set=args.tasks, ngpu=args.ngpu, rounds=args.rounds,
                            max_rows=args.max_rows, model=args.model, methods=args.methods)
    print(f"held-out: {added} tasks measured into {args.store}")
    if args.out:
        counts = export_store(args.store, args.out)
        write_text_atomic(Path(args.out) / "PROVENANCE.md", PROVENANCE.format(
            counts=", ".join(f"{k}: {v}" for k, v in counts.items()), cmd=" ".join(sys.argv),
            methods=", ".join(args.methods), sources=sources(args.sets), name=dataset_name(args.out)))
        print(f"exported {counts} -> {args.out}")
    return 0


def sources(sets: list[str]) -> str:
    """Where the tables of the measured ``sets`` come from: the model families', the pool's, or both."""
    families = [s for s in sets if s != POOL_SET]
    if not families:
        return POOL_SOURCE
    return FAMILY_SOURCE + (f" or, for set `{POOL_SET}`, from {POOL_SOURCE}" if POOL_SET in sets else "")


def dataset_name(out: str) -> str:
    """The name ``load_measured`` finds the exported folder ``out`` by (its path under datasets/)."""
    path = Path(out).resolve()
    try:
        return path.relative_to(datasets_dir().resolve()).as_posix()
    except ValueError:
        return path.name


PROVENANCE = """# Measured plans on held-out tasks (`cpu` profile)

Every number was measured on this machine: each task's plans (methods: {methods}) measured together by `MeasuredEvaluator` in paired, interleaved,
shuffled rounds -- real fbgemm TBE ops per device, real gloo all-to-alls between G processes,
forward waiting included. Tables come from {sources}; no
training step sees them. One JSON line per task (kind `heldout_plan`): the task, the plans, their
Evaluations (rounds, medians, 95% intervals); provenance (hardware, versions, date, command,
git revision, campaign settings) in `provenance.json`.

Made by: `{cmd}`

Samples: {counts}. Judge a cost model on them with
`studies.common.heldout.heldout_errors(heldout_samples("{name}"), bundle)`
(`studies/cost_models/accuracy.py --heldout {name}` does, for every shipped bundle).
"""

if __name__ == "__main__":
    raise SystemExit(main())
