"""The long-running verbs of the ``shardlab`` command line: ``profile compute|comm|single|plans``
(measurement campaigns into a sample store), ``train KIND`` (cost models and RL policies) and
``calibrate``. Arguments are parsed in :mod:`shardlab.cli.parser`; each verb prints one line
(``--json``: the data).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from shardlab.cli import emit
from shardlab.cli.arguments import dataclass_from_args
from shardlab.costmodel.bundle import load_bundle, models_dir, resolve_model_path, write_calibration
from shardlab.costmodel.topology_comm import topology_for
from shardlab.costmodel.train import calibrate_held_out, load_records, load_samples, train_bundle
from shardlab.errors import ShardlabError
from shardlab.paths import check_output_path
from shardlab.workflows.hardware_derive import derive_profile
from shardlab.workflows.hardware_new import new_profile
from shardlab.workflows.plan_campaign import run_plan_campaign
from shardlab.workflows.rl_args import AutoShardArgs, DreamShardArgs
from shardlab.workflows.train_autoshard import train_autoshard
from shardlab.workflows.train_dreamshard import train_dreamshard
from shardlab.measure.broad_campaign import run_broad_campaign, space_from_json
from shardlab.measure.campaign import run_comm_campaign, run_compute_campaign, run_single_table_costs
from shardlab.measure.hardware import profile_with
from shardlab.measure.store import SampleStore


def _existing_store(path: str | None) -> None:
    """Refuse (one line) a store to read from that does not exist, rather than create it empty."""
    if path is not None and not Path(path).is_file():
        raise ShardlabError(f"option '--store' = {path!r}: no such sample store (nothing to read)")


def cmd_measure_compute(args: argparse.Namespace) -> None:
    """Run (or resume) a compute campaign into a sample store."""
    prof = profile_with(args.profile, args.batch_size, args.repeats, args.warmup)
    deadline = None if args.minutes is None else time.monotonic() + 60.0 * args.minutes
    if args.pool == "broad":
        space = space_from_json(args.space, **({"row_share": args.row_share} if args.row_share else {}))
        added = run_broad_campaign(args.store, args.samples, prof, space=space,
                                   max_tables=args.max_tables, mem_cap_gb=args.mem_gb,
                                   workers=args.workers, seed=args.seed, progress=not args.no_progress,
                                   deadline=deadline)
    else:
        added = run_compute_campaign(args.store, args.samples, prof, pool=args.pool, split=args.split or "train",
                                     max_tables=args.max_tables, mem_cap_gb=args.mem_gb,
                                     workers=args.workers, seed=args.seed, progress=not args.no_progress,
                                     deadline=deadline)
    with SampleStore(args.store) as store:
        total = store.count("compute")
    emit(args, f"profile compute ({prof.name}): added {added} samples, {total} compute samples in "
               f"{args.store}", {"added": added, "compute_samples": total, "profile": prof.to_dict()})


def cmd_measure_comm(args: argparse.Namespace) -> None:
    """Run (or resume) a comm campaign for each requested device count."""
    prof = profile_with(args.profile, args.batch_size, args.repeats, args.warmup)
    added = {g: run_comm_campaign(args.store, args.samples, g, prof, seed=args.seed,
                                  max_delay_ms=args.max_delay_ms, progress=not args.no_progress)
             for g in args.ngpu}
    with SampleStore(args.store) as store:
        kinds = store.kinds()
    counts = ", ".join(f"G={g}: +{n} ({kinds.get(f'comm:{g}', 0)} stored)" for g, n in added.items())
    emit(args, f"profile comm ({prof.name}): {counts} in {args.store}",
         {"added": added, "stored": kinds, "profile": prof.to_dict()})


def cmd_measure_single(args: argparse.Namespace) -> None:
    """Measure alone every table of the stored compute samples (for fused-vs-sum checks)."""
    _existing_store(args.store)
    prof = profile_with(args.profile, args.batch_size, args.repeats, args.warmup)
    added = run_single_table_costs(args.store, prof, workers=args.workers, max_samples=args.max_samples,
                                   progress=not args.no_progress)
    with SampleStore(args.store) as store:
        total = store.count("single")
    emit(args, f"profile single ({prof.name}): added {added}, {total} single-table costs in {args.store}",
         {"added": added, "single_samples": total, "profile": prof.to_dict()})


def cmd_measure_plans(args: argparse.Namespace) -> None:
    """Measure plans of random tasks (heuristic sharders) into the store (kind plan:<G>)."""
    prof = profile_with(args.profile, args.batch_size, args.repeats, args.warmup)
    added = run_plan_campaign(args.store, args.samples, args.ngpu, prof, pool=args.pool, split=args.split,
                              ntables=(args.min_tables, args.max_tables), mem_cap_gb=args.mem_gb,
                              methods=args.methods, seed=args.seed, progress=not args.no_progress)
    with SampleStore(args.store) as store:
        total = store.count(f"plan:{args.ngpu}")
    emit(args, f"profile plans ({prof.name}, G={args.ngpu}): added {added}, {total} measured plans in "
               f"{args.store}", {"added": added, "plans": total, "profile": prof.to_dict()})


def cmd_train(args: argparse.Namespace) -> None:
    """Train a cost-model bundle (or an RL policy) on measured samples; save it with provenance."""
    check_output_path(args.out)          # before any training; the whole set again before writing
    if args.kind.endswith("_policy"):
        return train_policy(args)
    _existing_store(args.store)
    compute = load_records("compute", args.store, args.dataset, args.profile)
    topology = None
    if args.comm == "topology":   # GPU clusters where no comm was measured: the cited analytic model
        comm = []
        batch = compute[0].profile.get("batch_size") if compute else None
        topology = topology_for(compute[0].profile.get("name") if compute else None, int(batch or 65536))
    else:
        comm = load_records("comm", args.store, args.dataset, args.profile)
    label = f"store:{args.store}" if args.store else f"dataset:{args.dataset}"
    plans = load_records("plan", args.store, args.dataset, args.profile) if args.kind == "dreamshard" else []
    held_out_plans = load_samples("plan_compute", args.store, args.dataset, args.profile, required=False)
    bundle = train_bundle(args.kind, compute, comm, seed=args.seed, epochs=args.epochs,
                          progress=not args.no_progress, data_label=label, plan_samples=plans,
                          pretrain_epochs=args.pretrain_epochs, comm_model=topology,
                          plan_compute_samples=held_out_plans, rank_weight=args.rank_weight)
    bundle.save(args.out)
    h = bundle.heldout
    comm_note = f"{len(comm)} comm samples" if topology is None else "the analytic topology comm model"
    if args.kind == "dreamshard":
        comm_note += f", {len(plans)} measured plans" if plans else ", plans composed from measured ops"
    whole = "".join(f"; {k.replace('_', ' ')} MAPE {v['mape']:.3f}, Spearman {v['spearman']:.3f}"
                    for k, v in h.items() if k.startswith("plan_compute_"))
    emit(args, f"train {args.kind}: {len(compute)} compute samples + {comm_note} ({label}); held-out "
               f"compute MAPE {h['compute_total']['mape']:.3f}, Spearman {h['compute_total']['spearman']:.3f}"
               f"{whole} -> {args.out}", {"out": args.out, "heldout": h})


def cmd_hardware_new(args: argparse.Namespace) -> None:
    """Make (or resume) a hardware profile of this machine (:mod:`shardlab.workflows.hardware_new`)."""
    got = new_profile(args.name, args.minutes, args.like, workers=args.workers, seed=args.seed,
                      progress=not args.no_progress, batch_size=args.batch_size, mem_cap_gb=args.mem_gb)
    held = got["heldout_compute"]
    emit(args, f"hardware new {args.name}: {got['compute_samples']} compute and {got['comm_samples']} comm samples, "
               f"analytic model held-out compute MAPE {held['mape']:.3f}, Spearman {held['spearman']:.3f} -> "
               f"{got['folder']} (use --profile {args.name})", got)


def cmd_hardware_derive(args: argparse.Namespace) -> None:
    """Write an analytic profile's model (:mod:`shardlab.workflows.hardware_derive`)."""
    got = derive_profile(args.name)
    emit(args, f"hardware derive {args.name}: nothing measured; {got['compute']} -> {got['out']} "
               f"(use --profile {args.name})", got)


def cmd_calibrate(args: argparse.Namespace) -> None:
    """Calibrate a bundle's compute model on measured split shards it was not trained on and
    write the calibration into its manifest (the model files are left as they are)."""
    _existing_store(args.store)
    path = resolve_model_path(args.model, args.profile or "cpu")
    bundle = load_bundle(path)
    label = f"store:{args.store}" if args.store else f"dataset:{args.dataset}"
    cal = calibrate_held_out(bundle.compute, load_records("compute", args.store, args.dataset, args.profile),
                             label, args.quantile)
    write_calibration(path, cal.to_dict())
    emit(args, f"calibrate {args.model}: {cal.n} split shards ({label}), median log(measured/predicted) "
               f"{cal.median_log_ratio:+.3f}, q{cal.quantile:g} {cal.log_margin:+.3f} -> split guard x{cal.factor:.3f}"
               f" -> {path}", {"out": str(path), "calibration": cal.to_dict()})


def train_policy(args: argparse.Namespace) -> None:
    """DreamShard / AutoShard policy training; measured plans of the policy go to --store
    (required unless --measure is 0: then nothing is measured and the reward is the cost
    model's alone). The training configuration is the dataclass built from the options it
    generated; the policy's provenance names the cost-model bundle and the compute data."""
    dream = args.kind == "dreamshard_policy"
    config = dataclass_from_args(DreamShardArgs if dream else AutoShardArgs, args)
    measures = config.measure_per_iteration if dream else config.measure_plans
    if not args.store and measures:
        flag = "--measure-per-iteration" if dream else "--measure-plans"
        raise ShardlabError(f"train {args.kind}: field 'store' is required (measured plans of the policy go there; "
                            f"{flag} 0 measures none)")
    compute = [s for s in load_records("compute", None, args.dataset) if ":train:" in s.key]
    name = args.cost_model or ("dreamshard" if dream else "autoshard")
    cost = load_bundle(name, config.profile).unguarded().compute     # the network the policy trains with
    if dream:
        agent = train_dreamshard(config, args.store, cost, compute,
                                 initial_plans=load_records("plan", None, args.dataset))
        last = agent.history_[-1]["mean_predicted_cost_ms"][-10:]
        summary = f"{len(agent.history_)} iterations, last mean predicted cost {sum(last) / len(last):.2f} ms"
    else:
        agent = train_autoshard(config, cost, compute, store=args.store)
        last = [h["mean_reward"] for h in agent.history_[-10:]]
        summary = f"{len(agent.history_)} updates, last mean reward {sum(last) / len(last):.3f}"
    path = resolve_model_path(name, str(config.profile))
    shipped = path.resolve().parent == models_dir(str(config.profile)).resolve()
    bundle = f"datasets/{config.profile}/models/{path.name}" if shipped else str(name)
    agent.provenance_.update({"cost_model_bundle": bundle,
                              "compute_samples": f"dataset:{args.dataset} ({len(compute)} of the pool's train tables)"})
    agent.save(args.out)
    emit(args, f"train {args.kind}: {summary} -> {args.out}", {"out": args.out, "history": agent.history_})
