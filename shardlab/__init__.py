"""shardlab: an experimentation workbench for embedding-table sharding (DLRM).

Public values: :class:`Table`, :class:`Task`, :class:`Placement`, :class:`Plan`; JSON I/O in
:mod:`shardlab.io`; data in :mod:`shardlab.data`; sharders in :mod:`shardlab.search`.
"""

from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.plan import Placement, Plan, device_memory_bytes, validate_plan
from shardlab.tables import Table, Task

__version__ = "0.1.0"

__all__ = ["Table", "Task", "Placement", "Plan", "validate_plan", "device_memory_bytes",
           "ShardlabError", "InfeasibleError", "__version__"]
