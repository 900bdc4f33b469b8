"""Sharders: one module per method behind one :class:`Sharder` protocol.

Importing this package registers the built-in sharders (heuristics, NeuroShard; DreamShard and AutoShard lazily).
"""

from shardlab.search import heuristics  # noqa: F401  (registers the heuristics)
from shardlab.search import neuroshard  # noqa: F401  (registers neuroshard, neuroshard_tw)
from shardlab.search.base import (Sharder, get_sharder, method_list, register_sharder, run_sharder,
                                  run_sharders, sharder_names)



def _lazy(module: str, cls: str):
    """Factory importing ``module`` only when the sharder is asked for (they import torch)."""
    import importlib

    return lambda: getattr(importlib.import_module(module), cls)()


register_sharder("dreamshard", _lazy("shardlab.search.dreamshard", "DreamShardSharder"))
register_sharder("autoshard", _lazy("shardlab.search.autoshard", "AutoShardSharder"))


def _torchrec(name: str, free: bool):
    def make():
        from shardlab.search.torchrec_planner import CONSTRAINED, FREE, TorchRecSharder

        return TorchRecSharder(name=name, sharding_types=FREE if free else CONSTRAINED)
    return make


register_sharder("torchrec", _torchrec("torchrec", False))
register_sharder("torchrec_free", _torchrec("torchrec_free", True))

__all__ = ["Sharder", "get_sharder", "method_list", "register_sharder", "run_sharder", "run_sharders",
           "sharder_names"]
