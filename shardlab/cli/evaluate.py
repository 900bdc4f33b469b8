"""The evaluation verbs of the ``shardlab`` command line: ``evaluate``, ``compare`` and
``report``. Each builds one :class:`~shardlab.evaluate.Evaluator` from its arguments
(measured in paired rounds, a cost model, or TorchRec training steps) and calls it; none
branches on how plans are costed after that. Arguments are parsed in :mod:`shardlab.cli.parser`
(:func:`~shardlab.cli.arguments.add_evaluator_arguments`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from shardlab import constants as C
from shardlab.cli import emit
from shardlab.cli.arguments import torchrec_steps
from shardlab.errors import ShardlabError, printable
from shardlab.evaluate import MeasuredEvaluator, ModelEvaluator, costs_label
from shardlab.evaluate.ranking import ranking_quality, ranking_text
from shardlab.torchrec.evaluator import TorchRecEvaluator
from shardlab.io import check_output_path, load_plan, load_task, write_json_atomic
from shardlab.paths import safe_filename
from shardlab.measure.hardware import environment, profile_with
from shardlab.data.hardware_profiles import profile_folder
from shardlab.workflows.compare_hardware import compare_hardware, comparison_text
from shardlab.report.html import write_report
from shardlab.report.uncertainty import ci_text, ratio_text, rounds_text, verdict_text
from shardlab.search.optimal import quoted_bounds


def build_evaluator(args: argparse.Namespace, reference: str | None) -> Any:
    """The Evaluator the arguments ask for: TorchRec steps, measured in rounds, or a cost model.
    The profile where none is given: ``constants.MEASURE_PROFILE`` to measure here,
    ``constants.PLAN_PROFILE`` to predict."""
    measuring = bool(args.torchrec or args.measure)
    margin = C.EQUIVALENCE_MARGIN if args.margin is None else args.margin
    profile = args.profile or (C.MEASURE_PROFILE if measuring else C.PLAN_PROFILE)
    seed = args.seed or 0                 # --seed is refused without --measure / --torchrec (checks.py)
    if args.torchrec:
        steps, warmup_steps = torchrec_steps(args)
        return TorchRecEvaluator(profile_with(profile, args.batch_size), rounds=args.rounds or args.default_rounds,
                                 steps=steps, warmup_steps=warmup_steps, seed=seed, reference=reference,
                                 whole_step=args.whole_step, margin=margin)
    if args.measure:
        prof = profile_with(profile, args.batch_size, args.repeats, args.warmup)
        rounds = args.rounds or args.default_rounds
        warm = args.warmup_rounds if args.warmup_rounds is not None else (1 if rounds > 1 else 0)
        return MeasuredEvaluator(prof, rounds=rounds, warmup_rounds=warm, seed=seed, reference=reference,
                                 lower_bound=not args.no_bound, pin=not args.no_pin,
                                 progress=not args.no_progress, journal=args.journal, margin=margin,
                                 sittings=args.sittings or 1, budget_s=args.budget)
    model = args.model or ("analytic" if args.analytic or not args.search_model
                           else profile_folder(profile).search_model or "analytic")
    return ModelEvaluator(model, profile, lower_bound=not args.no_bound, reference=reference)


def load_plans(task: Any, paths: list[str], reference: str | None) -> tuple[dict[str, Any], str | None]:
    """Plans keyed by method (``method:file-stem`` for every plan of a method given more than once),
    every one checked against ``task``; ``reference`` resolved: a Plan JSON file (added to the
    plans when not among them) or a method name. Returns (plans, reference key or None)."""
    plans: dict[str, Any] = {}
    by_path: dict[str, str] = {}
    loaded = []
    for path in paths:
        plan = load_plan(path)
        if plan.task != task.name:
            raise ShardlabError(f"plan '{path}': field 'task' = {plan.task!r} is not the task {task.name!r}")
        resolved = str(Path(path).resolve())
        if resolved in by_path:
            raise ShardlabError(f"plan '{path}': given twice")
        by_path[resolved] = ""
        loaded.append((path, plan))
    methods = [p.method for _, p in loaded]
    for path, plan in loaded:   # a method given once keys its plan; several plans of one method: by file
        key = plan.method if methods.count(plan.method) == 1 else f"{plan.method}:{Path(path).stem}"
        if key in plans:
            key = f"{plan.method}:{Path(path).resolve().parent.name}/{Path(path).stem}"
        plans[key] = plan
        by_path[str(Path(path).resolve())] = key
    if reference is None:
        return plans, None
    if Path(reference).is_file():
        resolved = str(Path(reference).resolve())
        if resolved in by_path:
            return plans, by_path[resolved]
        more, _ = load_plans(task, [reference], None)
        key = next(iter(more))
        key = key if key not in plans else f"{key}:reference"
        return {key: more[next(iter(more))], **plans}, key
    if reference not in plans:
        raise ShardlabError(f"field 'reference' = {reference!r} is neither a Plan JSON file nor the method of one "
                            f"of the plans ({', '.join(plans)})")
    return plans, reference


def comparison_line(key: str, e: Any) -> str:
    """One line for a plan, in columns: cost (median and 95% interval when measured in rounds),
    ratio to the reference (with its interval) and verdict (:mod:`shardlab.report.uncertainty`)."""
    ref = f" vs {e.comparison.reference}" if e.comparison and e.comparison.reference != key else ""
    return (f"{key:>22}  {e.cost_ms:9.3f} ms {ci_text(e):<24}  x{ratio_text(key, e):<24}{ref:<18}"
            f"  {verdict_text(key, e)}").rstrip()


def cmd_evaluate(args: argparse.Namespace) -> None:
    """Cost of one plan (Evaluation JSON), measured (in rounds) or predicted."""
    task = load_task(args.task)
    plans, ref = load_plans(task, [args.plan], args.reference)
    key = next(k for k in plans if k != ref) if len(plans) > 1 else next(iter(plans))   # the plan itself
    evaluator = build_evaluator(args, ref)
    part = ""
    if getattr(args, "whole_step", False):           # the whole DLRM step, its embedding part beside it
        parts = evaluator.evaluate_parts(task, plans)
        evs, emb = parts["whole_step"], parts["embeddings"][key]
        part = f"; embeddings {emb.cost_ms:.3f} ms ({emb.cost_ms / evs[key].cost_ms:.0%} of the step, {emb.source})"
        payload = {**evs[key].to_dict(), "embeddings": emb.to_dict()}
    else:
        evs = evaluator.evaluate(task, plans)
        payload = evs[key].to_dict()
    ev = evs[key]
    if args.out:
        write_json_atomic(args.out, payload)
    bound = f", lower bound {ev.lower_bound_ms:.3f} ms" if ev.lower_bound_ms is not None else ""
    ci = f" [{ev.ci95_ms[0]:.3f}, {ev.ci95_ms[1]:.3f}] over {rounds_text(ev)}" if ev.ci95_ms else ""
    vs = ""
    if ev.comparison is not None and ev.comparison.reference != key:
        vs = f", x{ev.comparison.ratio:.3f} vs {ev.comparison.reference}" + (
            f" ({ev.comparison.verdict})" if ev.comparison.verdict else "")
    where = f" -> {args.out}" if args.out else ""
    emit(args, f"evaluate {plans[key].method} on {task.name}: {ev.cost_ms:.3f} ms{ci} ({ev.source}){bound}{vs}{part}"
               f"{where}", payload)


def cmd_compare_hardware(args: argparse.Namespace) -> None:
    """One task planned for several hardware profiles (:mod:`shardlab.workflows.compare_hardware`)."""
    if args.out:
        check_output_path(args.out)
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    rows = compare_hardware(load_task(args.task), profiles, args.method, args.memory, args.seed)
    if args.out:
        write_json_atomic(args.out, rows)
    if args.json:
        emit(args, "", rows)
        return
    for line in comparison_text(rows).splitlines() + ([f"-> {args.out}"] if args.out else []):
        print(printable(line))           # a table: one printable line per row


def cmd_compare(args: argparse.Namespace) -> None:
    """Several plans of one task, each against the reference: one line per plan, then each
    plan's cost over the best found and over its bound, and what each bound rests on (under a
    cost model, the exact planner's bound for the plans in its space where its plan is among
    them: :func:`~shardlab.search.optimal.quoted_bounds`)."""
    task = load_task(args.task)
    plans, ref = load_plans(task, args.plans, args.reference)
    evaluator = build_evaluator(args, ref)
    evs = evaluator.evaluate(task, plans)
    if isinstance(evaluator, ModelEvaluator) and evaluator.lower_bound:   # each plan its own bound
        bundle = evaluator.bundle()
        evs = quoted_bounds(task, plans, evs, bundle, evaluator.rowwise_model(bundle))
    if args.out:
        write_json_atomic(args.out, [e.to_dict() for e in evs.values()])
    if args.json:
        emit(args, "", [e.to_dict() for e in evs.values()])
        return
    first = next(iter(evs.values()))
    rounds = f", {rounds_text(first, 'paired rounds')}" if first.rounds_ms else ""
    margin = next((e.comparison.margin for e in evs.values() if e.comparison and e.comparison.margin is not None), None)
    rounds += f", equivalence margin {margin:.0%}" if margin is not None else ""
    chosen = first.comparison.chosen if first.comparison else None
    how = f"; reference {first.comparison.reference}: {chosen}" if chosen and len(evs) > 1 else ""
    print(f"compare on {task.name} ({first.source}{rounds}{how}):")
    for k, e in evs.items():
        print(comparison_line(k, e))
    best = min(e.cost_ms for e in evs.values())
    if best > 0:
        print("cost / best found: " + ", ".join(f"{k} {e.cost_ms / best:.3f}" for k, e in evs.items()))
    if any(e.lower_bound_ms for e in evs.values()):
        print("cost / bound: " + ", ".join(f"{k} {e.cost_ms / e.lower_bound_ms:.3f}" for k, e in evs.items()
                                           if e.lower_bound_ms))
    for said in dict.fromkeys(e.bound_source for e in evs.values() if e.bound_source):
        plans_of = [k for k, e in evs.items() if e.bound_source == said]
        value = next(e.lower_bound_ms for e in evs.values() if e.bound_source == said)
        print(f"bound{'' if value is None else f' {value:.3f} ms'} for {', '.join(plans_of)}: {said}")
    line = ranking_line(args, task, plans, evs)
    if line:
        print(line)


def ranking_line(args: argparse.Namespace, task: Any, plans: dict[str, Any], evs: dict[str, Any]) -> str | None:
    """With ``--measure`` and two or more plans measured in rounds: how the profile's search
    model (its folder's ``search_model``, else its analytic model) ranks the same plans against
    the measurement -- Kendall's tau and the share of decisively measured pairs it orders right
    (:func:`~shardlab.evaluate.ranking.ranking_quality`, the verdicts' margin and seed as
    measured); None otherwise. The model predicts at the batch size it was trained at."""
    if not getattr(args, "measure", False) or len(evs) < 2 or not all(e.rounds_ms for e in evs.values()):
        return None
    profile = args.profile or C.MEASURE_PROFILE
    model = profile_folder(profile).search_model or "analytic"
    try:
        predicted = ModelEvaluator(model, profile, lower_bound=False).evaluate(task, plans)
    except ShardlabError as e:
        return f"ranking: not predicted by {model} for profile {profile} ({e})"
    q = ranking_quality({k: e.cost_ms for k, e in predicted.items()}, evs, seed=args.seed or 0,
                        margin=C.EQUIVALENCE_MARGIN if args.margin is None else args.margin)
    return f"ranking by {model} ({profile}) against these measurements: {ranking_text(q)}"


def cmd_report(args: argparse.Namespace) -> None:
    """A standalone HTML comparison of plans of one task (costs from a model or measured)."""
    task = load_task(args.task)
    plans, ref = load_plans(task, args.plans, args.reference)
    evaluator = build_evaluator(args, ref)
    evaluations = evaluator.evaluate(task, plans)
    html = args.html or f"reports/{safe_filename(task.name, '.html')}"
    out = write_report(html, task, plans, evaluations, {"command": " ".join(sys.argv), "costs": costs_label(evaluator)},
                       environment=environment("cpu"))
    best = min(evaluations.items(), key=lambda kv: (kv[1].cost_ms, kv[0]))   # ties: by name, not by order
    emit(args, f"report {task.name}: {len(plans)} plans, best {best[0]} {best[1].cost_ms:.3f} ms "
               f"({best[1].source}) -> {out}", {m: e.to_dict() for m, e in evaluations.items()})
