"""The task and plan verbs of the ``shardlab`` command line: ``tasks`` (generate a task),
``shard`` (one method's plan, its options from ``--set key=value``) and ``export-torchrec``.
Arguments are parsed in :mod:`shardlab.cli.parser`; each verb prints one line (``--json``: the data).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from shardlab import constants as C
from shardlab.cli import emit
from shardlab.data.importers import load_table_list
from shardlab.data.tasks import generate_task, task_dims
from shardlab.errors import ShardlabError
from shardlab.workflows.verify import verified
from shardlab.torchrec.export import export_torchrec
from shardlab.io import load_plan, load_task, save_plan, save_task, write_json_atomic
from shardlab.loads import device_loads, imbalance
from shardlab.search import run_sharder, sharder_for, sharder_options


def cmd_tasks(args: argparse.Namespace) -> None:
    """Generate a task from a shipped pool (or an imported table list) and save it."""
    tables = None
    if args.tables:
        tables = load_table_list(args.tables, batch_size=args.batch_size,
                                 assume_zipf=args.assume_zipf, seed=args.seed)
    ntables = args.ntables if args.ntables is not None else (len(tables) if tables else 50)
    name = args.name
    if tables and not name:
        name = f"{Path(args.tables).name.split('.')[0]}-{ntables}x{args.ngpu}-seed{args.seed}"
    split = args.split or "test"          # --split is refused with --tables (checks.py)
    dims, dims_note = task_dims(args.dims, imported=tables is not None)
    task = generate_task(pool=args.pool, ntables=ntables, ngpu=args.ngpu, mem_cap_gb=args.mem_gb,
                         batch_size=args.batch_size, seed=args.seed, split=split,
                         dims=dims, weights_precision=args.precision,
                         optimizer=args.optimizer, name=name, tables=tables)
    if args.out:
        save_task(task, args.out)
    copies = sum((t.source or "").startswith("augmented:") for t in task.tables) if not tables else 0
    if copies:
        dims_note = (f"augmented: {len(task.tables)} tables asked, more than the pool's {split} split holds, so drawn "
                     f"from its tables copied at other dims (lookups unchanged; {copies} copies)")
    total_gb = sum(task.table_bytes(t) for t in task.tables) / C.GB
    where = f" -> {args.out}" if args.out else ""
    emit(args, f"task {task.name}: {len(task.tables)} tables, {task.ngpu} GPUs x "
               f"{task.mem_cap_gb:g} GB, batch {task.batch_size}, {total_gb:.2f} GB of tables, {dims_note}{where}",
         task.to_dict())


def method_settings(methods: Sequence[str], settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each method's share of the ``--set key=value`` options: a key goes to every method that
    takes it (:func:`~shardlab.search.sharder_options`); a key that no method takes is a one-line
    error naming the key and what the methods take."""
    options = {m: sharder_options(m) for m in methods}
    for key, value in settings.items():
        if not any(key in taken for taken in options.values()):
            takes = "; ".join(f"'{m}' takes {', '.join(taken) if taken else 'no options'}"
                              for m, taken in options.items())
            raise ShardlabError(f"option '--set' {key}={value!r}: field '{key}' applies to no chosen method ({takes})")
    return {m: {k: v for k, v in settings.items() if k in taken} for m, taken in options.items()}


def _flag_option(config: dict[str, Any], method: str, flag: str, option: str, value: Any, lacking: str) -> None:
    """Put ``--flag``'s ``value`` (None: not given) into ``config`` as the sharder option
    ``option``: one line where ``method`` has no such option (``lacking`` says why) or ``--set``
    gave it another value."""
    if value is None:
        return
    if option not in sharder_options(method):
        raise ShardlabError(f"shard: field '{flag}' does not apply to method '{method}' ({lacking})")
    if option in config and config[option] != value:
        raise ShardlabError(f"option '--{flag}' = {value!r} disagrees with --set {option}={config[option]!r}")
    config[option] = value


def cmd_shard(args: argparse.Namespace) -> None:
    """Shard a task with one method (configured by ``--model`` and ``--set``) and save the plan."""
    task = load_task(args.task)
    config = method_settings([args.method], dict(args.settings))[args.method]
    _flag_option(config, args.method, "model", "model", args.model, "it uses no cost model")
    _flag_option(config, args.method, "budget", "search_budget_s", args.budget, "it takes no search budget")
    sharder = sharder_for(args.method, args.profile or C.PLAN_PROFILE, **config)   # its profile's shipped models
    if args.verify:
        sharder = verified(sharder, args.verify, getattr(sharder, "profile", args.profile or C.MEASURE_PROFILE),
                           args.rounds, args.seed, progress=not args.json)
    plan = run_sharder(sharder, task, args.seed)
    if args.out:
        save_plan(plan, args.out)
    loads = device_loads(task, plan)
    where = f" -> {args.out}" if args.out else ""
    emit(args, f"plan {plan.method} for {task.name}: {len(plan.placements)} blocks on {plan.ngpu} GPUs, "
               f"max memory {max(l.mem_gb for l in loads):.2f}/{task.mem_cap_gb:g} GB, dim-sum max/mean "
               f"{imbalance([l.dim_sum for l in loads]):.3f}, {plan.search_seconds:.3f} s{_verified(plan)}{where}",
         plan.to_dict())


def _verified(plan: Any) -> str:
    """', measured best: model#2 (faster than heuristic:lookup_greedy, ratio 0.93)' or ''."""
    v = plan.metadata.get("verification")
    if not v:
        return ""
    h = v["vs_heuristic"]
    return (f", measured best of {len(v['plans'])}: {v['chosen']} ({h['verdict'] or 'no interval'} vs "
            f"{h['reference']}, ratio {h['ratio']:.3f})")


def cmd_export_torchrec(args: argparse.Namespace) -> None:
    """Write a plan as TorchRec ParameterSharding-equivalent JSON plus ParameterConstraints."""
    task, plan = load_task(args.task), load_plan(args.plan)
    data = export_torchrec(task, plan, module=args.module)
    write_json_atomic(args.out, data)
    kinds = sorted({e["sharding_type"] for e in data["plan"].values()})
    emit(args, f"export-torchrec {plan.method}: {len(data['plan'])} tables ({', '.join(kinds)}) -> {args.out}", data)
