"""The ``shardlab`` command line (INTERFACES.md). Verbs: ``tasks``, ``shard``,
``profile compute|comm|single|plans``, ``train``, ``evaluate``, ``compare`` (each
``--measure [--rounds R]`` or ``--model NAME`` or ``--analytic``), ``export-torchrec`` and ``report``.

Each verb prints a one-line summary (or, with ``--json``, the machine-readable result) and
exits non-zero with one line naming the bad input on error. The CLI holds no logic of its
own: it parses arguments and calls the package, as the notebooks do. The measurement and
training verbs live in :mod:`shardlab.cli_campaigns`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from shardlab import constants as C
from shardlab.cli_campaigns import (emit, cmd_calibrate, cmd_profile_comm, cmd_profile_compute, cmd_profile_plans,
                                    cmd_profile_single, cmd_train)
from shardlab.cli_checks import check_args
from shardlab.cli_evaluate import add_evaluator_arguments, cmd_compare, cmd_evaluate, cmd_report
from shardlab.errors import ShardlabError


def _dims(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--dims must be comma-separated integers, got {text!r}") from None


def cmd_tasks(args: argparse.Namespace) -> None:
    """Generate a task from a shipped pool (or an imported table list) and save it."""
    from shardlab.data.tasks import generate_task, task_dims
    from shardlab.io import save_task

    tables = None
    if args.tables:
        from shardlab.data.importers import load_table_list

        tables = load_table_list(args.tables, batch_size=args.batch_size,
                                 assume_zipf=args.assume_zipf, seed=args.seed)
    ntables = args.ntables if args.ntables is not None else (len(tables) if tables else 50)
    name = args.name
    if tables and not name:
        name = f"{Path(args.tables).name.split('.')[0]}-{ntables}x{args.ngpu}-seed{args.seed}"
    dims, dims_note = task_dims(args.dims, imported=tables is not None)
    task = generate_task(pool=args.pool, ntables=ntables, ngpu=args.ngpu, mem_cap_gb=args.mem_gb,
                         batch_size=args.batch_size, seed=args.seed, split=args.split,
                         dims=dims, weights_precision=args.precision,
                         optimizer=args.optimizer, name=name, tables=tables)
    if args.out:
        save_task(task, args.out)
    total_gb = sum(task.table_bytes(t) for t in task.tables) / C.GB
    where = f" -> {args.out}" if args.out else ""
    emit(args, f"task {task.name}: {len(task.tables)} tables, {task.ngpu} GPUs x "
                f"{task.mem_cap_gb:g} GB, batch {task.batch_size}, {total_gb:.2f} GB of tables, {dims_note}{where}",
          task.to_dict())


def cmd_shard(args: argparse.Namespace) -> None:
    """Shard a task with one method and save the plan."""
    from shardlab.io import load_task, save_plan
    from shardlab.loads import device_loads, imbalance
    from shardlab.search import get_sharder, run_sharder, sharder_options

    task = load_task(args.task)
    if args.model is not None and "model" not in sharder_options(args.method):
        raise ShardlabError(f"shard: field 'model' does not apply to method '{args.method}' (it uses no cost model)")
    sharder = get_sharder(args.method, **({} if args.model is None else {"model": args.model}))
    if args.verify:
        from shardlab.evaluate import MeasuredEvaluator
        from shardlab.experiments.verify import VerifiedSharder

        evaluator = MeasuredEvaluator(args.profile or "cpu", rounds=args.rounds or 5, seed=args.seed,
                                      progress=not args.json)
        sharder = VerifiedSharder(sharder, evaluator, args.verify)
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
    from shardlab.export import export_torchrec
    from shardlab.io import load_plan, load_task, write_json_atomic

    task, plan = load_task(args.task), load_plan(args.plan)
    data = export_torchrec(task, plan, module=args.module)
    write_json_atomic(args.out, data)
    kinds = sorted({e["sharding_type"] for e in data["plan"].values()})
    emit(args, f"export-torchrec {plan.method}: {len(data['plan'])} tables ({', '.join(kinds)}) -> {args.out}", data)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every verb that works so far."""
    from shardlab.search import sharder_names

    parser = argparse.ArgumentParser(prog="shardlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)

    p = sub.add_parser("tasks", help="generate a sharding task (Task JSON)")
    p.add_argument("--pool", default=C.DEFAULT_POOL, help="shipped table pool (default %(default)s)")
    p.add_argument("--split", default="test", choices=["train", "test", "all"],
                   help="which half of the pool to draw from (default %(default)s)")
    p.add_argument("--tables", help="draw from a JSON/CSV table list instead of a pool")
    p.add_argument("--assume-zipf", type=float, default=None, metavar="ALPHA",
                   help="for --tables without reuse_bins: compute them from Zipf(ALPHA) lookups")
    p.add_argument("--ntables", type=int, default=None, help="tables in the task (default 50)")
    p.add_argument("--ngpu", type=int, default=4)
    p.add_argument("--mem-gb", type=float, default=4.0, help="memory cap per device, GB")
    p.add_argument("--batch-size", type=int, default=C.DEFAULT_BATCH_SIZE)
    p.add_argument("--dims", type=_dims, default=None,
                   help="comma-separated dims to draw from (default: a --tables list keeps each table's own dim; "
                        "a pool task draws from 4,8,16,32,64,128)")
    p.add_argument("--precision", default="fp32", choices=sorted(C.BYTES_PER_WEIGHT))
    p.add_argument("--optimizer", default="exact_sgd", choices=list(C.OPTIMIZERS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None, help="task name (default derived from the arguments)")
    p.add_argument("--out", help="where to write the Task JSON")
    p.add_argument("--json", action="store_true", help="print the Task JSON to stdout")
    p.set_defaults(func=cmd_tasks)

    p = sub.add_parser("shard", help="shard a task with one method (Plan JSON)")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("--method", required=True, choices=sharder_names())
    p.add_argument("--model", default=None, help="cost model (shipped name or manifest path) for model-based methods")
    p.add_argument("--verify", type=int, default=None, metavar="K",
                   help="measure the model's K best plans and the best heuristic plan in paired rounds and "
                        "return the measured best (verdicts in the plan's metadata)")
    p.add_argument("--rounds", type=int, default=None, help="paired measurement rounds with --verify (default 5)")
    p.add_argument("--profile", default=None, help="hardware profile that measures with --verify (default cpu)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="where to write the Plan JSON")
    p.add_argument("--json", action="store_true", help="print the Plan JSON to stdout")
    p.set_defaults(func=cmd_shard)

    p = sub.add_parser("profile", help="measure costs into a crash-safe store (resumable)")
    what = p.add_subparsers(dest="what", required=True)
    c = what.add_parser("compute", help="fused TBE forward+backward times of random table multisets")
    c.add_argument("--store", required=True, help="SQLite sample store (created if absent)")
    c.add_argument("--samples", type=int, default=100, help="samples 0..N-1 (stored ones are skipped)")
    c.add_argument("--profile", default="cpu", help="hardware profile (default %(default)s)")
    c.add_argument("--batch-size", type=int, default=None, help="override the profile's batch size")
    c.add_argument("--repeats", type=int, default=None, help="override the profile's timed runs")
    c.add_argument("--warmup", type=int, default=None, help="override the profile's warm-up runs")
    c.add_argument("--pool", default=C.DEFAULT_POOL,
                   help="table pool; 'broad' draws synthetic tables over rows 1e2..1e8, pooling 1..100 "
                        "(one-hot and fixed multi-hot included), dims 4..256, skew 0..1.4, with column slices")
    c.add_argument("--split", default="train", choices=["train", "test", "all"])
    c.add_argument("--row-share", type=float, default=0.0,
                   help="pool 'broad' only: share of samples with row blocks of their tables (issue 18)")
    c.add_argument("--max-tables", type=int, default=15)
    c.add_argument("--mem-gb", type=float, default=4.0, help="memory cap of one sample's op, GB")
    c.add_argument("--workers", type=int, default=1)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_profile_compute)
    c = what.add_parser("comm", help="all-to-all times of random dim assignments with random delays")
    c.add_argument("--store", required=True, help="SQLite sample store (created if absent)")
    c.add_argument("--ngpu", type=int, nargs="+", default=[4, 8], help="device counts (real ranks)")
    c.add_argument("--samples", type=int, default=100, help="samples 0..N-1 per device count")
    c.add_argument("--profile", default="cpu")
    c.add_argument("--batch-size", type=int, default=None)
    c.add_argument("--repeats", type=int, default=None)
    c.add_argument("--warmup", type=int, default=None)
    c.add_argument("--max-delay-ms", type=float, default=30.0, help="forward delays drawn in [0, this] ms")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--no-progress", action="store_true")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_profile_comm)
    c = what.add_parser("plans", help="measured plans of random tasks (DreamShard's training data)")
    c.add_argument("--store", required=True, help="SQLite sample store (created if absent)")
    c.add_argument("--ngpu", type=int, default=4, help="devices (real ranks for the all-to-alls)")
    c.add_argument("--samples", type=int, default=100, help="plans 0..N-1 (stored ones are skipped)")
    c.add_argument("--min-tables", type=int, default=10)
    c.add_argument("--max-tables", type=int, default=60)
    c.add_argument("--mem-gb", type=float, default=4.0, help="memory cap per device, GB")
    c.add_argument("--pool", default=C.DEFAULT_POOL,
                   help="table pool; 'broad' draws synthetic tables over rows 1e2..1e8, pooling 1..100 "
                        "(one-hot and fixed multi-hot included), dims 4..256, skew 0..1.4, with column slices")
    c.add_argument("--split", default="train", choices=["train", "test", "all"])
    c.add_argument("--profile", default="cpu")
    c.add_argument("--batch-size", type=int, default=None)
    c.add_argument("--repeats", type=int, default=None)
    c.add_argument("--warmup", type=int, default=None)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--no-progress", action="store_true")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_profile_plans)
    c = what.add_parser("single", help="each table of the stored compute samples, measured alone")
    c.add_argument("--store", required=True, help="SQLite sample store holding compute samples")
    c.add_argument("--max-samples", type=int, default=None, help="only the tables of the first N samples")
    c.add_argument("--workers", type=int, default=1, help="parallel measuring processes")
    c.add_argument("--profile", default="cpu")
    c.add_argument("--batch-size", type=int, default=None)
    c.add_argument("--repeats", type=int, default=None)
    c.add_argument("--warmup", type=int, default=None)
    c.add_argument("--no-progress", action="store_true")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_profile_single)

    p = sub.add_parser("evaluate", help="cost of a plan (Evaluation JSON)")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("plan", help="Plan JSON file")
    add_evaluator_arguments(p, default_rounds=1, default_model=None)
    p.add_argument("--out", help="where to write the Evaluation JSON")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("compare", help="plans of one task against a reference: median, CI, ratio, verdict")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("plans", nargs="+", help="Plan JSON files of the task")
    add_evaluator_arguments(p, default_rounds=8, default_model=None)
    p.add_argument("--out", help="where to write the Evaluations (a JSON list)")
    p.add_argument("--json", action="store_true", help="print the Evaluations (a JSON list)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("export-torchrec", help="a plan as TorchRec ParameterSharding entries + constraints")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("plan", help="Plan JSON file")
    p.add_argument("--out", required=True, help="where to write the export JSON")
    p.add_argument("--module", default="sparse.ebc", help="module path of the EmbeddingBagCollection")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_export_torchrec)

    p = sub.add_parser("report", help="standalone HTML comparison of plans (works offline)")
    p.add_argument("plans", nargs="+", help="Plan JSON files of the same task")
    p.add_argument("--task", required=True, help="Task JSON file")
    p.add_argument("--html", default=None, help="where to write the report (default reports/<task>.html)")
    add_evaluator_arguments(p, default_rounds=8, default_model=C.DEFAULT_NEUROSHARD_MODEL)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("train", help="train a cost model on measured samples")
    p.add_argument("kind", choices=["analytic", "neuroshard", "autoshard", "dreamshard", "dreamshard_policy",
                                    "autoshard_policy"], help="cost model, or RL policy (*_policy)")
    p.add_argument("--out", required=True, help="manifest JSON to write (model files go beside it)")
    p.add_argument("--store", help="SQLite sample store (default: the shipped dataset)")
    p.add_argument("--dataset", default="cpu", help="shipped measured dataset (default %(default)s)")
    p.add_argument("--profile", default=None, help="only samples of this hardware profile")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (neural kinds)")
    p.add_argument("--pretrain-epochs", type=int, default=0,
                   help="dreamshard: compute-only epochs before the joint training on plans")
    p.add_argument("--cost-model", default=None, help="policies: the cost model (shipped name or path)")
    p.add_argument("--iterations", type=int, default=10, help="policies: measure/refit/RL iterations")
    p.add_argument("--updates", type=int, default=50, help="policies: RL updates per iteration")
    p.add_argument("--measure", type=int, default=4, help="policies: plans measured per iteration")
    p.add_argument("--ngpu", type=int, nargs="+", default=[4], help="policies: device counts to train for")
    p.add_argument("--cost-epochs", type=int, default=None,
                   help="policies: epochs of each cost-model refit during training (default: the loop's own)")
    p.add_argument("--probe-every", type=int, default=0,
                   help="policies: updates between learning-curve probes on fixed tasks (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("calibrate", help="calibrate a cost model's column-split predictions (NeuroShard's split guard)")
    p.add_argument("model", help="shipped cost model name or manifest path (its manifest is updated)")
    p.add_argument("--store", help="SQLite sample store (default: the shipped dataset)")
    p.add_argument("--dataset", default="cpu/broad", help="shipped measured dataset with column-slice samples "
                                                           "(default %(default)s)")
    p.add_argument("--profile", default=None, help="hardware profile (shipped model and samples)")
    p.add_argument("--quantile", type=float, default=C.SPLIT_GUARD_QUANTILE,
                   help="quantile of log(measured/predicted) the guard charges (default %(default)s)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``shardlab`` / ``python -m shardlab``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        check_args(args)
        args.func(args)
    except ShardlabError as e:
        print(f"shardlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shardlab: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
