"""The ``shardlab`` command line (``shardlab`` or ``python -m shardlab``).

Verbs: ``tasks``, ``shard``, ``export-torchrec`` (:mod:`~shardlab.cli.plans`); ``profile
compute|comm|single|plans``, ``train KIND``, ``calibrate`` (:mod:`~shardlab.cli.campaigns`);
``evaluate``, ``compare``, ``report`` (:mod:`~shardlab.cli.evaluate`); ``dist evaluate|measure-comm``
under torchrun (:mod:`~shardlab.cli.dist`; flags in :mod:`~shardlab.cli.dist_flags`, shared with :mod:`shardlab.dist`). The parser is
:mod:`~shardlab.cli.parser`; :mod:`~shardlab.cli.checks` checks the parsed options before a verb
runs. Every ``--help`` ends with an example line.

Each verb prints a one-line summary (or, with ``--json``, the machine-readable result) and
exits with status 2 and one line naming the bad input on error (130 when interrupted). The CLI
holds no logic of its own: it parses arguments and calls the package, as the notebooks do.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Sequence

from shardlab.cli.checks import check_args
from shardlab.cli.parser import build_parser
from shardlab.data.hardware_profiles import USER_DIR_ENV
from shardlab.errors import CommBenchError, ShardlabError, printable

__all__ = ["build_parser", "emit", "main"]


def emit(args: argparse.Namespace, summary: str, data: object) -> None:
    """Print the one-line ``summary`` (control characters escaped, long values cut:
    :func:`~shardlab.errors.printable`), or ``data`` as JSON with ``--json``."""
    print(json.dumps(data, indent=1) if args.json else printable(summary))


def run_verb(args: argparse.Namespace) -> None:
    """Run the verb the parser chose: ``args.command`` is ``"module:function"`` of this package,
    imported here, when it runs (the verb modules import torch; ``--help`` does not)."""
    module, function = args.command.split(":")
    getattr(importlib.import_module(f"shardlab.cli.{module}"), function)(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``shardlab`` / ``python -m shardlab``; returns the exit status."""
    args = build_parser().parse_args(argv)
    if getattr(args, "profiles_dir", None):            # before anything reads the profiles (and for child processes)
        os.environ[USER_DIR_ENV] = str(args.profiles_dir)
    try:
        check_args(args)
        run_verb(args)
    except (ShardlabError, CommBenchError) as e:
        print(f"shardlab: error: {printable(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shardlab: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("shardlab: error: out of memory: the inputs ask for more than this machine has (batch size, "
              "tables or rows too large for it?)", file=sys.stderr)
        return 2
    return 0
