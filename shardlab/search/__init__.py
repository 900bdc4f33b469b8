"""Sharders: one module per method behind one :class:`Sharder` protocol.

Importing this package registers the built-in sharders: the five heuristics, NeuroShard,
TorchRec's planner (constrained and free), and DreamShard and AutoShard (imported when first
asked for: they import torch). ``get_sharder("name[key=value,...]")`` builds one, configured
once (``docs/methods.md`` lists every method's options).
"""

from shardlab.search import heuristics  # noqa: F401  (registers the heuristics)
from shardlab.search import neuroshard  # noqa: F401  (registers neuroshard)
from shardlab.search import optimal  # noqa: F401  (registers the exact planner)
from shardlab.search.registry import (ALIASES, CandidateSharder, Sharder, get_sharder, method_list, parse_method,
                                      register_sharder, run_sharder, run_sharders, sharder_for, sharder_names,
                                      sharder_options)
from shardlab.search.torchrec_planner import CONSTRAINED, FREE, TorchRecSharder

register_sharder("dreamshard", "shardlab.search.dreamshard:DreamShardSharder")
register_sharder("autoshard", "shardlab.search.autoshard:AutoShardSharder")
register_sharder("torchrec", TorchRecSharder, name="torchrec", sharding_types=CONSTRAINED)
register_sharder("torchrec_free", TorchRecSharder, name="torchrec_free", sharding_types=FREE)

__all__ = ["ALIASES", "CandidateSharder", "Sharder", "get_sharder", "method_list", "parse_method", "register_sharder",
           "run_sharder", "run_sharders", "sharder_for", "sharder_names", "sharder_options"]
