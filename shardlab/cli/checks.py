"""Checks of the ``shardlab`` command line's parsed arguments, before any verb runs.

Every numeric option has a range and nonsense gets one line naming the option and its value
(:class:`~shardlab.errors.ShardlabError`, exit status 2) instead of a traceback or a silently
odd result; options that only mean something with another option are refused without it.
``tests/test_hostile_inputs.py`` and ``tests/test_hostile_inputs_bounds.py`` hold every case.
"""

from __future__ import annotations

import argparse
import re

from shardlab.bounds import BOUNDS
from shardlab.constants import SEQUENTIAL_LOOKS
from shardlab.errors import ShardlabError
from shardlab.measure.hardware import get_profile

#: Path options: an empty value is refused (it would silently mean "no output" or "here").
PATH_OPTIONS = ("out", "html", "store", "journal", "tables", "model")

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
    for dest, bound in BOUNDS.items():     # every option named as the setting it sets has its range
        value = getattr(args, dest, None)
        if value is None or isinstance(value, bool):
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if not bound.admits(v):
                raise ShardlabError(f"option '{_flag(dest)}' = {v!r} {bound.requirement}")
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
