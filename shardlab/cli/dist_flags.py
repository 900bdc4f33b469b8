"""The flags of the ``dist`` verbs (run by :mod:`shardlab.cli.dist`): evaluations and the comm
campaign on ranks that ``torchrun`` starts (one process per GPU, on one host or many), instead of
ranks spawned on this host.

    torchrun --nnodes 2 --nproc-per-node 4 ... -m shardlab.dist evaluate task.json plan.json --torchrec --out e.json
    torchrun --nproc-per-node 4 -m shardlab dist evaluate task.json plan.json --measure --out e.json

Both spellings take the same flags, built here (:func:`add_dist_verbs`); ``python -m
shardlab.dist`` (:mod:`shardlab.dist`, which runs the ranks) is the one the docs use, because it
leaves each rank without the interpreter's teardown. The TorchRec options and defaults are
``shardlab evaluate --torchrec``'s (:func:`~shardlab.cli.arguments.add_torchrec_step_arguments`,
``constants.TORCHREC_*``); ranges are checked from ``shardlab.bounds`` like every other verb's.
Building the parser imports no torch.
"""

from __future__ import annotations

import argparse
from typing import Any

from shardlab import constants as C
from shardlab.cli.arguments import add_torchrec_step_arguments, add_verb


def add_dist_verbs(sub: Any) -> None:
    """Add ``evaluate`` and ``measure-comm`` to the sub-parsers ``sub`` (their ``dest`` names the one chosen)."""
    p = add_verb(sub, "evaluate", "evaluate plans with torchrun-started ranks (rank 0 writes --out)", [
        "shardlab dist evaluate task.json a.json b.json --torchrec --out e.json"],
        description="evaluate plans with torchrun-started ranks, rank 0 writing --out; run under torchrun, e.g. "
                    "torchrun --nproc-per-node 2 -m shardlab.dist evaluate task.json a.json b.json --torchrec "
                    "--out e.json")
    p.add_argument("task", help="Task JSON file")
    p.add_argument("plans", nargs="+", help="Plan JSON files of that task")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--torchrec", action="store_true", help="plans applied in TorchRec, training steps timed")
    how.add_argument("--measure", action="store_true",
                     help="shardlab's own measurement: each rank times its own device's shards, all-to-alls between ranks")
    p.add_argument("--out", required=True, help="Evaluation JSON to write (rank 0)")
    p.add_argument("--rounds", type=int, default=C.TORCHREC_ROUNDS,
                   help="paired rounds (>= 3 for intervals; default %(default)s)")
    add_torchrec_step_arguments(p, "--torchrec: ")
    p.add_argument("--profile", default=C.MEASURE_PROFILE, help="hardware profile (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=None, help="override the profile's global batch size")
    p.add_argument("--reference", default=None, help="method of the plan to compare against (default: best baseline)")
    p.add_argument("--warmup-rounds", type=int, default=1, help="--measure: untimed rounds first (default %(default)s)")
    p.add_argument("--no-bound", action="store_true", help="--measure: skip the task's lower bound")
    p.add_argument("--seed", type=int, default=0, help="the rounds' orders and the bootstrap (default %(default)s)")
    p.add_argument("--margin", type=float, default=C.EQUIVALENCE_MARGIN,
                   help="equivalence margin M of the verdicts: 'equivalent' when the 95%% interval of the paired "
                        "ratio lies inside [1/(1+M), 1+M] (default %(default)s)")
    _timeout(p)
    c = add_verb(sub, "measure-comm", "comm campaign between the torchrun ranks (rank 0 writes --store)", [
        "shardlab dist measure-comm --store comm.db --samples 500"],
        description="the comm campaign between torchrun-started ranks, rank 0 writing --store; run under torchrun, "
                    "e.g. torchrun --nproc-per-node 4 -m shardlab.dist measure-comm --store comm.db --samples 500")
    c.add_argument("--store", required=True, help="SQLite sample store (rank 0's file; resumable)")
    c.add_argument("--samples", type=int, required=True, help="samples 0..N-1 of the campaign")
    c.add_argument("--profile", default=C.MEASURE_PROFILE, help="hardware profile (default %(default)s)")
    c.add_argument("--seed", type=int, default=0, help="seed of the samples (default %(default)s)")
    c.add_argument("--max-delay-ms", type=float, default=C.COMM_DELAY_MS,
                   help="largest random forward delay (ms; default %(default)s)")
    _timeout(c)


def _timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout-s", type=float, default=C.DIST_TIMEOUT_S,
                   help="bound on every collective (s; default %(default)s)")
