"""Everything shardlab does with TorchRec, in one place (``docs/torchrec.md``):

- :class:`ShardlabPlanner` (``planner.py``): shardlab's drop-in for TorchRec's
  ``EmbeddingShardingPlanner``; :func:`table_stats` (``sample_stats.py``): table statistics
  from the user's own ``KeyedJaggedTensor`` batches.
- :class:`TorchRecSharder` (``baseline.py``): TorchRec's own planner as a baseline sharder
  (methods ``torchrec`` and ``torchrec_free``).
- :class:`ShardlabPerfEstimator` (``estimator.py``): shardlab's costs inside TorchRec's planner.
- :class:`TorchRecEvaluator` (``evaluator.py``, the DLRM of ``dlrm_model.py``): a plan applied in
  TorchRec's ``DistributedModelParallel``, real training steps timed in paired rounds.
- ``export.py``: a plan as TorchRec's ``ParameterSharding`` JSON and back (no torchrec needed).
- ``dropin.py``, ``sequence.py``: the drop-in notebook's workflows.

The names above are imported on first use, so ``shardlab.torchrec.export`` loads no torchrec.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module of this folder that defines it.
_WHERE = {"ShardlabPlanner": "planner", "ShardlabPlannerError": "planner", "table_stats": "sample_stats",
          "TorchRecSharder": "baseline", "ShardlabPerfEstimator": "estimator", "TorchRecEvaluator": "evaluator",
          "torchrec_plans": "evaluator"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'shardlab.torchrec' has no attribute {name!r}")
    return getattr(importlib.import_module(f"shardlab.torchrec.{_WHERE[name]}"), name)
