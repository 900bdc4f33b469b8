"""Checks of the ``shardlab`` command line's parsed arguments, before any verb runs.

Every numeric option has a range and nonsense gets one line naming the option and its value
(:class:`~shardlab.errors.ShardlabError`, exit status 2) instead of a traceback or a silently
odd result; options that only mean something with another option are refused without it.
``tests/test_hostile_inputs.py`` and ``tests/test_hostile_inputs_bounds.py`` hold every case.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any, Callable

from shardlab.constants import (MAX_BATCH_SIZE, MAX_DELAY_MS, MAX_EPOCHS, MAX_MEM_CAP_GB, MAX_NGPU, MAX_SAMPLES,
                                SEQUENTIAL_LOOKS)
from shardlab.errors import ShardlabError
from shardlab.measure.hardware import get_profile

#: Path options: an empty value is refused (it would silently mean "no output" or "here").
PATH_OPTIONS = ("out", "html", "store", "journal", "tables", "model")

#: option (argparse dest) -> (test, requirement), applied where a verb has the option and it is set.
RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "seed": (lambda v: v >= 0, "must be >= 0"),
    "batch_size": (lambda v: 1 <= v <= MAX_BATCH_SIZE, f"must be in [1, {MAX_BATCH_SIZE:,}]"),
    "repeats": (lambda v: 1 <= v <= 10_000, "must be in [1, 10,000] (timed runs per measurement)"),
    "warmup": (lambda v: 0 <= v <= 10_000, "must be in [0, 10,000] (untimed runs per measurement)"),
    "rounds": (lambda v: 1 <= v <= 1000, "must be in [1, 1000]"),
    "warmup_rounds": (lambda v: 0 <= v <= 100, "must be in [0, 100]"),
    "sittings": (lambda v: 1 <= v <= 100, "must be in [1, 100]"),
    "samples": (lambda v: 0 <= v <= MAX_SAMPLES, f"must be in [0, {MAX_SAMPLES:,}]"),
    "max_samples": (lambda v: 1 <= v <= MAX_SAMPLES, f"must be in [1, {MAX_SAMPLES:,}]"),
    "workers": (lambda v: 1 <= v <= 64, "must be in [1, 64]"),
    "ntables": (lambda v: v >= 1, "must be >= 1"),
    "min_tables": (lambda v: v >= 1, "must be >= 1"),
    "max_tables": (lambda v: v >= 1, "must be >= 1"),
    "mem_gb": (lambda v: math.isfinite(v) and 0 < v <= MAX_MEM_CAP_GB, f"must be a number in (0, {MAX_MEM_CAP_GB:g}]"),
    "row_share": (lambda v: math.isfinite(v) and 0 <= v <= 1, "must be a share in [0, 1]"),
    "max_delay_ms": (lambda v: math.isfinite(v) and 0 <= v <= MAX_DELAY_MS, f"must be in [0, {MAX_DELAY_MS:g}] ms"),
    "assume_zipf": (lambda v: math.isfinite(v) and v > 0, "must be a finite Zipf exponent > 0"),
    "epochs": (lambda v: 1 <= v <= MAX_EPOCHS, f"must be in [1, {MAX_EPOCHS:,}]"),
    "pretrain_epochs": (lambda v: 0 <= v <= MAX_EPOCHS, f"must be in [0, {MAX_EPOCHS:,}]"),
    "verify": (lambda v: 1 <= v <= 20, "must be in [1, 20] (candidate plans measured)"),
    "iterations": (lambda v: v >= 1, "must be >= 1"),
    "updates": (lambda v: v >= 1, "must be >= 1"),
    "cost_epochs": (lambda v: v >= 1, "must be >= 1"),
    "ngpu": (lambda v: 1 <= v <= MAX_NGPU, f"must be in [1, {MAX_NGPU:,}]"),
    "steps": (lambda v: 1 <= v <= 10000, "must be in [1, 10000]"),
    "warmup_steps": (lambda v: 0 <= v <= 1000, "must be in [0, 1000]"),
}

#: Options of the evaluation verbs that also act on the TorchRec evaluator (--torchrec).
TORCHREC_ALSO = ("batch_size", "rounds", "margin", "seed")

#: Options that only act on the TorchRec evaluator.
TORCHREC_ONLY = ("steps", "warmup_steps", "whole_step")

#: Options of the evaluation verbs that only act on measurement: refused without --measure.
MEASURE_ONLY = ("batch_size", "repeats", "warmup", "rounds", "warmup_rounds", "no_pin", "journal", "margin",
                "sittings", "seed", "budget")

#: Verbs whose --batch-size etc. belong to the measuring evaluator.
EVALUATION_VERBS = ("evaluate", "compare", "report")

#: A Python module path (``sparse.ebc``): dotted identifiers.
MODULE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_args(args: argparse.Namespace) -> None:
    """Raise one line for the first argument out of range or out of place (module docstring)."""
    for dest, (ok, requirement) in RANGES.items():
        value = getattr(args, dest, None)
        if value is None or isinstance(value, bool):
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if not ok(v):
                raise ShardlabError(f"option '{_flag(dest)}' = {v!r} {requirement}")
    for dest in PATH_OPTIONS:
        if getattr(args, dest, None) == "":
            raise ShardlabError(f"option '{_flag(dest)}' = '' is empty (give a path)")
    verb = getattr(args, "verb", None)
    for dest in ("name", "module"):
        if getattr(args, dest, None) == "":
            raise ShardlabError(f"option '{_flag(dest)}' = '' is empty (leave it out for the default)")
    if verb not in ("train", "calibrate") and isinstance(getattr(args, "profile", None), str):
        get_profile(args.profile)                      # an unknown profile is refused even where unused
    torchrec = bool(getattr(args, "torchrec", False))
    if verb == "tasks" and getattr(args, "tables", None) is None:
        if getattr(args, "assume_zipf", None) is not None:
            raise ShardlabError(f"option '--assume-zipf' = {args.assume_zipf} only applies with --tables "
                                "(pool tables carry their own lookups)")
    if verb == "tasks" and getattr(args, "tables", None) is not None and getattr(args, "split", None) is not None:
        raise ShardlabError(f"option '--split' = {args.split!r} only applies to pool tables, not with --tables")
    if verb in EVALUATION_VERBS and not getattr(args, "measure", False):
        for dest in MEASURE_ONLY:
            if getattr(args, dest, None) not in (None, False) and not (torchrec and dest in TORCHREC_ALSO):
                raise ShardlabError(f"option '{_flag(dest)}' = {getattr(args, dest)!r} only applies with --measure"
                                    + (" or --torchrec" if dest in TORCHREC_ALSO else ""))
    if getattr(args, "budget", None) is not None and getattr(args, "sittings", None) is not None:
        raise ShardlabError(f"option '--sittings' = {args.sittings} does not go with --budget (the budget decides "
                            f"how many sittings, up to {SEQUENTIAL_LOOKS})")
    if verb in EVALUATION_VERBS and not torchrec:
        for dest in TORCHREC_ONLY:
            if getattr(args, dest, None) not in (None, False):
                raise ShardlabError(f"option '{_flag(dest)}' = {getattr(args, dest)!r} only applies with --torchrec")
    if verb == "shard" and not getattr(args, "verify", None):
        for dest in ("rounds",):
            if getattr(args, dest, None) is not None:
                raise ShardlabError(f"option '{_flag(dest)}' = {getattr(args, dest)!r} only applies with --verify")
    if verb == "export-torchrec" and not MODULE_PATH.fullmatch(args.module or ""):
        raise ShardlabError(f"option '--module' = {args.module!r} must be a dotted module path like 'sparse.ebc'")
    if getattr(args, "command", "").endswith("cmd_measure_compute") and getattr(args, "pool", None) == "broad" \
            and getattr(args, "split", None) is not None:
        raise ShardlabError(f"option '--split' = {args.split!r} does not apply to --pool broad (its tables are drawn, "
                            "not split)")
    if verb == "train" and args.kind == "analytic" and getattr(args, "epochs", None) is not None:
        raise ShardlabError(f"option '--epochs' = {args.epochs} does not apply to analytic (it is fitted by least "
                            "squares, not trained in epochs)")
    if getattr(args, "row_share", 0) and getattr(args, "pool", None) != "broad":
        raise ShardlabError(f"option '--row-share' = {args.row_share} needs --pool broad")
    if getattr(args, "space", "") and getattr(args, "pool", None) != "broad":
        raise ShardlabError(f"option '--space' = {args.space!r} needs --pool broad")
    if getattr(args, "minutes", None) is not None and args.minutes <= 0:
        raise ShardlabError(f"option '--minutes' = {args.minutes} must be positive")
    if verb == "train" and args.kind == "autoshard_policy" and getattr(args, "iterations", None) is not None:
        raise ShardlabError(f"option '--iterations' = {args.iterations} does not apply to autoshard_policy: --updates "
                            "counts its learner updates in all and --refit-every the updates between cost-model refits "
                            "(the former '--iterations I --updates U' is '--updates I*U --refit-every U')")
    if getattr(args, "min_tables", None) and getattr(args, "max_tables", None) and args.min_tables > args.max_tables:
        raise ShardlabError(f"option '--min-tables' = {args.min_tables} must be <= --max-tables ({args.max_tables})")
