#!/usr/bin/env python
"""Run the user guide's `shardlab compare` example (docs/user_guide.md, "Costing and comparing
plans": 24 held-out pool tables over 4 GPUs at batch 4096, three plans, 8 paired rounds) with the
shipped CLI and keep its raw rounds: ``results/compare_example-<UTC time>.json`` (a new file per
run, never overwritten) with every command, what `compare` printed, the Evaluations it wrote
(``--out``: per-round costs ``rounds_ms``, median, interval, ratio, verdict), its journal of
every measurement (``--journal``: warm-up and selection rounds included), the task, the plans,
the wall time, the load average and the provenance.

    .venv/bin/python studies/quoted_figures/compare_example.py
    .venv/bin/python studies/quoted_figures/compare_example.py --show results/compare_example-<time>.json

``--show`` measures nothing: it prints `compare`'s plan lines again from a record's stored rounds
(each comparison recomputed from ``rounds_ms``) and says whether they match the printed ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.cli.evaluate import comparison_line  # noqa: E402
from shardlab.evaluate.evaluation import Evaluation  # noqa: E402
from shardlab.io import read_json, write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from studies.quoted_figures.provenance import compare_again, new_record, package_diff, sitting_log_sd  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SHARDLAB = str(Path(sys.executable).with_name("shardlab"))

#: The example's commands, in order, run in a fresh folder (``shardlab`` = the venv's CLI).
COMMANDS = [
    "shardlab tasks --pool dlrm-synth --ntables 24 --ngpu 4 --mem-gb 0.5 --batch-size 4096 --seed 1001 --out task.json",
    "shardlab shard task.json --method lookup_greedy --out lookup_greedy.json",
    "shardlab shard task.json --method random --out random.json",
    "shardlab shard task.json --method 'neuroshard[columns=false]' --profile cpu --out neuroshard_tw.json",
    "shardlab compare task.json lookup_greedy.json random.json neuroshard_tw.json --measure --rounds 8 "
    "--out evaluations.json --journal journal.jsonl",
]


def run(out_dir: Path) -> Path:
    """Run the commands once, write the record, return its path."""
    made, path = new_record(out_dir, "compare_example")
    diff_before = package_diff()
    steps = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for command in COMMANDS:
            argv = [SHARDLAB, *shlex.split(command)[1:]]
            t0 = time.perf_counter()
            done = subprocess.run(argv, cwd=work, capture_output=True, text=True)
            steps.append({"command": command, "seconds": time.perf_counter() - t0, "rc": done.returncode,
                          "stdout": done.stdout.splitlines()})
            print(f"$ {command}\n{done.stdout}", end="", flush=True)
            if done.returncode != 0:
                raise SystemExit(f"failed ({done.returncode}): {command}\n{done.stderr}")
        files = {name: read_json(work / name) for name in
                 ("task.json", "lookup_greedy.json", "random.json", "neuroshard_tw.json", "evaluations.json")}
        journal = [json.loads(line) for line in (work / "journal.jsonl").read_text().splitlines() if line.strip()]
    evaluations = files.pop("evaluations.json")
    first = Evaluation.from_dict(evaluations[0])
    env = environment("cpu")
    record = {
        "what": "docs/user_guide.md's `shardlab compare` example, run with the shipped CLI",
        "made": made.isoformat(timespec="seconds"), "seconds": sum(s["seconds"] for s in steps),
        "load_average_1_5_15_min": {"before": list(load_before), "after": list(os.getloadavg())},
        "git": env.get("git"), "environment": env, "package_diff": diff_before,
        "package_diff_unchanged_during_run": package_diff().get("sha256") == diff_before.get("sha256"),
        "steps": steps,
        "printed": steps[-1]["stdout"], "compare_seed": 0, "sitting_log_sd": sitting_log_sd(first),
        "task": files.pop("task.json"), "plans": files, "evaluations": evaluations, "journal": journal,
    }
    write_json_atomic(path, record)
    return path


def show(path: Path) -> int:
    """Print `compare`'s plan lines again from the stored rounds; 0 when they match."""
    rec = read_json(path)
    keys = [line.split()[0] for line in rec["printed"][1:]]
    evs = {k: Evaluation.from_dict(d) for k, d in zip(keys, rec["evaluations"])}
    reference = next(iter(evs.values())).comparison.reference
    margin = next(e.comparison.margin for e in evs.values() if e.comparison.margin is not None)
    again = compare_again(evs, reference, rec["compare_seed"], margin, rec["sitting_log_sd"])
    lines = [comparison_line(k, e) for k, e in again.items()]
    for line in lines:
        print(line)
    same = lines == rec["printed"][1:]
    print(f"{'matches' if same else 'DIFFERS FROM'} the lines printed when it ran ({rec['made']})")
    return 0 if same else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--show", default=None, metavar="RECORD", help="print a record's lines from its rounds")
    args = ap.parse_args()
    if args.show:
        return show(Path(args.show))
    path = run(Path(args.out).resolve())
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
