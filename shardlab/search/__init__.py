"""Sharders: one module per method behind one :class:`Sharder` protocol.

Importing this package registers the built-in sharders: the heuristics, NeuroShard, TorchRec's
planner, and DreamShard and AutoShard (imported when first asked for: they import torch).
``get_sharder(name, **config)`` builds one, configured once (README, "Adding a sharder").
"""

from shardlab.search import heuristics  # noqa: F401  (registers the heuristics)
from shardlab.search import neuroshard  # noqa: F401  (registers neuroshard, neuroshard_tw)
from shardlab.search.base import (Sharder, get_sharder, method_list, register_sharder, run_sharder,
                                  run_sharders, sharder_names, sharder_options)
from shardlab.search.torchrec_planner import CONSTRAINED, FREE, TorchRecSharder

register_sharder("dreamshard", "shardlab.search.dreamshard:DreamShardSharder")
register_sharder("autoshard", "shardlab.search.autoshard:AutoShardSharder")
register_sharder("torchrec", TorchRecSharder, name="torchrec", sharding_types=CONSTRAINED)
register_sharder("torchrec_free", TorchRecSharder, name="torchrec_free", sharding_types=FREE)

__all__ = ["Sharder", "get_sharder", "method_list", "register_sharder", "run_sharder", "run_sharders",
           "sharder_names", "sharder_options"]
