"""Export a Plan for TorchRec: per-table ``ParameterSharding``-equivalent entries and
``ParameterConstraints`` (TORCHREC_PLANNER.md section 3), as JSON, and rebuild a TorchRec
``ShardingPlan`` from that JSON where torchrec is installed.

JSON shape: ``{"module": "<path>", "plan": {table: {"sharding_type", "compute_kernel",
"ranks", "shards": [{"shard_offsets": [row, col], "shard_sizes": [rows, cols],
"placement": "rank:r/cuda:r"}]}}, "constraints": {table: {"sharding_types",
"compute_kernels", "pooling_factors"}}}``. Sharding types are inferred from the placements:
one whole block = table_wise; full-row column blocks = column_wise; full-column row blocks on
ranks 0, 1, ... in order = row_wise, or table_row_wise when the plan's
``metadata["torchrec_sharding_types"]`` says so (TorchRec's planner's plans: the two look alike
when one host holds every rank) or when the blocks start on a later host's first rank; anything
else is rejected with a one-line error. Row-wise shards are padded to every rank (of the host,
for table_row_wise) with empty trailing shards, as TorchRec lays them out.
"""

from __future__ import annotations

from typing import Any, Mapping

from shardlab.errors import ShardlabError
from shardlab.plan import Plan, validate_plan
from shardlab.tables import Task


def sharding_type_of(table: str, rows: int, dim: int, blocks: list[Any], local_world_size: int | None = None,
                     requested: str | None = None) -> str:
    """TorchRec sharding type of one table's placements, sorted by (row, column) offset (module
    docstring). ``local_world_size``: ranks per host (default: every rank on one host);
    ``requested``: the type TorchRec's planner chose, which decides between row-wise and
    table-row-wise."""
    if len(blocks) == 1 and blocks[0].rows == rows and blocks[0].cols == dim:
        return "table_wise"
    if all(b.rows == rows and b.row_offset == 0 for b in blocks):
        return "column_wise"
    devices = [b.device for b in blocks]
    if all(b.cols == dim for b in blocks) and devices == list(range(devices[0], devices[0] + len(blocks))):
        lws = local_world_size or (devices[-1] + 1)
        one_host = devices[0] % lws == 0 and len(blocks) <= lws
        if devices[0] == 0 and requested != "table_row_wise":
            return "row_wise"
        if one_host:
            return "table_row_wise"
    raise ShardlabError(f"export-torchrec: table '{table}': placements are neither table-, column-, row- nor "
                        "table-row-wise in TorchRec's layouts")


def _padded(kind: str, blocks: list[Any], rows: int, dim: int, world: int, lws: int) -> list[tuple[int, int, int, int]]:
    """(row offset, col offset, rows, cols, rank) of every shard TorchRec expects: the blocks, plus
    empty trailing shards up to every rank (row_wise) or every rank of the host (table_row_wise)."""
    shards = [(b.row_offset, b.col_offset, b.rows, b.cols, b.device) for b in blocks]
    if kind in ("row_wise", "table_row_wise"):
        last = world if kind == "row_wise" else (blocks[0].device // lws + 1) * lws
        shards += [(rows, 0, 0, dim, r) for r in range(blocks[-1].device + 1, last)]
    return shards


def export_torchrec(task: Task, plan: Plan, module: str = "sparse.ebc", local_world_size: int | None = None
                    ) -> dict[str, Any]:
    """The export JSON (module docstring) of a validated plan; ``local_world_size``: ranks per
    host (default: all of them on one)."""
    validate_plan(task, plan)
    lws = local_world_size or plan.ngpu
    requested = plan.metadata.get("torchrec_sharding_types") or {}
    by_table: dict[str, list[Any]] = {}
    for p in plan.placements:
        by_table.setdefault(p.table, []).append(p)
    out: dict[str, Any] = {"module": module, "task": task.name, "method": plan.method, "world_size": plan.ngpu,
                           "plan": {}, "constraints": {}}
    for t in task.tables:
        blocks = sorted(by_table[t.name], key=lambda b: (b.row_offset, b.col_offset))
        kind = sharding_type_of(t.name, t.rows, t.dim, blocks, lws, requested.get(t.name))
        shards = _padded(kind, blocks, t.rows, t.dim, plan.ngpu, lws)
        out["plan"][t.name] = {
            "sharding_type": kind, "compute_kernel": "fused", "ranks": [s[4] for s in shards],
            "shards": [{"shard_offsets": [r0, c0], "shard_sizes": [nr, nc], "placement": f"rank:{g}/cuda:{g % lws}"}
                       for r0, c0, nr, nc, g in shards]}
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
