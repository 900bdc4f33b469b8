#!/usr/bin/env python
"""Every sharder on tasks with tables larger than a device, built from interface fields only,
measured in paired rounds on this machine; run it alone (it times).

    .venv/bin/python studies/oversized/run.py [--per-family 2] [--first-task 0] [--rounds 8] [--sittings 2]
    .venv/bin/python studies/oversized/run.py --report results/oversized-<UTC>.jsonl.gz   # measures nothing
    .venv/bin/python studies/oversized/run.py --summary    # reports/oversized.md over every kept run

1. Draws ``--per-family`` tasks of every development family, indices ``--first-task`` on
   (``tasks.py``; a new index range is a new draw of tasks).
2. Plans each with every method of :data:`METHODS` at its shipped defaults for the ``cpu``
   profile (``sharder_for(method, "cpu")``); a method that refuses a task (one-line error) is
   recorded as skipped -- the question is whether any does.
3. Measures the task's plans together: ``MeasuredEvaluator("cpu", rounds, sittings, seed,
   reference=None)``, so each verdict is against the best heuristic, picked in a separate
   selection sitting. The same rounds are then judged against ``torchrec_free``, named
   (:func:`~shardlab.evaluate.reference.compare_to_reference`): no choice is made on them.
4. Appends the task's record (task, plans, skips, both sets of Evaluation JSON) to
   ``results/oversized-<UTC>.jsonl`` as soon as it is done and rewrites the ``.md`` beside it.
   Every single measurement is journalled as it is made (``.journal.jsonl``); both are stored
   gzipped (``.jsonl.gz``, the same lines) once the run has finished. A run never
   writes over an earlier one.

The targets the report checks: NeuroShard faster than or equivalent to ``torchrec_free`` on >= 90%
of tasks; DreamShard and AutoShard faster than or equivalent to the best heuristic on >= 60%.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


from shardlab import constants as C  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.evaluate import MeasuredEvaluator  # noqa: E402
from shardlab.evaluate.evaluation import Evaluation  # noqa: E402
from shardlab.evaluate.reference import compare_to_reference  # noqa: E402
from shardlab.io import write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment, get_profile  # noqa: E402
from shardlab.search import run_sharder, sharder_for  # noqa: E402
from shardlab.search.row_wise import oversized  # noqa: E402
from studies.common.records import (add_run_options, measure_run, new_run, read_run, run_name,  # noqa: E402
                                    run_or_report, run_paths)
from studies.oversized.tasks import study_tasks  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PROFILE = "cpu"

#: The five heuristics, TorchRec's planner with row-wise shards, NeuroShard, DreamShard, AutoShard.
METHODS = C.HEURISTIC_METHODS + ("torchrec_free", "neuroshard", "dreamshard", "autoshard")

#: (method, reference, target share of tasks "faster or equivalent"); reference ``best`` = the best
#: heuristic as the evaluator picks it in its selection sitting.
TARGETS = (("neuroshard", "torchrec_free", 0.9), ("dreamshard", "best", 0.6), ("autoshard", "best", 0.6))


def measure_task(task: Any, methods: Sequence[str], rounds: int, sittings: int, seed: int,
                 journal: str | None = None) -> dict[str, Any]:
    """One task's record: plans, skips, Evaluations against the best heuristic and against
    ``torchrec_free`` (module docstring); every measurement is appended to ``journal`` as made."""
    plans, skipped = {}, {}
    for m in methods:
        try:
            plans[m] = run_sharder(sharder_for(m, PROFILE), task, seed)
        except ShardlabError as e:
            skipped[m] = str(e)
    evs = MeasuredEvaluator(get_profile(PROFILE), rounds=rounds, sittings=sittings, seed=seed, reference=None,
                            lower_bound=False, progress=False, journal=journal).evaluate(task, plans)
    named = compare_to_reference(evs, "torchrec_free", seed=seed) if "torchrec_free" in evs else {}
    return {"kind": "task", "task": task.to_dict(), "oversized": [task.tables[i].name for i in oversized(task)],
            "plans": {m: p.to_dict() for m, p in plans.items()}, "skipped": skipped,
            "evaluations": {m: e.to_dict() for m, e in evs.items()},
            "vs_torchrec_free": {m: e.to_dict() for m, e in named.items()}}


def _verdict(rec: Mapping[str, Any], method: str, reference: str) -> tuple[str, float | None]:
    """(verdict or 'skipped' / 'reference', ratio) of ``method`` in a task record."""
    if method in rec["skipped"]:
        return "skipped", None
    evs = rec["evaluations"] if reference == "best" else rec["vs_torchrec_free"]
    if method not in evs:
        return "skipped", None
    comp = Evaluation.from_dict(evs[method]).comparison
    if comp is None:
        return "inconclusive", None
    if comp.reference == method:
        return "reference", 1.0
    return comp.verdict or "inconclusive", comp.ratio


OUTCOMES = ("faster", "equivalent", "slower", "inconclusive", "skipped")


def tally(records: Sequence[Mapping[str, Any]], method: str, ref: str, target: float) -> dict[str, Any]:
    """``method`` against ``ref`` (``best`` or ``torchrec_free``) over ``records``: tasks per
    outcome of :data:`OUTCOMES` (a task where it was itself the reference is not counted),
    ``judged`` tasks, ``good`` (faster or equivalent) and whether ``target`` (a share) is ``met``."""
    said = [_verdict(r, method, ref)[0] for r in records]
    out: dict[str, Any] = {v: said.count(v) for v in OUTCOMES}
    out["judged"] = sum(out[v] for v in OUTCOMES)
    out["good"] = out["faster"] + out["equivalent"]
    out["met"] = bool(out["judged"]) and out["good"] / out["judged"] >= target
    return out


def report(header: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    """The run's markdown: the targets met or not, then every task's verdicts."""
    s = header["settings"]
    lines = [f"# Tables larger than a device, measured: run `{header['run']}`", "",
             f"{len(records)} tasks (development families, interface fields only, at least one table larger than "
             f"a device), profile `{header['profile']}`, {s['rounds']} paired rounds x {s['sittings']} sittings, "
             f"equivalence margin {s['margin']:.0%}. `best` = the best heuristic, picked by the evaluator in a "
             "separate selection sitting; `torchrec_free` is named, so nothing is chosen on the judged rounds.", "",
             "| method | against | faster | equivalent | slower | inconclusive | skipped | faster or equivalent | target |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for method, ref, target in TARGETS:
        k = tally(records, method, ref, target)
        share = k["good"] / k["judged"] if k["judged"] else float("nan")
        lines.append(f"| `{method}` | {ref} | " + " | ".join(str(k[v]) for v in OUTCOMES)
                     + f" | {k['good']}/{k['judged']} ({share:.0%}) | >= {target:.0%}: "
                     + f"{'met' if k['met'] else 'not met'} |")
    lines += ["", "A method that was itself the reference of a task (the best heuristic) is left out of that "
              "task's count.", "", "## Tasks", "",
              "| task | tables | cap GB | larger than a device | best heuristic | neuroshard vs torchrec_free | "
              "dreamshard vs best | autoshard vs best | skipped |", "| --- | ---: | ---: | --- | --- | --- | --- | --- | --- |"]
    for r in records:
        best = next((e["reference"] for e in r["evaluations"].values() if e.get("reference")), "-")

        def cell(method: str, ref: str, rec: Mapping[str, Any] = r) -> str:
            v, ratio = _verdict(rec, method, ref)
            return v if ratio is None else f"x{ratio:.3f} {v}"

        lines.append(f"| `{r['task']['name']}` | {len(r['task']['tables'])} | {r['task']['mem_cap_gb']:.3f} | "
                     f"{', '.join(r['oversized'])} | `{best}` | {cell('neuroshard', 'torchrec_free')} | "
                     f"{cell('dreamshard', 'best')} | {cell('autoshard', 'best')} | {', '.join(r['skipped']) or '-'} |")
    return "\n".join(lines) + "\n"


def summary(paths: Sequence[Path]) -> str:
    """The markdown over every kept run (``reports/oversized.md``): per run, the decision state
    it measured and each target's count."""
    lines = ["# Tables larger than a device: every kept run of `studies/oversized`", "",
             "Regenerate: `.venv/bin/python studies/oversized/run.py --summary` (measures nothing; reads every "
             "`studies/oversized/results/oversized-*.jsonl.gz`). Each run: 2 tasks of each development family (interface "
             "fields only, at least one table larger than a device, 4 GPUs), all sharders at their `cpu` defaults, "
             "8 paired rounds x 2 sittings, four verdicts with a 5% margin. Targets: NeuroShard faster or equivalent "
             "to `torchrec_free` on >= 90% of tasks; DreamShard and AutoShard to the best heuristic on >= 60%. "
             "The runs differ in the code they measured (the commit in each header; the study README says which "
             "decision each run led to) and in their tasks (`first_task`).", "",
             "| run | tasks (first index) | git | " + " | ".join(f"`{m}` vs {ref}: faster / equiv / slower / inconcl"
                                                            for m, ref, _ in TARGETS) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in TARGETS) + " |"]
    for path in paths:
        header, records = read_run(path)
        git = str(header["environment"].get("git", "?"))[:7]
        cells = []
        for m, ref, target in TARGETS:
            k = tally(records, m, ref, target)
            cells.append(f"{k['faster']} / {k['equivalent']} / {k['slower']} / {k['inconclusive']} "
                         f"({k['good']}/{k['judged']}, {'met' if k['met'] else 'not met'})")
        lines.append(f"| `{run_name(path)}` | {len(records)} ({header['settings'].get('first_task', 0)}) | `{git}` | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run(per_family: int, rounds: int, sittings: int, out: Path, progress: bool = True, first: int = 0) -> Path:
    """Measure the study's tasks (module docstring); returns the run's packed ``.jsonl.gz`` path."""
    run_id, jsonl = new_run(out, "oversized-")
    header = {"kind": "header", "run": run_id, "profile": PROFILE, "environment": environment("cpu"),
              "settings": {"methods": list(METHODS), "per_family": per_family, "first_task": first, "rounds": rounds,
                           "sittings": sittings,
                           "margin": C.EQUIVALENCE_MARGIN}}
    journal = str(out / f"{run_id}.journal.jsonl")
    return measure_run(jsonl, header, study_tasks(per_family, first),
                       lambda i, task: measure_task(task, METHODS, rounds, sittings, seed=first * 1000 + i,
                                                    journal=journal),
                       report, "oversized tasks", progress)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-family", type=int, default=2, help="tasks per development family (default 2)")
    ap.add_argument("--first-task", type=int, default=0, help="first task index per family (default 0)")
    add_run_options(ap, rounds=8, results=RESULTS)
    ap.add_argument("--summary", action="store_true",
                    help="write reports/oversized.md over every kept run; measures nothing")
    args = ap.parse_args(argv)
    if args.summary:
        target = Path(__file__).resolve().parents[2] / "reports" / "oversized.md"
        write_text_atomic(target, summary(run_paths(args.out, "oversized-")))
        print(target)
        return 0
    return run_or_report(args, report, lambda: run(args.per_family, args.rounds, args.sittings, Path(args.out),
                                                   first=args.first_task))


if __name__ == "__main__":
    raise SystemExit(main())
