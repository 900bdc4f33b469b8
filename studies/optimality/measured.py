#!/usr/bin/env python
"""The exact planner's plans measured on this machine: on small tasks (5 to 12 tables, 2 to 4
ranks), every method's plan for the ``cpu`` profile timed in paired, interleaved rounds over two
sittings; each plan's measured cost, its verdict against the best baseline, and beside it the
exact planner's bound under ``analytic:cpu`` -- the analytic model fitted to this machine's
measurements: a model's bound, labelled so, not a measured one. Run it alone (it times).

    .venv/bin/python studies/optimality/measured.py [--rounds 6] [--sittings 2]
    .venv/bin/python studies/optimality/measured.py --report studies/optimality/results/measured-<UTC>.jsonl.gz   # measures nothing

Each task's record is appended to ``results/measured-<UTC>.jsonl`` when done (every measurement
journalled as it is made in ``.journal.jsonl``) and ``.md`` is rewritten beside it; the finished
run is stored gzipped (``.jsonl.gz``, the same lines).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tqdm.auto import tqdm  # noqa: E402

from shardlab import constants as C  # noqa: E402
from shardlab.data.tasks import generate_task  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.evaluate import MeasuredEvaluator  # noqa: E402
from shardlab.evaluate.evaluation import Evaluation  # noqa: E402
from shardlab.measure.hardware import environment, get_profile  # noqa: E402
from shardlab.search import run_sharder, sharder_for  # noqa: E402
from studies.common.records import append_record, pack_run, rewrite_report  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PROFILE = "cpu"
METHODS = C.BASELINE_METHODS + ("neuroshard", "optimal")
#: (tables, ranks, seed) of the measured tasks: small enough to measure every plan in rounds.
TASKS = ((5, 2, 11), (8, 2, 12), (8, 4, 13), (12, 4, 14))


def measure(n: int, g: int, seed: int, rounds: int, sittings: int, journal: str) -> dict[str, Any]:
    """One task's record: plans, the exact planner's record, measured Evaluations."""
    profile = get_profile(PROFILE)
    task = generate_task(ntables=n, ngpu=g, seed=seed, batch_size=profile.batch_size, name=f"measured-{n}x{g}-s{seed}")
    plans, skipped = {}, {}
    for m in METHODS:
        try:
            plans[m] = run_sharder(sharder_for(m, PROFILE), task, seed)
        except ShardlabError as e:
            skipped[m] = str(e).splitlines()[0]
    evs = MeasuredEvaluator(profile, rounds=rounds, sittings=sittings, seed=seed, progress=False,
                            journal=journal).evaluate(task, plans)
    return {"kind": "task", "task": task.name, "tables": n, "gpus": g, "seed": seed,
            "optimality": plans["optimal"].metadata.get("optimality") if "optimal" in plans else None,
            "plans": {m: p.to_dict() for m, p in plans.items()}, "skipped": skipped,
            "evaluations": {m: e.to_dict() for m, e in evs.items()}}


def markdown(header: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    """The report: per task, each method's measured cost, interval, verdict, and the model bound."""
    env = header["environment"]
    lines = ["# The exact planner's plans, measured (`studies/optimality/measured.py`)", "",
             f"Made {header['date']} on {env.get('hardware')} (torch {env.get('torch')}, git {env.get('git')}); "
             f"profile `{PROFILE}`, {header['rounds']} paired interleaved rounds x {header['sittings']} sittings per task; "
             "verdicts against the best baseline (picked in its own sitting), 5% equivalence margin. "
             "`model bound`: the exact planner's bound under `analytic:cpu`, the analytic model fitted to this machine's "
             "measurements -- a bound on that model's predictions, not on the measured costs.", ""]
    wins = {}
    for r in records:
        o = r.get("optimality") or {}
        lines += [f"## {r['task']} ({r['tables']} tables, {r['gpus']} ranks)", "",
                  f"Exact planner: status `{o.get('status')}`, predicted {o.get('cost_ms', float('nan')):.3f} ms, "
                  f"model bound {o.get('bound_ms', float('nan')):.3f} ms under `{o.get('model')}`.", "",
                  "| method | measured ms | 95% CI | vs best baseline | verdict | predicted / model bound |",
                  "|---|---|---|---|---|---|"]
        for m, d in r["evaluations"].items():
            e = Evaluation.from_dict(d)
            c = e.comparison
            lines.append(f"| {m} | {e.cost_ms:.3f} | " + (f"[{e.ci95_ms[0]:.3f}, {e.ci95_ms[1]:.3f}]" if e.ci95_ms else "-")
                         + f" | {'-' if c is None else f'x{c.ratio:.3f} vs {c.reference}'} | "
                         + f"{'-' if c is None else ('reference' if c.reference == m else c.verdict or '-')} | "
                         + ("-" if m != "optimal" else f"{o.get('cost_ms', 0) / o.get('bound_ms', 1):.4f}") + " |")
        ev = r["evaluations"].get("optimal")
        if ev and ev.get("verdict"):
            wins[ev["verdict"]] = wins.get(ev["verdict"], 0) + 1
        if r["skipped"]:
            lines += ["", "Skipped: " + "; ".join(f"{m}: {w}" for m, w in r["skipped"].items())]
        lines.append("")
    if records:
        lines += ["## The exact planner against the best baseline, measured", "",
                  ", ".join(f"{k} {v}" for k, v in sorted(wins.items())) or "no verdicts", ""]
        ratios = [Evaluation.from_dict(r["evaluations"]["optimal"]).comparison.ratio for r in records
                  if "optimal" in r["evaluations"] and r["evaluations"]["optimal"].get("ratio_to_reference")]
        if ratios:
            lines += [f"Median measured ratio to the best baseline: x{statistics.median(ratios):.3f} over {len(ratios)} tasks.", ""]
    return "\n".join(lines) + "\n"


def write_report(path: Path) -> None:
    """Rewrite ``<name>.md`` beside ``path`` (``.jsonl`` or ``.jsonl.gz``)."""
    rewrite_report(path, markdown)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6, help="paired rounds per sitting")
    ap.add_argument("--sittings", type=int, default=2, help="sittings per task")
    ap.add_argument("--report", default=None, help="rewrite the report of this results file; measure nothing")
    args = ap.parse_args(argv)
    if args.report:
        write_report(Path(args.report))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"measured-{stamp}.jsonl"
    header = {"kind": "header", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "environment": environment(PROFILE), "rounds": args.rounds, "sittings": args.sittings,
              "methods": list(METHODS), "command": "studies/optimality/measured.py " + " ".join(sys.argv[1:])}
    with path.open("a") as f:
        append_record(f, header)
        for n, g, seed in tqdm(TASKS, desc="measured tasks"):
            append_record(f, measure(n, g, seed, args.rounds, args.sittings, str(path.with_suffix(".journal.jsonl"))))
            write_report(path)
    print(f"wrote {pack_run(path)} and {path.with_suffix('.md').name}")


if __name__ == "__main__":
    main()
