"""``python -m shardlab.dist``: evaluations whose ranks are started by ``torchrun`` (one process
per GPU, on one host or many) instead of being spawned on this host. The same verbs and flags are
``shardlab dist ...`` (built once, in ``shardlab/cli/dist_flags.py``); this module is the one to name to
torchrun, since it leaves each rank without the interpreter's teardown (the end of this file).

    torchrun --nnodes 2 --nproc-per-node 4 --node-rank N --master-addr HOST --master-port PORT \\
        -m shardlab.dist evaluate task.json plan.json [more plans] --torchrec [--rounds 3] --out eval.json

Every process reads the same task and plans; ``torchrun`` sets ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``, and the group is joined with ``env://``
(NCCL on a CUDA profile, each process on GPU ``LOCAL_RANK``; gloo on CPU). ``WORLD_SIZE`` must be
the task's ``ngpu``. The ranks run the TorchRec evaluator's rounds
(:func:`shardlab.torchrec.evaluator.rank_rounds`), rank 0 gathers every rank's step times
and alone writes ``--out``: the Evaluation JSON of the plan (a list for several), exactly as
``shardlab evaluate --torchrec [--whole-step] --json`` prints it (with ``--whole-step``: the whole
DLRM step's Evaluation with the embedding part's under ``"embeddings"``). Errors are one line on stderr, exit status 2.

``--measure`` runs shardlab's own measurement (:class:`~shardlab.evaluate.measured.MeasuredEvaluator`)
on the group instead: rank g times device g's fused shard on its own device, the all-to-alls run
between the torchrun ranks, the rounds are the same paired rounds (``--warmup-rounds`` untimed
first), and ``source`` says ``(torchrun: G ranks, each timing its own device's shards)``.

    torchrun ... -m shardlab.dist measure-comm --store comm.db --samples 500 [--seed 0] [--profile h200]

measures the comm campaign (``shardlab measure comm``) between the torchrun ranks (``WORLD_SIZE``
of them, one process per GPU); rank 0 alone opens the store, adds each sample as it is measured
(an interrupted run keeps what it measured and a rerun resumes) and records the launcher in the
provenance.

A rank stopped by torchrun because another failed, or whose collective fails because a peer
died, prints one line (``shardlab.dist: rank R: ...``) and exits 2 without writing ``--out``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist

from shardlab.bounds import check_bounds
from shardlab.cli.arguments import OneLineParser, torchrec_steps
from shardlab.cli.checks import check_args
from shardlab.cli.dist_flags import add_dist_verbs
from shardlab.cli.evaluate import load_plans
from shardlab.errors import ShardlabError
from shardlab.evaluate.measured import MeasuredEvaluator
from shardlab.evaluate.stats import check_margin
from shardlab.torchrec.evaluator import (EMBEDDINGS, WHOLE, evaluations, prepare, quiet_torchrec_logs,
                                             rank_budget_bytes, rank_rounds)
from shardlab.io import load_task, write_json_atomic
from shardlab.measure.campaign import run_comm_campaign
from shardlab.measure.group_bench import GroupBench
from shardlab.measure.hardware import get_profile, profile_with


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
    """The ``python -m shardlab.dist`` command line: the flags of ``shardlab dist``
    (:func:`shardlab.cli.dist_flags.add_dist_verbs`)."""
    parser = OneLineParser(prog="python -m shardlab.dist", description=__doc__.splitlines()[0])
    add_dist_verbs(parser.add_subparsers(dest="dist_verb", required=True))
    return parser


@contextmanager
def group(profile: Any, timeout_s: float) -> Iterator[tuple[int, int, int]]:
    """Join the torchrun ranks' group (env://; NCCL and GPU ``LOCAL_RANK`` on a CUDA profile, gloo on
    CPU) for the block; yields (RANK, WORLD_SIZE, LOCAL_RANK). One line for a CUDA profile without
    NCCL or without GPU ``LOCAL_RANK``."""
    rank, world, local = torchrun_env()
    if profile.device == "cuda":
        if not dist.is_nccl_available():
            raise ShardlabError("shardlab.dist: profile device is cuda but this torch has no NCCL")
        if torch.cuda.device_count() <= local:
            raise ShardlabError(f"shardlab.dist: LOCAL_RANK = {local} but this host sees "
                                f"{torch.cuda.device_count()} GPUs")
        torch.cuda.set_device(local)
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        dist.init_process_group("nccl" if profile.device == "cuda" else "gloo", init_method="env://",
                                timeout=datetime.timedelta(seconds=timeout_s))
        try:
            torch.set_num_threads(max(1, profile.threads))
            yield rank, world, local
            dist.barrier()            # nobody tears the group down while a peer still reads from it
        finally:
            dist.destroy_process_group()
    finally:
        signal.signal(signal.SIGTERM, previous)


def evaluate(args: argparse.Namespace) -> dict[str, Any] | list[dict[str, Any]] | None:
    """Run this rank's part; rank 0 returns the Evaluation JSON (others None)."""
    _, world, _ = torchrun_env()
    task = load_task(args.task)
    if world != task.ngpu:
        raise ShardlabError(f"shardlab.dist: WORLD_SIZE = {world} but task '{task.name}' has field 'ngpu' = "
                            f"{task.ngpu}: start {task.ngpu} processes in all (nnodes x nproc-per-node)")
    plans, reference = load_plans(task, args.plans, args.reference)
    args.steps, args.warmup_steps = torchrec_steps(args)
    prof = profile_with(args.profile, args.batch_size)
    given = ("batch_size",) if args.batch_size is not None else ()
    check_bounds("shardlab.dist", args, "rounds", "steps", "warmup_steps", "warmup_rounds", "seed", *given)
    check_margin(args.margin, "shardlab.dist")
    run = _measured if args.measure else _torchrec
    return run(args, task, plans, reference, prof)


def _measured(args: argparse.Namespace, task: Any, plans: dict, reference: str | None, prof: Any) -> Any:
    """``--measure``: every rank runs the measured evaluator on the group; rank 0 returns the JSON."""
    with group(prof, args.timeout_s) as (rank, _, _):
        ev = MeasuredEvaluator(prof, rounds=args.rounds, warmup_rounds=args.warmup_rounds, seed=args.seed,
                               reference=reference, lower_bound=not args.no_bound, pin=False,
                               progress=rank == 0, group=GroupBench.for_profile(prof), margin=args.margin)
        out = [e.to_dict() for e in ev.evaluate(task, plans).values()]
    if rank != 0:
        return None
    return out[0] if len(out) == 1 else out


def _torchrec(args: argparse.Namespace, task: Any, plans: dict, reference: str | None, prof: Any) -> Any:
    """``--torchrec``: every rank trains its part of every plan; rank 0 gathers and returns the JSON."""
    job = prepare(task, plans, prof, args.rounds, args.seed, (EMBEDDINGS, WHOLE) if args.whole_step else (EMBEDDINGS,))
    with group(prof, args.timeout_s) as (rank, world, _):
        quiet_torchrec_logs()
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        mine = rank_rounds(job.task, job.exports, prof, job.orders, args.steps, args.warmup_steps, rank, world,
                           job.kinds, rank_budget_bytes(local_world))
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, mine)
    if rank != 0:
        return None
    times = {item: np.stack([np.asarray(gathered[r][item]) for r in range(world)], axis=2) for item in job.exports}
    emb = evaluations(job, plans, times, args.seed, reference, EMBEDDINGS, args.margin)
    if args.whole_step:
        whole = evaluations(job, plans, times, args.seed, reference, WHOLE, args.margin)
        out = [{**whole[k].to_dict(), "embeddings": emb[k].to_dict()} for k in plans]
    else:
        out = [e.to_dict() for e in emb.values()]
    return out[0] if len(out) == 1 else out


def profile_comm(args: argparse.Namespace) -> int:
    """``measure-comm``: the comm campaign between the torchrun ranks; returns samples added."""
    check_bounds("shardlab.dist", args, "samples", "seed", "max_delay_ms")
    prof = get_profile(args.profile)
    with group(prof, args.timeout_s) as (rank, world, _):
        if world < 2:
            raise ShardlabError(f"shardlab.dist: WORLD_SIZE = {world}: an all-to-all needs >= 2 ranks")
        added = run_comm_campaign(args.store, args.samples, world, prof, args.seed, args.max_delay_ms,
                                  progress=rank == 0, bench=GroupBench.for_profile(prof))
    return added if rank == 0 else -1


def _stopped(signum: int, frame: Any) -> None:
    """SIGTERM from torchrun (another rank failed): one line, exit 2, nothing written."""
    rank = os.environ.get("RANK", "?")
    print(f"shardlab.dist: rank {rank}: stopped by the launcher (signal {signum}; another rank failed or "
          "the job was cancelled); nothing written", file=sys.stderr, flush=True)
    os._exit(2)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m shardlab.dist``; returns the exit status."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run this rank's part of the parsed ``dist`` verb (ranges checked as every verb's:
    :func:`~shardlab.cli.checks.check_args`); returns the exit status, 2 with one line on error."""
    try:
        check_args(args)
        if args.dist_verb == "measure-comm":
            added = profile_comm(args)
            if added >= 0:
                print(f"shardlab.dist: {added} comm sample(s) added -> {args.store}")
            return 0
        result = evaluate(args)
        if result is not None:
            write_json_atomic(args.out, result)
            print(f"shardlab.dist: {len(result) if isinstance(result, list) else 1} evaluation(s) -> {args.out}")
    except ShardlabError as e:
        print(f"shardlab.dist: error: {str(e).removeprefix('shardlab.dist: ')}", file=sys.stderr)
        return 2
    except Exception as e:  # a collective that failed: a peer rank died or the network broke
        if not _is_collective_failure(e):
            raise
        lines = str(e).strip().splitlines()
        print(f"shardlab.dist: rank {os.environ.get('RANK', '?')}: a collective failed (another rank died or the "
              f"network broke): {type(e).__name__}: {lines[0] if lines else ''}", file=sys.stderr)
        return 2
    return 0


def _is_collective_failure(e: BaseException) -> bool:
    """Whether ``e`` is torch.distributed's report of a broken group (gloo/NCCL/store errors)."""
    kinds = tuple(k for k in (getattr(dist, "DistError", None), getattr(dist, "DistBackendError", None),
                              getattr(dist, "DistNetworkError", None)) if k is not None)
    text = str(e)
    return isinstance(e, kinds) or (isinstance(e, RuntimeError) and any(
        m in text for m in ("Connection closed by peer", "Connection reset by peer", "gloo", "NCCL", "Timed out")))


if __name__ == "__main__":
    # The group is torn down and every output written and flushed by now; leave without the
    # interpreter's teardown, where a non-master gloo rank was seen to abort in a C++ destructor
    # ("terminate called without an active exception", SIGABRT) after finishing its work, which
    # left the other node's launcher waiting on its exit barrier.
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
