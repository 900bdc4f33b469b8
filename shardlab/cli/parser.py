"""The ``shardlab`` argument parser: every verb, its options and an example line for its
``--help``. Building it imports no torch (``shardlab --help`` is quick); each verb names the
``module:function`` of :mod:`shardlab.cli` that runs it, imported only when it runs. The RL
policies' options are generated from their configuration dataclasses
(:mod:`shardlab.workflows.rl_args`), one source for defaults and help.
"""

from __future__ import annotations

import argparse

from shardlab import constants as C
from shardlab.cli.dist_flags import add_dist_verbs
from shardlab.cli.arguments import (OneLineParser, VerbFormatter, add_dataclass_arguments, add_evaluator_arguments, add_verb,
                                    dims, duration, setting)
from shardlab.workflows.rl_args import AutoShardArgs, DreamShardArgs

DESCRIPTION = ("shardlab: embedding-table sharding for DLRM training -- make tasks, shard them, measure and "
               "compare the plans, train cost models and RL policies.")

#: The pools' halves a task or campaign draws from.
SPLITS = ["train", "test", "all"]

BROAD_POOL_HELP = ("table pool; 'broad' draws synthetic tables over rows 1e2..1e8, pooling 1..100 (one-hot and "
                   "fixed multi-hot included), dims 4..256, skew 0..1.4, with column slices (--space changes them)")

#: Flags of the RL options before they were generated from the dataclasses: field -> old flags, each
#: refused with the field's flag (commands recorded with them, e.g. in datasets/*/NOTES.md, say so).
POLICY_RENAMED = {"dreamshard_policy": {"updates_per_iteration": ["--updates"], "measure_per_iteration": ["--measure"]},
                  "autoshard_policy": {"measure_plans": ["--measure"]}}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every verb."""
    parser = OneLineParser(prog="shardlab", description=DESCRIPTION, formatter_class=VerbFormatter,
                                     epilog="example:\n  shardlab tasks --ntables 20 --ngpu 4 --out task.json\n"
                                            "  shardlab shard task.json --method neuroshard --out neuroshard.json")
    parser.add_argument("--profiles-dir", default=None, metavar="DIR",
                        help="a folder of your own hardware profile folders (<name>/hardware.json), beside the "
                             "shipped ones; sets $SHARDLAB_PROFILES for this run")
    sub = parser.add_subparsers(dest="verb", required=True)
    _add_task_verbs(sub)
    _add_measure_verbs(sub)
    _add_hardware_verbs(sub)
    _add_evaluation_verbs(sub)
    _add_training_verbs(sub)
    d = add_verb(sub, "dist", "evaluations and the comm campaign on ranks torchrun starts", [
        "shardlab dist evaluate task.json a.json --torchrec --out e.json"], command="dist:cmd_dist")
    add_dist_verbs(d.add_subparsers(dest="dist_verb", required=True))
    return parser


def _add_task_verbs(sub: argparse._SubParsersAction) -> None:
    """``tasks``, ``shard`` and ``export-torchrec``."""
    p = add_verb(sub, "tasks", "generate a sharding task (Task JSON)", [
        "shardlab tasks --ntables 50 --ngpu 4 --mem-gb 4 --seed 0 --out task.json",
        "shardlab tasks --tables datasets/criteo/criteo_kaggle_dac.json --assume-zipf 1.05 --ngpu 2 --out criteo.json"],
        command="plans:cmd_tasks")
    p.add_argument("--pool", default=C.DEFAULT_POOL, help="shipped table pool (default %(default)s)")
    p.add_argument("--split", default=None, choices=SPLITS,
                   help="which half of the pool to draw from (default %(default)s)")
    p.add_argument("--tables", help="draw from a JSON/CSV table list instead of a pool")
    p.add_argument("--assume-zipf", type=float, default=None, metavar="ALPHA",
                   help="for --tables without reuse_bins: compute them from Zipf(ALPHA) lookups")
    p.add_argument("--ntables", type=int, default=None, help="tables in the task (default 50)")
    p.add_argument("--ngpu", type=int, default=C.DEFAULT_NGPU)
    p.add_argument("--mem-gb", type=float, default=C.DEFAULT_MEM_CAP_GB, help="memory cap per device, GB")
    p.add_argument("--batch-size", type=int, default=C.DEFAULT_BATCH_SIZE)
    p.add_argument("--dims", type=dims, default=None,
                   help="comma-separated dims to draw from (default: a --tables list keeps each table's own dim; "
                        "a pool task draws from 4,8,16,32,64,128)")
    p.add_argument("--precision", default="fp32", choices=sorted(C.BYTES_PER_WEIGHT))
    p.add_argument("--optimizer", default="exact_sgd", choices=list(C.OPTIMIZERS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None, help="task name (default derived from the arguments)")
    p.add_argument("--out", help="where to write the Task JSON")
    p.add_argument("--json", action="store_true", help="print the Task JSON to stdout")

    p = add_verb(sub, "shard", "shard a task with one method (Plan JSON)", [
        "shardlab shard task.json --method lookup_greedy --out lookup_greedy.json",
        "shardlab shard task.json --method neuroshard --set beam_width=5 --set split_guard=false --out plan.json"],
        command="plans:cmd_shard")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("--method", required=True, metavar="SPEC",
                   help="sharder: a registered name or name[key=value,...], e.g. lookup_greedy, neuroshard, "
                        "neuroshard[columns=false] (an unknown name is refused with the list of known ones)")
    p.add_argument("--set", dest="settings", type=setting, action="append", default=[], metavar="KEY=VALUE",
                   help="a sharder option of the method, repeatable (e.g. --set beam_width=5 --set split_guard=false); "
                        "values are JSON where they parse (true, 3, 0.5, [4, 8]), else text")
    p.add_argument("--model", default=None, help="cost model (shipped name or manifest path) for model-based methods")
    p.add_argument("--budget", type=duration, default=None, metavar="DURATION",
                   help="a time budget for the search (90s, 10m), for methods that take one (neuroshard's "
                        "search_budget_s): the best plan so far is the answer, and the plan says what the budget did")
    p.add_argument("--verify", type=int, default=None, metavar="K",
                   help="measure the model's K best plans and the best heuristic plan in paired rounds and "
                        "return the measured best (verdicts in the plan's metadata)")
    p.add_argument("--rounds", type=int, default=None, help=f"paired measurement rounds with --verify (default {C.VERIFY_ROUNDS})")
    p.add_argument("--profile", default=None,
                   help="hardware profile the plan is made for: model-based methods search with its shipped "
                        "models, --verify measures under it (default h100; --verify on a machine without a GPU: "
                        "--profile cpu)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="where to write the Plan JSON")
    p.add_argument("--json", action="store_true", help="print the Plan JSON to stdout")

    p = add_verb(sub, "export-torchrec", "a plan as TorchRec ParameterSharding entries + constraints", [
        "shardlab export-torchrec task.json plan.json --out torchrec_plan.json"], command="plans:cmd_export_torchrec")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("plan", help="Plan JSON file")
    p.add_argument("--out", required=True, help="where to write the export JSON")
    p.add_argument("--module", default="sparse.ebc", help="module path of the EmbeddingBagCollection")
    p.add_argument("--json", action="store_true")


def _measuring(c: argparse.ArgumentParser) -> None:
    """The hardware-profile options of a measurement campaign."""
    c.add_argument("--profile", default="cpu", help="hardware profile (default %(default)s)")
    c.add_argument("--batch-size", type=int, default=None, help="override the profile's batch size")
    c.add_argument("--repeats", type=int, default=None, help="override the profile's timed runs")
    c.add_argument("--warmup", type=int, default=None, help="override the profile's warm-up runs")


def _add_hardware_verbs(sub: argparse._SubParsersAction) -> None:
    """``hardware new``: a hardware profile of the machine at hand; ``hardware derive``: an
    analytic profile's model from public figures."""
    example = ["shardlab hardware new mybox --minutes 10        (into $SHARDLAB_PROFILES; or --profiles-dir DIR "
               "before the verb)",
               "shardlab hardware new mybox --minutes 10        (again after a crash or Ctrl-C: it resumes)"]
    what = add_verb(sub, "hardware", "hardware profiles: make one of this machine, or derive an analytic one", example).add_subparsers(
        dest="what", required=True)
    c = add_verb(what, "new", "measure this machine, fit its cost model and write its profile folder (resumable)",
                 example, command="campaigns:cmd_hardware_new")
    c.add_argument("name", help="the profile's name (a folder name; not a shipped profile's)")
    c.add_argument("--minutes", type=float, default=C.HARDWARE_NEW_MINUTES,
                   help="wall-clock budget for all steps (default %(default)s)")
    c.add_argument("--like", default=None, help="measure with this profile's settings (default cpu, or h200 on a GPU)")
    c.add_argument("--batch-size", type=int, default=None, help="samples per timed batch (default: --like's)")
    c.add_argument("--mem-gb", type=float, default=C.SAMPLE_MEM_GB,
                   help="most memory one compute sample's op may take, GB (default %(default)s; less on a small machine)")
    c.add_argument("--workers", type=int, default=1, help="processes measuring compute in parallel")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--no-progress", action="store_true", help="no progress bars")
    c.add_argument("--json", action="store_true")
    d = add_verb(what, "derive", "write an analytic profile's cost model from its facts and the fit of the profile "
                 "it derives from (nothing measured)", ["shardlab hardware derive b200"],
                 command="campaigns:cmd_hardware_derive")
    d.add_argument("name", help="the analytic profile (its hardware.json names derive_from and its facts)")
    d.add_argument("--json", action="store_true")


def _add_measure_verbs(sub: argparse._SubParsersAction) -> None:
    """``measure compute|comm|plans|single``: measurement campaigns into a sample store."""
    p = add_verb(sub, "measure", "measure costs into a crash-safe store (resumable)", [
        "shardlab measure compute --store runs/cpu.db --samples 100",
        "shardlab measure comm --store runs/cpu.db --ngpu 4 8 --samples 100"])
    what = p.add_subparsers(dest="what", required=True)
    c = add_verb(what, "compute", "fused TBE forward+backward times of random table multisets", [
        "shardlab measure compute --store runs/cpu.db --samples 100 --workers 2",
        "shardlab measure compute --store runs/broad.db --pool broad --row-share 0.2 --samples 200"],
        command="campaigns:cmd_measure_compute")
    c.add_argument("--store", required=True, help="SQLite sample store (created if absent)")
    c.add_argument("--samples", type=int, default=C.CAMPAIGN_SAMPLES, help="samples 0..N-1 (stored ones are skipped)")
    _measuring(c)
    c.add_argument("--pool", default=C.DEFAULT_POOL, help=BROAD_POOL_HELP)
    c.add_argument("--split", default=None, choices=SPLITS, help="pool split (default train; not with --pool broad)")
    c.add_argument("--row-share", type=float, default=0.0,
                   help="pool 'broad' only: share of samples with row blocks of their tables")
    c.add_argument("--space", default="", metavar="JSON",
                   help="pool 'broad' only: BroadSpace fields as a JSON object, e.g. "
                        "'{\"pooling\": [1, 200], \"dims\": [4, 64, 512]}' (the rest at their defaults)")
    c.add_argument("--minutes", type=float, default=None,
                   help="take no new sample after this many minutes (the rest stay for a rerun)")
    c.add_argument("--max-tables", type=int, default=C.SAMPLE_MAX_TABLES, help="most tables one sample fuses")
    c.add_argument("--mem-gb", type=float, default=C.SAMPLE_MEM_GB, help="memory cap of one sample's op, GB")
    c.add_argument("--workers", type=int, default=1)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    c.add_argument("--json", action="store_true")

    c = add_verb(what, "comm", "all-to-all times of random dim assignments with random delays", [
        "shardlab measure comm --store runs/cpu.db --ngpu 4 8 --samples 100"], command="campaigns:cmd_measure_comm")
    c.add_argument("--store", required=True, help="SQLite sample store (created if absent)")
    c.add_argument("--ngpu", type=int, nargs="+", default=[4, 8], help="device counts (real ranks)")
    c.add_argument("--samples", type=int, default=C.CAMPAIGN_SAMPLES, help="samples 0..N-1 per device count")
    _measuring(c)
    c.add_argument("--max-delay-ms", type=float, default=C.COMM_DELAY_MS, help="forward delays drawn in [0, this] ms")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--no-progress", action="store_true")
    c.add_argument("--json", action="store_true")

    c = add_verb(what, "plans", "measured plans of random tasks (DreamShard's training data)", [
        "shardlab measure plans --store runs/plans.db --ngpu 4 --samples 50"], command="campaigns:cmd_measure_plans")
    c.add_argument("--store", required=True, help="SQLite sample store (created if absent)")
    c.add_argument("--ngpu", type=int, default=C.DEFAULT_NGPU, help="devices (real ranks for the all-to-alls)")
    c.add_argument("--samples", type=int, default=C.CAMPAIGN_SAMPLES, help="plans 0..N-1 (stored ones are skipped)")
    c.add_argument("--min-tables", type=int, default=C.PLAN_CAMPAIGN_TABLES[0])
    c.add_argument("--max-tables", type=int, default=C.PLAN_CAMPAIGN_TABLES[1])
    c.add_argument("--mem-gb", type=float, default=C.DEFAULT_MEM_CAP_GB, help="memory cap per device, GB")
    c.add_argument("--pool", default=C.DEFAULT_POOL, help=BROAD_POOL_HELP)
    c.add_argument("--split", default="train", choices=SPLITS)
    c.add_argument("--methods", nargs="+", default=list(C.HEURISTIC_METHODS),
                   help="sharders whose plans are measured, plan i from the (i mod N)-th (default: the "
                        "five heuristics; model-based ones use the profile's shipped models)")
    _measuring(c)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--no-progress", action="store_true")
    c.add_argument("--json", action="store_true")

    c = add_verb(what, "single", "each table of the stored compute samples, measured alone", [
        "shardlab measure single --store runs/cpu.db --max-samples 20"], command="campaigns:cmd_measure_single")
    c.add_argument("--store", required=True, help="SQLite sample store holding compute samples")
    c.add_argument("--max-samples", type=int, default=None, help="only the tables of the first N samples")
    c.add_argument("--workers", type=int, default=1, help="parallel measuring processes")
    _measuring(c)
    c.add_argument("--no-progress", action="store_true")
    c.add_argument("--json", action="store_true")


def _add_evaluation_verbs(sub: argparse._SubParsersAction) -> None:
    """``evaluate``, ``compare`` and ``report``: one evaluator each."""
    p = add_verb(sub, "evaluate", "cost of a plan (Evaluation JSON)", [
        "shardlab evaluate task.json plan.json --model neuroshard",
        "shardlab evaluate task.json plan.json --measure --rounds 5 --out evaluation.json"],
        command="evaluate:cmd_evaluate")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("plan", help="Plan JSON file")
    add_evaluator_arguments(p, default_rounds=1)
    p.add_argument("--out", help="where to write the Evaluation JSON")
    p.add_argument("--json", action="store_true")

    p = add_verb(sub, "compare", "plans of one task against a reference: median, CI, ratio, verdict", [
        "shardlab compare task.json lookup_greedy.json neuroshard.json --measure --rounds 8"],
        command="evaluate:cmd_compare")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("plans", nargs="+", help="Plan JSON files of the task")
    add_evaluator_arguments(p, default_rounds=C.COMPARE_ROUNDS)
    p.add_argument("--out", help="where to write the Evaluations (a JSON list)")
    p.add_argument("--json", action="store_true", help="print the Evaluations (a JSON list)")

    p = add_verb(sub, "compare-hardware", "plan one task for several hardware profiles, side by side", [
        "shardlab compare-hardware task.json --profiles h100,b200,mi300x",
        "shardlab compare-hardware task.json --profiles h100,mi300x --memory profile --out cmp.json"],
        command="evaluate:cmd_compare_hardware")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("--profiles", required=True, help="comma-separated hardware profiles (shipped or yours)")
    p.add_argument("--method", default="neuroshard", help="the method planning for each (default %(default)s)")
    p.add_argument("--memory", choices=("task", "profile"), default="task",
                   help="memory cap: the task's for every profile (default), or each GPU's HBM less TorchRec's "
                        "reserved share")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="where to write the rows (JSON: plans, evaluations, what each rests on)")
    p.add_argument("--json", action="store_true")

    p = add_verb(sub, "report", "standalone HTML comparison of plans (works offline)", [
        "shardlab report lookup_greedy.json neuroshard.json --task task.json --html reports/task.html",
        "shardlab report lookup_greedy.json neuroshard.json --task task.json --measure --rounds 8"],
        command="evaluate:cmd_report")
    p.add_argument("plans", nargs="+", help="Plan JSON files of the same task")
    p.add_argument("--task", required=True, help="Task JSON file")
    p.add_argument("--html", default=None, help="where to write the report (default reports/<task>.html)")
    add_evaluator_arguments(p, default_rounds=C.COMPARE_ROUNDS, search_model=True)
    p.add_argument("--json", action="store_true")


def _training_data(k: argparse.ArgumentParser) -> None:
    """Where a ``train`` kind writes and which measured samples it reads."""
    k.add_argument("--out", required=True, help="manifest JSON to write (model files go beside it)")
    k.add_argument("--store", help="SQLite sample store (default: the shipped dataset)")
    k.add_argument("--dataset", default="cpu", help="shipped measured dataset (default %(default)s)")


def _add_training_verbs(sub: argparse._SubParsersAction) -> None:
    """``train <kind>`` (cost models and RL policies) and ``calibrate``."""
    p = add_verb(sub, "train", "train a cost model on measured samples, or an RL policy (*_policy)", [
        "shardlab train neuroshard --out my_model.json --store runs/cpu.db",
        "shardlab train dreamshard_policy --store runs/policy.db --out policy.pt --ngpu 4 8"])
    kinds = p.add_subparsers(dest="kind", required=True, metavar="kind",
                             help="cost model (analytic, neuroshard, autoshard, dreamshard) or RL policy "
                                  "(dreamshard_policy, autoshard_policy); see 'shardlab train KIND --help'")
    for kind in ("analytic", "neuroshard", "autoshard", "dreamshard"):
        extra = " --pretrain-epochs 20" if kind == "dreamshard" else ""
        k = add_verb(kinds, kind, f"train the {kind} cost model on measured compute and comm samples", [
            f"shardlab train {kind} --out {kind}_model.json --store runs/cpu.db{extra}"], command="campaigns:cmd_train")
        _training_data(k)
        k.add_argument("--profile", default=None, help="only samples of this hardware profile")
        k.add_argument("--epochs", type=int, default=None, help="training epochs (neural kinds)")
        k.add_argument("--comm", choices=("measured", "topology"), default="measured",
                       help="comm model: fitted to the measured comm samples (default), or 'topology': the "
                            "analytic GPU-cluster model with its cited constants, for data without comm")
        if kind in ("neuroshard", "autoshard"):
            k.add_argument("--rank-weight", type=float, default=0.0,
                           help="weight of the pairwise ranking loss added to the compute model's MSE (default 0)")
        else:
            k.set_defaults(rank_weight=0.0)
        if kind == "dreamshard":
            k.add_argument("--pretrain-epochs", type=int, default=0,
                           help="compute-only epochs before the joint training on plans")
        else:
            k.set_defaults(pretrain_epochs=0)
        k.add_argument("--seed", type=int, default=0)
        k.add_argument("--no-progress", action="store_true")
        k.add_argument("--json", action="store_true")

    policies = {"dreamshard_policy": (DreamShardArgs, "DreamShard", "dreamshard", [
                    "shardlab train dreamshard_policy --store runs/dream.db --out dreamshard_policy.pt --ngpu 4 8",
                    "shardlab train dreamshard_policy --store runs/dream.db --out dreamshard_policy.pt "
                    "--iterations 12 --updates-per-iteration 150 --probe-every 50"]),
                "autoshard_policy": (AutoShardArgs, "AutoShard", "autoshard", [
                    "shardlab train autoshard_policy --store runs/auto.db --out autoshard_policy.pt --ngpu 4 8",
                    "shardlab train autoshard_policy --store runs/auto.db --out autoshard_policy.pt "
                    "--updates 2400 --refit-every 400 --measure-plans 4"])}
    for kind, (config, method, model, examples) in policies.items():
        k = add_verb(kinds, kind, f"train {method}'s RL policy against a cost model, measuring its plans into "
                     "--store as it goes", examples, command="campaigns:cmd_train")
        k.add_argument("--out", required=True, help="policy file to write")
        k.add_argument("--store", help="SQLite sample store the policy's measured plans go to (required)")
        k.add_argument("--dataset", default="cpu", help="shipped measured dataset of compute samples "
                                                        "(default %(default)s)")
        k.add_argument("--cost-model", default=None,
                       help=f"cost model: shipped name or manifest path, for --profile (default {model})")
        add_dataclass_arguments(k, config, POLICY_RENAMED[kind])
        if kind == "autoshard_policy":    # refused with the new spelling (checks.py)
            k.add_argument("--iterations", type=int, default=None, help=argparse.SUPPRESS)
        k.add_argument("--json", action="store_true")

    p = add_verb(sub, "calibrate", "calibrate a cost model's column-split predictions (NeuroShard's split guard)", [
        "shardlab calibrate my_model.json --store runs/broad.db"], command="campaigns:cmd_calibrate")
    p.add_argument("model", help="shipped cost model name or manifest path (its manifest is updated)")
    p.add_argument("--store", help="SQLite sample store (default: the shipped dataset)")
    p.add_argument("--dataset", default="cpu/broad", help="shipped measured dataset with column-slice samples "
                                                           "(default %(default)s)")
    p.add_argument("--profile", default=None, help="hardware profile (shipped model and samples)")
    p.add_argument("--quantile", type=float, default=C.SPLIT_GUARD_QUANTILE,
                   help="quantile of log(measured/predicted) the guard charges (default %(default)s)")
    p.add_argument("--json", action="store_true")
