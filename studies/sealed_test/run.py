#!/usr/bin/env python
"""The sealed test: every shipped sharder on the sealed tasks, measured in paired rounds. Run
only by its one command, ``bash scripts/sealed_test.sh`` (which calls, with fixed settings):

    .venv/bin/python studies/sealed_test/run.py [--set NAME] [--profile NAME] [--budget DURATION]

1. Reads the manifest of sealed set ``--set`` (default: the newest, ``draw.NEWEST``; the older
   sets stay runnable by name, for the record) and refuses, in one line, a family file whose
   sha256 is not the one recorded at the draw.
2. Builds each sealed task and plans it with every method of :data:`METHODS` at its shipped
   defaults, for the profile it is measured on (``sharder_for(method, profile)``); a method that
   refuses a task (one-line ShardlabError) is recorded as skipped.
3. Measures the task's plans together: ``MeasuredEvaluator(profile, rounds=8, sittings=2,
   seed=<task seed>, reference=None)`` (``sittings`` passed where the evaluator takes it), i.e.
   paired interleaved rounds, each plan's verdict against the task's best baseline. With
   ``--budget`` (per task on average, e.g. ``107s``) the task is measured with a time budget instead
   (``MeasuredEvaluator(budget_s=...)``: sittings of 8 rounds added while a verdict is
   inconclusive, decided plans dropping out, repeated confidence intervals by alpha spending),
   and the report gives
   each verdict's sittings and rounds and why its plan stopped. The run's budget (``--budget``
   x tasks) is shared: each task gets what is left over the tasks left
   (``shardlab.evaluate.sequential.task_budget``), so the time a quickly decided task leaves goes to
   the tasks after it.
4. Appends the task's record (entry, task, plans, skips, Evaluation JSON) to
   ``results/<run>.jsonl`` as soon as the task is done, and rewrites ``results/<run>.md`` (per
   method: tasks faster / equivalent / slower / inconclusive against the reference). ``<run>`` is
   ``sealed-<UTC time>``; a run never writes over an earlier one.

Profile: ``cpu`` when no GPU is visible (plans are made for the machine they are measured on);
on a GPU machine name its profile (``--profile h100``). Every task is built and measured at the
manifest's batch size.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from shardlab import constants as C  # noqa: E402
from shardlab.cli.arguments import duration  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.evaluate import VERDICTS as EVALUATOR_VERDICTS, MeasuredEvaluator  # noqa: E402
from shardlab.io import write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment, get_profile, profile_with  # noqa: E402
from shardlab.search import run_sharder, sharder_for  # noqa: E402
from shardlab.evaluate.sequential import task_budget  # noqa: E402
from studies.common.records import budget_settings, took  # noqa: E402
from studies.sealed_test.draw import (NEWEST, SETS, check_manifest, load_manifest, manifest_path,  # noqa: E402
                                      sealed_task)

RESULTS = Path(__file__).resolve().parent / "results"

#: Every method the sealed test plans with, each at its shipped defaults: the five heuristics,
#: TorchRec's planner, NeuroShard, DreamShard and AutoShard.
METHODS = C.HEURISTIC_METHODS + ("torchrec", "neuroshard", "dreamshard", "autoshard")

#: Paired rounds per sitting, and sittings, of every task's measurement.
ROUNDS, SITTINGS = 8, 2

#: The evaluator's four verdicts, in the order the report shows them.
VERDICTS = tuple(sorted(EVALUATOR_VERDICTS, key=("faster", "equivalent", "slower", "inconclusive").index))


def default_profile() -> str:
    """``cpu`` when no GPU is visible; else a one-line ShardlabError asking for ``--profile``."""
    import torch

    if torch.cuda.is_available():
        raise ShardlabError("sealed test: field 'profile' is not given and a GPU is visible: name the GPU's "
                            "profile (--profile h100 or h200)")
    return C.MEASURE_PROFILE


def evaluator(profile: Any, rounds: int, sittings: int, seed: int, budget_s: float | None = None,
              reference: str | None = None) -> MeasuredEvaluator:
    """The task's evaluator: ``rounds`` paired rounds in ``sittings`` sittings (where the
    evaluator takes ``sittings``), or sittings of ``rounds`` rounds within ``budget_s`` seconds
    when given, seeded by the task, reference the best baseline (or the method ``reference``)."""
    extra = {"sittings": sittings} if "sittings" in inspect.signature(MeasuredEvaluator).parameters else {}
    if budget_s is not None:
        extra = {"budget_s": budget_s}
    return MeasuredEvaluator(profile, rounds=rounds, seed=seed, reference=reference, progress=False, **extra)


def plans_of(task: Any, methods: Sequence[str], profile: str, seed: int) -> tuple[dict, dict]:
    """(method -> Plan, method -> skip reason) of ``task`` under ``profile``'s shipped models."""
    plans, skipped = {}, {}
    for m in methods:
        try:
            plans[m] = run_sharder(sharder_for(m, profile), task, seed)
        except ShardlabError as e:
            skipped[m] = str(e)
    return plans, skipped


def counts(records: Sequence[Mapping[str, Any]], methods: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per method: tasks it was the reference of, tasks per verdict against the reference
    (a verdict-less Evaluation counts as inconclusive), and tasks it was skipped on."""
    out = {m: {"reference": 0, **{v: 0 for v in VERDICTS}, "skipped": 0} for m in methods}
    for rec in records:
        for m, ev in rec["evaluations"].items():
            k = out.setdefault(m, {"reference": 0, **{v: 0 for v in VERDICTS}, "skipped": 0})
            if ev.get("reference") == m:
                k["reference"] += 1
            else:
                k[ev.get("verdict") or "inconclusive"] += 1
        for m in rec["skipped"]:
            out.setdefault(m, {"reference": 0, **{v: 0 for v in VERDICTS}, "skipped": 0})["skipped"] += 1
    return out


def report(header: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    """The run's markdown: settings, the per-method counts, and each task's verdicts."""
    s = header["settings"]
    budget = s.get("budget_s")
    sealed = str(header["run"]).startswith("sealed-")
    lines = [f"# {'Sealed test run' if sealed else 'Sealed set tasks again, as development data: run'} `{header['run']}`", "",
             f"Manifest `{header['manifest']['name']}` (seed {header['manifest']['seed']}, sha256 "
             f"`{header['manifest']['sha256'][:16]}...`), profile `{header['profile']['name']}`, "
             f"{len(records)} of {header['manifest']['tasks']} tasks done. Every task's plans measured together: "
             + (f"{s['rounds']} paired rounds x {s['sittings'] or 1} sitting(s)" if budget is None else
                f"a time budget of {budget:g} s per task on average ({s.get('sharing') or 'each task its own'}; "
                f"sittings of {s['rounds']} paired rounds, up to {s['looks']}, added while a verdict is inconclusive; decided plans drop out; each look's interval "
                f"a repeated confidence interval by `{s['spending']}` alpha spending on the budget's time scale)")
             + ", equivalence margin "
             f"{s['margin']:.0%}; each verdict is against the task's reference, the best of the baselines "
             f"({', '.join(C.BASELINE_METHODS)}) as the evaluator picks it. A method that was the reference is "
             "counted under `reference`, not as equivalent to itself."
             + (" Each verdict gives the sittings and rounds it took." if budget is not None else ""), "",
             "| method | reference | " + " | ".join(VERDICTS) + " | skipped |",
             "| --- | ---: | " + " | ".join("---:" for _ in VERDICTS) + " | ---: |"]
    for m, k in counts(records, s["methods"]).items():
        lines.append(f"| `{m}` | {k['reference']} | " + " | ".join(str(k[v]) for v in VERDICTS)
                     + f" | {k['skipped']} |")
    if budget is not None:
        lines += ["", "Sittings each verdict took (mean over plans, the reference left out; why they stopped):", "",
                  "| verdict | plans | mean sittings | mean rounds | stopped |", "| --- | ---: | ---: | ---: | --- |"]
        for v in VERDICTS:
            evs = [e for rec in records for m, e in rec["evaluations"].items()
                   if e.get("reference") != m and (e.get("verdict") or "inconclusive") == v]
            if evs:
                why = sorted({str(e.get("stopped", "")).split(" after ")[0].split(" in ")[0] for e in evs} - {""})
                lines.append(f"| {v} | {len(evs)} | {np.mean([len(e.get('sittings_ms') or [0]) for e in evs]):.2f} | "
                             f"{np.mean([len(e.get('rounds_ms') or []) for e in evs]):.1f} | {', '.join(why)} |")
        lines.append(f"\nMeasuring took {sum(r.get('seconds', 0) for r in records):.0f} s over the tasks done.")
    timing = budget is not None and any("budget_s" in r for r in records)
    lines += ["", "## Tasks", "", "| # | task | GPUs | tables | " + ("measured s (budget) | " if timing else "")
              + "reference | verdicts (ratio to reference) |",
              "| ---: | --- | ---: | ---: | " + ("---: | " if timing else "") + "--- | --- |"]
    for rec in records:
        evs = rec["evaluations"]
        ref = next((e.get("reference") for e in evs.values()), None)
        said = ", ".join(f"`{m}` {e.get('verdict') or '-'} ({e['ratio_to_reference']:.3f}"
                         + (f"; {took(e)}" if budget is not None else "") + ")"
                         for m, e in evs.items() if m != ref and "ratio_to_reference" in e)
        skips = "".join(f"; `{m}` skipped" for m in rec["skipped"])
        took_s = f"{rec.get('seconds', 0):.0f} ({rec['budget_s']:.0f}) | " if timing and "budget_s" in rec else (
            "- | " if timing else "")
        lines.append(f"| {rec['entry']['index']} | `{rec['task']['name']}` | {rec['task']['ngpu']} | "
                     f"{len(rec['task']['tables'])} | {took_s}`{ref}` | {said}{skips} |")
    return "\n".join(lines) + "\n"


def run(manifest_file: str | Path | None = None, out: str | Path = RESULTS, profile: str | None = None,
        methods: Sequence[str] = METHODS, rounds: int = ROUNDS, sittings: int = SITTINGS,
        progress: bool = True, sealed_set: str = NEWEST, prefix: str = "sealed",
        budget_s: float | None = None, references: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """The sealed test (module docstring) of set ``sealed_set``'s manifest, or of ``manifest_file``
    when given (``budget_s``: seconds per task, measured with a time budget; ``references``: task
    name -> the method to judge against, for a rerun of the same comparisons; the best baseline
    elsewhere); returns the run's (jsonl, md) paths, named ``<prefix>-<UTC time>``. One-line ShardlabError before anything is
    planned for a bad manifest or a changed family file."""
    manifest_file = Path(manifest_file) if manifest_file is not None else manifest_path(sealed_set)
    manifest = load_manifest(manifest_file)
    check_manifest(manifest)
    name = profile if profile is not None else default_profile()
    plan_profile = get_profile(name).name
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run_id = f"{prefix}-" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    jsonl, md = out / f"{run_id}.jsonl", out / f"{run_id}.md"
    if jsonl.exists() or md.exists():
        raise ShardlabError(f"sealed test: run '{run_id}' exists already in {out.name}/: wait a second and run again")
    uses_sittings = "sittings" in inspect.signature(MeasuredEvaluator).parameters
    header = {"kind": "header", "run": run_id,
              "manifest": {"name": manifest.get("name"), "seed": manifest["seed"], "tasks": len(manifest["tasks"]),
                           "sha256": hashlib.sha256(manifest_file.read_bytes()).hexdigest()},
              "profile": get_profile(name).to_dict(),
              "settings": {"methods": list(methods), "rounds": rounds,
                           "sittings": sittings if uses_sittings and budget_s is None else None,
                           "reference": "best baseline" if not references else "named per task",
                           **({"references": dict(references)} if references else {}),
                           "margin": C.EQUIVALENCE_MARGIN,
                           **budget_settings(budget_s)},
              "environment": environment(get_profile(name).device)}
    records: list[dict[str, Any]] = []
    with open(jsonl, "x") as f:
        f.write(json.dumps(header) + "\n")
        f.flush()
        spent = 0.0
        for done, entry in enumerate(tqdm(manifest["tasks"], desc=f"sealed tasks ({plan_profile})", unit="task",
                                          disable=not progress)):
            task = sealed_task(manifest, entry)
            measure = profile_with(plan_profile, batch_size=task.batch_size)
            plans, skipped = plans_of(task, methods, plan_profile, int(entry["seed"]))
            named = (references or {}).get(task.name)
            budget = task_budget(budget_s, len(manifest["tasks"]), done, spent)
            judge = evaluator(measure, rounds, sittings, int(entry["seed"]), budget, named if named in plans else None)
            evs = judge.evaluate(task, plans) if plans else {}
            spent += float(getattr(judge, "seconds_", 0.0))
            rec = {"kind": "task", "entry": dict(entry), "task": task.to_dict(),
                   "plans": {m: p.to_dict() for m, p in plans.items()}, "skipped": skipped,
                   "evaluations": {m: e.to_dict() for m, e in evs.items()}, "measure_profile": measure.name,
                   "seconds": float(getattr(judge, "seconds_", 0.0)),
                   **({"budget_s": budget} if budget is not None else {})}
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())
            records.append(rec)
            write_text_atomic(md, report(header, records))
    write_text_atomic(md, report(header, records))
    return jsonl, md


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The sealed test (run it only as: bash scripts/sealed_test.sh).")
    ap.add_argument("--profile", default=None,
                    help="hardware profile to plan and measure with (default: cpu when no GPU is visible)")
    ap.add_argument("--set", default=NEWEST, choices=list(SETS),
                    help=f"sealed set to run (default: {NEWEST}, the newest; older sets for the record)")
    ap.add_argument("--manifest", default=None, help="a manifest file instead of the set's (for the tests)")
    ap.add_argument("--out", default=str(RESULTS), help="results folder (default: this study's results/)")
    ap.add_argument("--budget", type=duration, default=None, metavar="DURATION",
                    help="measure with a time budget of this much per task on average (90s, 10m; the "
                         "time a task leaves goes to the tasks after it) instead of 8 rounds x 2 sittings")
    args = ap.parse_args(argv)
    try:
        jsonl, md = run(args.manifest, args.out, args.profile, sealed_set=args.set, budget_s=args.budget)
    except ShardlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"sealed test: {jsonl} and {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
