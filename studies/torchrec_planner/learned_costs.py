#!/usr/bin/env python
"""TorchRec's planner with shardlab's learned costs (``torchrec[costs=default]``: its enumerator,
proposers and partitioner, every shard's perf from ``ShardlabPerfEstimator``) against TorchRec's
planner with its own costs (``torchrec``) and NeuroShard, on held-out tasks. Run it alone (it
times).

    .venv/bin/python studies/torchrec_planner/learned_costs.py [--per-family 2] [--rounds 8] [--sittings 2]
    .venv/bin/python studies/torchrec_planner/learned_costs.py --report results/learned_costs-<UTC>.jsonl.gz

1. Tasks: ``--per-family`` tasks of every development family (``studies.common.heldout``: public
   table sets no cost model trained on), 4 devices of 4 GB, the ``cpu`` profile's batch.
2. Every method plans for the ``cpu`` profile (the models searched with: its shipped ones,
   ``neuroshard_broad``); TorchRec's planner allows table- and column-wise shards.
3. Judged two ways: by the analytic ``cpu`` model (fitted to this machine's measured kernels and
   gloo all-to-alls: a labelled model, not the one two of the methods searched with), and
   measured here in ``--rounds`` paired rounds x ``--sittings`` sittings against ``torchrec``
   (named reference). Every task's record is appended to ``results/learned_costs-<UTC>.jsonl``
   as it completes (measurements journalled as made); the ``.md`` beside it is rewritten.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


from shardlab import constants as C  # noqa: E402
from shardlab.costmodel.bundle import load_bundle  # noqa: E402
from shardlab.data.model_families import FAMILY_SETS  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.evaluate import MeasuredEvaluator, estimate_plan  # noqa: E402
from shardlab.evaluate.evaluation import Evaluation  # noqa: E402
from shardlab.measure.hardware import environment, get_profile  # noqa: E402
from shardlab.search import run_sharder, sharder_for  # noqa: E402
from studies.common.heldout import heldout_tasks  # noqa: E402
from studies.common.records import add_run_options, measure_run, new_run, run_or_report  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PROFILE = "cpu"
REFERENCE = "torchrec"
METHODS = (REFERENCE, "torchrec[costs=default]", "neuroshard")
#: The task shape: devices, GB per device, rows cap per table.
NGPU, MEM_GB, MAX_ROWS = 4, 4.0, 2_000_000
JUDGE = "analytic"


def measure_task(task: Any, rounds: int, sittings: int, seed: int, journal: str) -> dict[str, Any]:
    """One task's record: plans (search seconds included), the judge's predicted costs, and the
    measured Evaluations against ``torchrec``."""
    plans, skipped = {}, {}
    for m in METHODS:
        try:
            plans[m] = run_sharder(sharder_for(m, PROFILE), task, seed)
        except ShardlabError as e:
            skipped[m] = str(e)
    judge = load_bundle(JUDGE, PROFILE)
    judged = {m: estimate_plan(task, p, judge, lower_bound=False).cost_ms for m, p in plans.items()}
    evs = MeasuredEvaluator(get_profile(PROFILE), rounds=rounds, sittings=sittings, seed=seed,
                            reference=REFERENCE if REFERENCE in plans else None, lower_bound=False,
                            progress=False, journal=journal).evaluate(task, plans)
    return {"kind": "task", "task": task.to_dict(), "plans": {m: p.to_dict() for m, p in plans.items()},
            "skipped": skipped, "judge": judge.source, "judged_ms": judged,
            "evaluations": {m: e.to_dict() for m, e in evs.items()}}


def _cell(rec: Mapping[str, Any], m: str) -> str:
    if m in rec["skipped"]:
        return "skipped"
    ev = Evaluation.from_dict(rec["evaluations"][m])
    comp = ev.comparison
    judged = rec["judged_ms"][m] / rec["judged_ms"][REFERENCE] if REFERENCE in rec["judged_ms"] else None
    model = "" if judged is None else f"model x{judged:.3f}; "
    if comp is None or comp.reference == m:
        return f"{model}measured {ev.cost_ms:.1f} ms (reference)"
    lo, hi = comp.ratio_ci95 or (float("nan"), float("nan"))
    return f"{model}measured x{comp.ratio:.3f} [{lo:.3f}, {hi:.3f}] {comp.verdict or 'inconclusive'}"


def report(header: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    """The run's markdown: one row per task, a tally per method."""
    s, env = header["settings"], header["environment"]
    lines = [f"# TorchRec's planner with shardlab's learned costs, run {header['run']}", "",
             f"{env['hardware']}; torch {env['torch']}, git {env['git']}. {len(records)} held-out tasks "
             f"({NGPU} devices of {MEM_GB:g} GB), {s['rounds']} paired rounds x {s['sittings']} sittings, "
             f"reference `{REFERENCE}` (named). `model`: cost ratio to `{REFERENCE}` under "
             f"`{records[0]['judge'] if records else JUDGE}` (a labelled analytic model fitted to this machine's "
             "measurements, not a measurement); `measured`: median paired ratio, 95% interval, verdict "
             f"(margin {s['margin']:.0%}).", "",
             "| task | " + " | ".join(f"`{m}`" for m in METHODS[1:]) + " | search s (" + ", ".join(METHODS) + ") |",
             "|---|" + "---|" * len(METHODS)]
    for r in records:
        secs = ", ".join(f"{r['plans'][m]['search_seconds']:.2f}" if m in r["plans"] else "-" for m in METHODS)
        lines.append(f"| {r['task']['name']} | " + " | ".join(_cell(r, m) for m in METHODS[1:]) + f" | {secs} |")
    lines += ["", "| method | faster | equivalent | slower | inconclusive | model-judged cheaper |", "|---|---|---|---|---|---|"]
    for m in METHODS[1:]:
        said = [Evaluation.from_dict(r["evaluations"][m]).comparison for r in records if m in r["evaluations"]]
        v = [c.verdict if c is not None else "inconclusive" for c in said]
        cheaper = sum(1 for r in records if m in r["judged_ms"] and r["judged_ms"][m] < r["judged_ms"][REFERENCE])
        lines.append(f"| `{m}` | {v.count('faster')} | {v.count('equivalent')} | {v.count('slower')} | "
                     f"{v.count('inconclusive')} | {cheaper}/{len(records)} |")
    return "\n".join(lines) + "\n"


def run(per_family: int, rounds: int, sittings: int, out: Path, progress: bool = True) -> Path:
    """Measure the study's tasks (module docstring); returns the run's packed ``.jsonl.gz`` path."""
    run_id, jsonl = new_run(out, "learned_costs-")
    batch = get_profile(PROFILE).batch_size
    header = {"kind": "header", "run": run_id, "profile": PROFILE, "environment": environment("cpu"),
              "settings": {"methods": list(METHODS), "per_family": per_family, "rounds": rounds, "sittings": sittings,
                           "margin": C.EQUIVALENCE_MARGIN, "ngpu": NGPU, "mem_gb": MEM_GB, "max_rows": MAX_ROWS}}
    tasks = [t for s in FAMILY_SETS for t in heldout_tasks(s, per_family, NGPU, batch, MEM_GB, MAX_ROWS)]
    journal = str(out / f"{run_id}.journal.jsonl")
    return measure_run(jsonl, header, tasks, lambda i, task: measure_task(task, rounds, sittings, seed=i,
                                                                         journal=journal),
                       report, "held-out tasks", progress)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-family", type=int, default=2, help="tasks per development family (default 2)")
    add_run_options(ap, rounds=8, results=RESULTS)
    args = ap.parse_args(argv)
    return run_or_report(args, report, lambda: run(args.per_family, args.rounds, args.sittings, Path(args.out)))

if __name__ == "__main__":
    raise SystemExit(main())
