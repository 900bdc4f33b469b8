"""The layouts TorchRec fixes before a method places anything (``ShardlabPlanner``): tables the
constraints allow only row layouts, laid out as TorchRec lays them out, and data-parallel tables,
replicated on every rank; and the Task left for the method."""

from __future__ import annotations

import math
from typing import Any, Sequence

from torchrec.distributed.types import ShardingPlan

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.plan import Placement
from shardlab.tables import Task
from shardlab.torchrec.model_tables import REPLICATED, REPLICATED_KERNEL, ModelTable

#: Sharding types a method places; a table allowed none of them is pinned in a row layout.
PLACED = ("table_wise", "column_wise", "table_column_wise")


def pinned_row_layouts(task: Task, tables: Sequence[ModelTable], lws: int) -> tuple[list[Placement], dict[str, str]]:
    """Placements of the tables allowed no placed type (:data:`PLACED`), in TorchRec's row
    layouts: ceil(rows / n) rows per rank, n = the world (row-wise) or one host of ``lws`` ranks
    (table-row-wise, hosts taken in turn); and {table: layout}."""
    out: list[Placement] = []
    kinds: dict[str, str] = {}
    hosts = max(1, task.ngpu // lws)
    turn = 0
    for t in tables:
        if set(t.allowed) & set(PLACED):
            continue
        rows = task.table(t.name).rows
        if "row_wise" in t.allowed:
            kind, first, n = "row_wise", 0, task.ngpu
        else:
            kind, first, n = "table_row_wise", (turn % hosts) * lws, lws
            turn += 1
        block = math.ceil(rows / n)
        for k in range(n):
            if k * block < rows:
                out.append(Placement(t.name, 0, task.table(t.name).dim, k * block, min(block, rows - k * block),
                                     first + k))
        kinds[t.name] = kind
    return out, kinds


def placed_task(task: Task, rest: Sequence[ModelTable], pinned: Sequence[Placement]) -> Task:
    """The task of the tables the method places: every rank's memory less the most any rank
    gives to the pinned row layouts; one line when nothing is left (also when no table is left
    for the method: the pinned layouts alone must fit)."""
    used = [0] * task.ngpu
    for p in pinned:
        used[p.device] += task.hbm_bytes(task.table(p.table), p.rows, p.cols)
    cap = task.mem_cap_bytes - max(used)
    if cap <= 0:
        raise ShardlabError(f"ShardlabPlanner: the tables constrained to row layouts need {max(used) / C.GB:.3f} GB "
                            f"on a rank, over its {task.mem_cap_gb:.3f} GB")
    keep = {t.name for t in rest}
    if not keep:
        return task
    return Task(task.name, task.ngpu, cap / C.GB, tuple(t for t in task.tables if t.name in keep),
                task.batch_size, task.weights_precision, task.optimizer)


def replicas(replicated: Sequence[ModelTable], world_size: int) -> Any:
    """TorchRec's ``ShardingPlan`` entries of the data-parallel tables: every rank, the dense
    kernel, no sharding spec (as TorchRec's planner writes them), the constraints' fused
    parameters carried."""
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ParameterSharding

    plans: dict[str, Any] = {}
    for t in replicated:
        ps = ParameterSharding(sharding_type=REPLICATED, compute_kernel=REPLICATED_KERNEL,
                               ranks=list(range(world_size)), sharding_spec=None)
        for field, value in t.fused:
            setattr(ps, field, value)
        plans.setdefault(t.path, EmbeddingModuleShardingPlan())[t.table] = ps
    return ShardingPlan(plans)
