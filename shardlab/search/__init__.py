"""Sharders: one module per method behind one :class:`Sharder` protocol.

Importing this package registers the built-in sharders (the heuristics so far).
"""

from shardlab.search import heuristics  # noqa: F401  (registers the heuristics)
from shardlab.search.base import (Sharder, get_sharder, register_sharder, run_sharder,
                                  run_sharders, sharder_names)

__all__ = ["Sharder", "get_sharder", "register_sharder", "run_sharder", "run_sharders",
           "sharder_names"]
