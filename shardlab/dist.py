"""``python -m shardlab.dist``: evaluations whose ranks are started by ``torchrun`` (one process
per GPU, on one host or many) instead of being spawned on this host (issue 15).

    torchrun --nnodes 2 --nproc-per-node 4 --node-rank N --master-addr HOST --master-port PORT \\
        -m shardlab.dist evaluate task.json plan.json [more plans] --torchrec [--rounds 3] --out eval.json

Every process reads the same task and plans; ``torchrun`` sets ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``, and the group is joined with ``env://``
(NCCL on a CUDA profile, each process on GPU ``LOCAL_RANK``; gloo on CPU). ``WORLD_SIZE`` must be
the task's ``ngpu``. The ranks run the TorchRec evaluator's rounds
(:func:`shardlab.evaluate.torchrec_step.rank_rounds`), rank 0 gathers every rank's step times
and alone writes ``--out``: the Evaluation JSON of the plan (a list for several), exactly as
``shardlab evaluate --torchrec [--whole-step] --json`` prints it (with ``--whole-step``: the whole
DLRM step's Evaluation with the embedding part's under ``"embeddings"``). Errors are one line on stderr, exit status 2.

``--measure`` (shardlab's own kernel-by-kernel measurement) is not run under torchrun yet: it
spawns its ranks on one host (``shardlab evaluate --measure``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from typing import Any, Sequence

from shardlab.errors import ShardlabError


def torchrun_env() -> tuple[int, int, int]:
    """(RANK, WORLD_SIZE, LOCAL_RANK) from torchrun's environment; one line when absent."""
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))
    except KeyError as e:
        raise ShardlabError(f"shardlab.dist: environment variable {e.args[0]} is unset: start this module with "
                            "torchrun (e.g. torchrun --nproc-per-node 4 -m shardlab.dist evaluate ...)") from None
    except ValueError:
        raise ShardlabError("shardlab.dist: RANK, WORLD_SIZE and LOCAL_RANK must be integers") from None


def build_parser() -> argparse.ArgumentParser:
    """The ``shardlab.dist`` command line."""
    parser = argparse.ArgumentParser(prog="python -m shardlab.dist", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("evaluate", help="evaluate plans with torchrun-started ranks (rank 0 writes --out)")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("plans", nargs="+", help="Plan JSON files of that task")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--torchrec", action="store_true", help="plans applied in TorchRec, training steps timed")
    how.add_argument("--measure", action="store_true", help="shardlab's own measurement (not under torchrun yet)")
    p.add_argument("--out", required=True, help="Evaluation JSON to write (rank 0)")
    p.add_argument("--rounds", type=int, default=3, help="paired rounds (>= 3 for intervals; default %(default)s)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per plan per round (default %(default)s)")
    p.add_argument("--warmup-steps", type=int, default=2, help="untimed steps per plan first (default %(default)s)")
    p.add_argument("--whole-step", action="store_true",
                   help="also time TorchRec's whole DLRM step; the cost is the whole step, the embedding part beside it")
    p.add_argument("--profile", default="cpu", help="hardware profile (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=None, help="override the profile's global batch size")
    p.add_argument("--reference", default=None, help="method of the plan to compare against (default: best baseline)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=900.0, help="bound on every collective (s)")
    return parser


def evaluate(args: argparse.Namespace) -> dict[str, Any] | list[dict[str, Any]] | None:
    """Run this rank's part; rank 0 returns the Evaluation JSON (others None)."""
    import torch
    import torch.distributed as dist

    from shardlab.cli_evaluate import load_plans
    from shardlab.evaluate.torchrec_step import (EMBEDDINGS, WHOLE, check_counts, evaluations, prepare,
                                                 quiet_torchrec_logs, rank_budget_bytes, rank_rounds)
    from shardlab.io import load_task
    from shardlab.profile.hardware import profile_with

    if args.measure:
        raise ShardlabError("shardlab.dist: --measure does not run under torchrun yet; use --torchrec, or "
                            "`shardlab evaluate --measure` on one host")
    rank, world, local = torchrun_env()
    task = load_task(args.task)
    if world != task.ngpu:
        raise ShardlabError(f"shardlab.dist: WORLD_SIZE = {world} but task '{task.name}' has field 'ngpu' = "
                            f"{task.ngpu}: start {task.ngpu} processes in all (nnodes x nproc-per-node)")
    plans, reference = load_plans(task, args.plans, args.reference)
    prof = profile_with(args.profile, args.batch_size)
    check_counts(args.rounds, args.steps, args.warmup_steps, "shardlab.dist")
    if prof.device == "cuda":
        if not dist.is_nccl_available():
            raise ShardlabError("shardlab.dist: profile device is cuda but this torch has no NCCL")
        if torch.cuda.device_count() <= local:
            raise ShardlabError(f"shardlab.dist: LOCAL_RANK = {local} but this host sees "
                                f"{torch.cuda.device_count()} GPUs")
        torch.cuda.set_device(local)
    job = prepare(task, plans, prof, args.rounds, args.seed, (EMBEDDINGS, WHOLE) if args.whole_step else (EMBEDDINGS,))
    dist.init_process_group("nccl" if prof.device == "cuda" else "gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        quiet_torchrec_logs()
        torch.set_num_threads(max(1, prof.threads))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        mine = rank_rounds(job.task, job.exports, prof, job.orders, args.steps, args.warmup_steps, rank, world,
                           job.kinds, rank_budget_bytes(local_world))
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, mine)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    import numpy as np

    times = {item: np.stack([np.asarray(gathered[r][item]) for r in range(world)], axis=2) for item in job.exports}
    emb = evaluations(job, plans, times, args.seed, reference, EMBEDDINGS)
    if args.whole_step:
        whole = evaluations(job, plans, times, args.seed, reference, WHOLE)
        out = [{**whole[k].to_dict(), "embeddings": emb[k].to_dict()} for k in plans]
    else:
        out = [e.to_dict() for e in emb.values()]
    return out[0] if len(out) == 1 else out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        result = evaluate(args)
        if result is not None:
            from shardlab.io import write_json_atomic

            write_json_atomic(args.out, result)
            print(f"shardlab.dist: {len(result) if isinstance(result, list) else 1} evaluation(s) -> {args.out}")
    except ShardlabError as e:
        print(f"shardlab.dist: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
