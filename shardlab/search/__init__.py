"""Sharders: one module per method behind one :class:`Sharder` protocol.

Importing this package registers the built-in sharders: the five heuristics, NeuroShard,
and, imported when first asked for, TorchRec's planner (constrained and free; ``shardlab/torchrec/``)
and DreamShard and AutoShard (they import torch). ``get_sharder("name[key=value,...]")`` builds one, configured
once (``docs/methods.md`` lists every method's options).
"""

from shardlab import constants as C
from shardlab.search import heuristics  # noqa: F401  (registers the heuristics)
from shardlab.search import neuroshard  # noqa: F401  (registers neuroshard)
from shardlab.search import optimal  # noqa: F401  (registers the exact planner)
from shardlab.search.registry import (RENAMED, CandidateSharder, Sharder, get_sharder, method_list, parse_method,
                                      register_sharder, run_sharder, run_sharders, sharder_for, sharder_names,
                                      sharder_options)

register_sharder("dreamshard", "shardlab.search.dreamshard:DreamShardSharder")
register_sharder("autoshard", "shardlab.search.autoshard:AutoShardSharder")
register_sharder("torchrec", "shardlab.torchrec.baseline:TorchRecSharder", name="torchrec",
                 sharding_types=C.TORCHREC_CONSTRAINED_TYPES)
register_sharder("torchrec_free", "shardlab.torchrec.baseline:TorchRecSharder", name="torchrec_free",
                 sharding_types=C.TORCHREC_SHARDING_TYPES)

__all__ = ["RENAMED", "CandidateSharder", "Sharder", "get_sharder", "method_list", "parse_method", "register_sharder",
           "run_sharder", "run_sharders", "sharder_for", "sharder_names", "sharder_options"]
