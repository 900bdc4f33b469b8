"""``shardlab dist evaluate|measure-comm``: this rank's part of a torchrun-started evaluation or
comm campaign, run by :func:`shardlab.dist.run` (flags: :mod:`shardlab.cli.dist_flags`)."""

from __future__ import annotations

import argparse

from shardlab.dist import run


def cmd_dist(args: argparse.Namespace) -> None:
    """Run the parsed ``dist`` verb; a failure is already one line on stderr and leaves with exit
    status 2."""
    code = run(args)
    if code:
        raise SystemExit(code)
