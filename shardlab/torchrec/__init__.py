"""shardlab inside TorchRec (needs torchrec): :class:`ShardlabPlanner`, a drop-in for TorchRec's
``EmbeddingShardingPlanner``; :func:`table_stats`, table statistics from the user's own
``KeyedJaggedTensor`` batches; :class:`ShardlabPerfEstimator`, shardlab's learned costs inside
TorchRec's own planner (``docs/torchrec.md``)."""

from shardlab.costmodel.torchrec_estimator import ShardlabPerfEstimator
from shardlab.torchrec.planner import ShardlabPlanner, ShardlabPlannerError
from shardlab.torchrec.sample_stats import table_stats

__all__ = ["ShardlabPerfEstimator", "ShardlabPlanner", "ShardlabPlannerError", "table_stats"]
