"""Export a Plan for TorchRec: per-table ``ParameterSharding``-equivalent entries and
``ParameterConstraints`` (docs/methods.md), as JSON, and rebuild a TorchRec
``ShardingPlan`` from that JSON where torchrec is installed.

JSON shape: ``{"module": "<path>", "plan": {table: {"sharding_type", "compute_kernel",
"ranks", "shards": [{"shard_offsets": [row, col], "shard_sizes": [rows, cols],
"placement": "rank:r/cuda:r"}]}}, "constraints": {table: {"sharding_types",
"compute_kernels", "pooling_factors"}}}``; an offloaded table's kernel is ``fused_uvm_caching``
(with ``"cache_load_factor"``, its ``hbm_share``) or ``fused_uvm`` (``Table.kernel``). Sharding types are inferred from the placements:
one whole block = table_wise; full-row column blocks = column_wise; full-column row blocks on
ranks 0, 1, ... in order = row_wise, or table_row_wise when the plan's
``metadata["torchrec_sharding_types"]`` says so (TorchRec's planner's plans: the two look alike
when one host holds every rank) or when the blocks start on a later host's first rank; anything
else is rejected with a one-line error. Row-wise shards are padded to every rank (of the host,
for table_row_wise) with empty trailing shards, as TorchRec lays them out.
"""

from __future__ import annotations

from typing import Any, Mapping

from shardlab import constants as C
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


def placement_rank(placement: str) -> int:
    """The rank of a shard placement ``"rank:<r>/<device>"``."""
    return int(str(placement).split("/")[0].split(":")[1])


def _padded(kind: str, blocks: list[Any], rows: int, dim: int, world: int, lws: int
            ) -> list[tuple[int, int, int, int, int]]:
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
            "sharding_type": kind, "compute_kernel": t.kernel, "ranks": [s[4] for s in shards],
            "shards": [{"shard_offsets": [r0, c0], "shard_sizes": [nr, nc], "placement": f"rank:{g}/cuda:{g % lws}"}
                       for r0, c0, nr, nc, g in shards]}
        if t.kernel == C.OFFLOAD_KERNELS[1]:
            out["plan"][t.name]["cache_load_factor"] = t.hbm_share
        out["constraints"][t.name] = {"sharding_types": [kind], "compute_kernels": [t.kernel],
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
    plan = {name: {**e, "shards": [{**s, "placement": f"rank:{placement_rank(s['placement'])}/cpu"}
                                   for s in e["shards"]]}
            for name, e in data["plan"].items()}
    return {**data, "plan": plan}


#: Sharding types and compute kernels an export may name (what TorchRec's EmbeddingBagCollection
#: sharder takes for the layouts shardlab places).
SHARDING_TYPES = C.TORCHREC_SHARDING_TYPES
COMPUTE_KERNELS = C.OFFLOAD_KERNELS + ("dense",)
#: fbgemm's fused optimizer (``EmbOptimType`` name) of each Task ``optimizer``, and TorchRec's
#: ``DataType`` name of each ``weights_precision`` that trains in TorchRec here.
OPTIMIZERS = {"exact_sgd": "EXACT_SGD", "exact_adagrad": "EXACT_ADAGRAD", "exact_rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD"}
DTYPES = {"fp32": "FP32", "fp16": "FP16"}


def check_export(data: Mapping[str, Any], task: Task | None = None) -> None:
    """One line naming the first table (and its sharding type) whose export entry TorchRec would
    refuse: an unknown sharding type or kernel, ``ranks`` that are not its shards' placements or
    lie outside ``world_size``, shards that do not tile the table's rows x dim exactly (the
    task's, when given; else the shards' own extent), or column / row shards that are not
    column- / row-wise blocks."""
    world = int(data.get("world_size") or 0)
    tables = {t.name: t for t in task.tables} if task is not None else {}
    for name, e in data["plan"].items():
        kind = e.get("sharding_type")
        def bad(why: str) -> ShardlabError:
            return ShardlabError(f"export-torchrec: table '{name}' ({kind}): {why}")
        if kind not in SHARDING_TYPES:
            raise bad(f"field 'sharding_type' must be one of {list(SHARDING_TYPES)}")
        if e.get("compute_kernel") not in COMPUTE_KERNELS:
            raise bad(f"field 'compute_kernel' = {e.get('compute_kernel')!r} must be one of {list(COMPUTE_KERNELS)}")
        shards = e["shards"]
        placed = [placement_rank(s["placement"]) for s in shards]
        if list(e["ranks"]) != placed:
            raise bad(f"field 'ranks' = {list(e['ranks'])} is not its shards' placements {placed}")
        if world and any(not 0 <= r < world for r in placed):
            raise bad(f"a shard is placed on a rank outside world_size {world}")
        blocks = [(int(s["shard_offsets"][0]), int(s["shard_offsets"][1]), int(s["shard_sizes"][0]),
                   int(s["shard_sizes"][1])) for s in shards]
        full = [b for b in blocks if b[2] and b[3]]
        rows = tables[name].rows if name in tables else max(r0 + n for r0, _, n, _ in full)
        dim = tables[name].dim if name in tables else max(c0 + n for _, c0, _, n in full)
        if sum(n * m for _, _, n, m in full) != rows * dim or any(
                r0 < 0 or c0 < 0 or r0 + n > rows or c0 + m > dim for r0, c0, n, m in full):
            raise bad(f"its shards do not tile its {rows} rows x {dim} columns")
        if kind == "column_wise" and any(n != rows for _, _, n, _ in full):
            raise bad("a column-wise shard does not hold every row")
        if kind in ("row_wise", "table_row_wise") and any(m != dim for _, _, _, m in full):
            raise bad("a row-wise shard does not hold every column")


def parameter_sharding(entry: Mapping[str, Any]) -> Any:
    """TorchRec's ``ParameterSharding`` of one table's export entry (needs torchrec; not checked:
    :func:`check_export` first)."""
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.types import ParameterSharding

    spec = EnumerableShardingSpec([ShardMetadata(shard_offsets=list(s["shard_offsets"]),
                                                 shard_sizes=list(s["shard_sizes"]), placement=s["placement"])
                                   for s in entry["shards"]])
    cache = None
    if entry.get("cache_load_factor") is not None:     # an offloaded table's HBM cache share
        from torchrec.distributed.types import CacheParams
        cache = CacheParams(load_factor=float(entry["cache_load_factor"]))
    return ParameterSharding(sharding_type=entry["sharding_type"], compute_kernel=entry["compute_kernel"],
                             ranks=list(entry["ranks"]), sharding_spec=spec, cache_params=cache)


def sharding_plan_of(modules: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> Any:
    """A TorchRec ``ShardingPlan`` from {module path: {table: export entry}} (needs torchrec)."""
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ShardingPlan

    plans = {}
    for path, entries in modules.items():
        module_plan = EmbeddingModuleShardingPlan()
        module_plan.update({name: parameter_sharding(e) for name, e in entries.items()})
        plans[path] = module_plan
    return ShardingPlan(plans)


def sharding_plan_from_export(data: Mapping[str, Any], task: Task | None = None):
    """A TorchRec ``ShardingPlan`` rebuilt from :func:`export_torchrec`'s JSON (needs torchrec),
    checked first (:func:`check_export`, against ``task`` when given)."""
    check_export(data, task)
    return sharding_plan_of({data["module"]: data["plan"]})
