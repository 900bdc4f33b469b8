"""Export a Plan for TorchRec: per-table ``ParameterSharding``-equivalent entries and
``ParameterConstraints`` (TORCHREC_PLANNER.md section 3), as JSON, and rebuild a TorchRec
``ShardingPlan`` from that JSON where torchrec is installed.

JSON shape: ``{"module": "<path>", "plan": {table: {"sharding_type", "compute_kernel",
"ranks", "shards": [{"shard_offsets": [row, col], "shard_sizes": [rows, cols],
"placement": "rank:r/cuda:r"}]}}, "constraints": {table: {"sharding_types",
"compute_kernels", "pooling_factors"}}}``. Sharding types are inferred from the placements:
one whole block = table_wise; full-row column blocks = column_wise; full-column row blocks on
ranks 0..G-1 in order = row_wise; anything else is rejected with a one-line error.
"""

from __future__ import annotations

from typing import Any, Mapping

from shardlab.errors import ShardlabError
from shardlab.plan import Plan, validate_plan
from shardlab.tables import Task


def sharding_type_of(table: str, rows: int, dim: int, blocks: list[Any]) -> str:
    """TorchRec sharding type of one table's placements (see the module docstring)."""
    if len(blocks) == 1 and blocks[0].rows == rows and blocks[0].cols == dim:
        return "table_wise"
    if all(b.rows == rows and b.row_offset == 0 for b in blocks):
        return "column_wise"
    if all(b.cols == dim for b in blocks) and [b.device for b in sorted(blocks, key=lambda b: b.row_offset)] \
            == list(range(len(blocks))):
        return "row_wise"
    raise ShardlabError(f"export-torchrec: table '{table}': placements are neither table-, column- nor "
                        "row-wise in TorchRec's layouts")


def export_torchrec(task: Task, plan: Plan, module: str = "sparse.ebc", local_world_size: int | None = None
                    ) -> dict[str, Any]:
    """The export JSON (module docstring) of a validated plan."""
    validate_plan(task, plan)
    lws = local_world_size or plan.ngpu
    by_table: dict[str, list[Any]] = {}
    for p in plan.placements:
        by_table.setdefault(p.table, []).append(p)
    out: dict[str, Any] = {"module": module, "task": task.name, "method": plan.method, "world_size": plan.ngpu,
                           "plan": {}, "constraints": {}}
    for t in task.tables:
        blocks = sorted(by_table[t.name], key=lambda b: (b.row_offset, b.col_offset))
        kind = sharding_type_of(t.name, t.rows, t.dim, blocks)
        out["plan"][t.name] = {
            "sharding_type": kind, "compute_kernel": "fused", "ranks": [b.device for b in blocks],
            "shards": [{"shard_offsets": [b.row_offset, b.col_offset], "shard_sizes": [b.rows, b.cols],
                        "placement": f"rank:{b.device}/cuda:{b.device % lws}"} for b in blocks]}
        out["constraints"][t.name] = {"sharding_types": [kind], "compute_kernels": ["fused"],
                                      "pooling_factors": [t.pooling_factor]}
    return out


def export_for_device(data: Mapping[str, Any], device: str) -> dict[str, Any]:
    """The export JSON with every shard placed on ``device`` of its rank: ``"cuda"`` keeps
    ``rank:r/cuda:<local r>``; ``"cpu"`` gives ``rank:r/cpu`` (TorchRec refuses CUDA placements for
    shards it allocates on the CPU: "Local shard tensor device does not match")."""
    if device == "cuda":
        return dict(data)
    if device != "cpu":
        raise ShardlabError(f"export-torchrec: field 'device' = {device!r} must be 'cpu' or 'cuda'")
    plan = {name: {**e, "shards": [{**s, "placement": f"rank:{s['placement'].split('/')[0].split(':')[1]}/cpu"}
                                   for s in e["shards"]]}
            for name, e in data["plan"].items()}
    return {**data, "plan": plan}


def sharding_plan_from_export(data: Mapping[str, Any]):
    """A TorchRec ``ShardingPlan`` rebuilt from :func:`export_torchrec`'s JSON (needs torchrec)."""
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ParameterSharding, ShardingPlan

    tables = {}
    for name, e in data["plan"].items():
        spec = EnumerableShardingSpec([ShardMetadata(shard_offsets=list(s["shard_offsets"]),
                                                     shard_sizes=list(s["shard_sizes"]), placement=s["placement"])
                                       for s in e["shards"]])
        tables[name] = ParameterSharding(sharding_type=e["sharding_type"], compute_kernel=e["compute_kernel"],
                                         ranks=list(e["ranks"]), sharding_spec=spec)
    module_plan = EmbeddingModuleShardingPlan()
    module_plan.update(tables)
    return ShardingPlan({data["module"]: module_plan})
