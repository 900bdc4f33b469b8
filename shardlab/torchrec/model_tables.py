"""What a TorchRec model holds, as shardlab sees it: every ``EmbeddingBagCollection`` of the
module (nested anywhere, several of them), its tables and their features; the topology's ranks,
memory and batch; and the user's ``ParameterConstraints`` read into what a plan may do.

A table is named in the Task by its own name where that is unique over the model, else by its
collection's module path and its name (``"sparse.ebc/t1"``); :class:`ModelTable` keeps both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.torchrec.export import DTYPES, SHARDING_TYPES
from shardlab.torchrec.export import OPTIMIZERS as FUSED_OPTIMIZERS

#: The sharding types shardlab's methods place (row layouts pinned first where only they are
#: allowed; table-column-wise where column blocks stay inside one host).
PLACED_TYPES = SHARDING_TYPES + ("table_column_wise",)
#: Data-parallel: the table replicated on every rank (TorchRec's ``dense`` kernel), not placed.
REPLICATED = "data_parallel"
REPLICATED_KERNEL = "dense"
#: TorchRec ``DataType`` name -> the Task's ``weights_precision``.
PRECISIONS = {v: k for k, v in DTYPES.items()}
#: fbgemm ``EmbOptimType`` name -> the Task's ``optimizer`` (plain SGD keeps no state either:
#: ``exact_sgd``; TorchRec's default, no optimizer in the sharder's fused params, too).
OPTIMIZERS = {**{v: k for k, v in FUSED_OPTIMIZERS.items()}, "SGD": "exact_sgd"}


class ConstraintError(ShardlabError):
    """A table's constraints cannot be honoured (TorchRec's ``STRICT_CONSTRAINTS``)."""


#: The fused parameters a table's ``ParameterConstraints`` may carry into its ``ParameterSharding``.
FUSED_FIELDS = ("cache_params", "enforce_hbm", "stochastic_rounding", "bounds_check_mode")


@dataclass(frozen=True)
class ModelTable:
    """One table of the model: ``path`` of its collection (relative to the planned module),
    ``config`` (its ``EmbeddingBagConfig`` or ``EmbeddingConfig``), ``name`` in the Task,
    ``allowed`` sharding types (in the constraints' order), ``pooling`` (mean lookups per
    sample over its features, from the constraints; None when they give none), ``kind`` of its
    collection, ``weighted`` (lookups carry per-sample weights), ``fused`` (the constraint's
    :data:`FUSED_FIELDS` that are set, carried into the plan), ``min_cols`` (the constraint's
    ``min_partition``: the narrowest column block allowed; None: no bound), ``pooled``
    (False: a sequence table), ``kernels`` (the kernels it may take of ``constants.OFFLOAD_KERNELS``:
    offered by its sharder and allowed by its constraint, in that order) and ``cache_share`` (the
    HBM cache share it takes if offloaded with a cache: the constraint's
    ``cache_params.load_factor``, else the sharder's fused param ``cache_load_factor``, else
    ``constants.UVM_CACHE_SHARE``)."""

    path: str
    config: Any
    name: str
    allowed: tuple[str, ...]
    pooling: float | None
    kind: str = "EmbeddingBagCollection"
    weighted: bool = False
    fused: tuple[tuple[str, Any], ...] = ()
    min_cols: int | None = None
    pooled: bool = True
    kernels: tuple[str, ...] = (C.OFFLOAD_KERNELS[0],)
    cache_share: float = C.UVM_CACHE_SHARE

    @property
    def table(self) -> str:
        """The table's own name (TorchRec's plan and constraints key)."""
        return str(self.config.name)


def _type_name(t: type) -> str:
    """A module type's qualified name, the key TorchRec's planner matches sharders by."""
    return f"{t.__module__}.{t.__qualname__}"


def _planned_kinds() -> dict[str, tuple[str, bool]]:
    """Qualified type name -> (kind label, pooled) of the collections shardlab plans: pooled
    lookups, with or without per-sample weights (``EmbeddingBagCollection``, and the
    position-weighted ``FeatureProcessedEmbeddingBagCollection`` around one), and sequence
    lookups (``EmbeddingCollection``: every looked-up row returned)."""
    from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
    from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection
    return {_type_name(EmbeddingBagCollection): ("EmbeddingBagCollection", True),
            _type_name(FeatureProcessedEmbeddingBagCollection): ("FeatureProcessedEmbeddingBagCollection", True),
            _type_name(EmbeddingCollection): ("EmbeddingCollection", False)}


#: What a one-line refusal lists as the collections shardlab plans.
PLANNED = "EmbeddingBagCollection, FeatureProcessedEmbeddingBagCollection, EmbeddingCollection"


def resolved_sharders(sharders: Sequence[Any] | None) -> list[Any]:
    """``sharders``, or TorchRec's default sharders where None (as TorchRec's planner reads it:
    every module kind TorchRec ships a sharder for is then to be planned)."""
    if sharders is None:
        from torchrec.distributed.sharding_plan import get_default_sharders
        return list(get_default_sharders())
    return list(sharders)


@dataclass(frozen=True)
class Collection:
    """One collection the plan keys: ``path`` in the planned module, its ``sharder``, ``configs``
    (its table configs), ``kind`` (its class name), ``weighted`` (lookups carry per-sample
    weights) and ``pooled`` (False: a sequence collection)."""

    path: str
    sharder: Any
    configs: tuple[Any, ...]
    kind: str
    weighted: bool
    pooled: bool = True


def collections(module: Any, sharders: Sequence[Any] | None) -> list[Collection]:
    """The collections of ``module`` that the sharders shard, found as TorchRec's planner finds
    them: modules matched to a sharder by type (qualified name), children of a matched module
    not visited, the others searched breadth-first. With only an EBC sharder, an FP-EBC's inner
    collection is matched at ``<fp path>._embedding_bag_collection``, as TorchRec keys it. A
    matched module of a kind shardlab does not plan (managed-collision or quantised
    collections) is one line naming its path: leaving it out of the plan would hand TorchRec a
    plan that silently keeps it unsharded."""
    kinds = _planned_kinds()
    by_type = {_type_name(s.module_type): s for s in resolved_sharders(sharders)
               if getattr(s, "module_type", None) is not None}
    found: list[Collection] = []
    queue: list[tuple[str, Any]] = [("", module)]
    while queue:
        path, m = queue.pop(0)
        key = _type_name(type(m))
        sharder = by_type.get(key)
        if sharder is None:
            queue.extend(((f"{path}.{n}" if path else n), c) for n, c in m.named_children())
            continue
        if key not in kinds:
            raise ShardlabError(f"ShardlabPlanner: module '{path}' ({type(m).__name__}) is not one shardlab plans "
                                f"({PLANNED})")
        kind, pooled = kinds[key]
        if pooled:
            inner = getattr(m, "_embedding_bag_collection", m)
            configs, weighted = tuple(inner.embedding_bag_configs()), bool(m.is_weighted())
        else:
            configs, weighted = tuple(m.embedding_configs()), False
        found.append(Collection(path, sharder, configs, kind, weighted, pooled))
    if not any(c.configs for c in found):
        raise ShardlabError(f"ShardlabPlanner: module {type(module).__name__} holds no collection the sharders "
                            f"shard ({PLANNED})")
    return found


def _fused_params(sharder: Any) -> Mapping[str, Any]:
    """A collection sharder's fused parameters (an FP-EBC sharder's are its inner EBC sharder's)."""
    got = getattr(sharder, "fused_params", None)
    if got is None:
        got = getattr(getattr(sharder, "_ebc_sharder", None), "fused_params", None)
    return got or {}


def task_optimizer(found: Sequence[Collection]) -> str:
    """The Task's ``optimizer`` from the fused params of the sharders of the ``found``
    collections (``exact_sgd`` without one); one line when two sharders name different ones."""
    seen: dict[str, str] = {}
    for c in found:
        opt = _fused_params(c.sharder).get("optimizer")
        name = "SGD" if opt is None else getattr(opt, "name", str(opt)).split(".")[-1]
        if name not in OPTIMIZERS:
            raise ShardlabError(f"ShardlabPlanner: sharder field 'optimizer' = {name} is not one shardlab costs "
                                f"({', '.join(sorted(OPTIMIZERS))})")
        seen.setdefault(OPTIMIZERS[name], f"the sharder of '{c.path}'")
    return _one_per_model(seen, "optimizer", "trains with") or "exact_sgd"


def _one_per_model(seen: Mapping[str, str], field: str, verb: str) -> str | None:
    """The one value of ``field`` in ``seen`` ({value: who first has it}), None when empty; one
    line naming two holders when there are several (shardlab plans one per model)."""
    if len(seen) > 1:
        (a, wa), (b, wb) = list(seen.items())[:2]
        raise ShardlabError(f"ShardlabPlanner: {wb} {verb} {b} but {wa} {verb} {a}: shardlab plans one {field} "
                            "per model")
    return next(iter(seen), None)


def _kernels(sharder: Any, sharding_type: str, device: str) -> list[str]:
    """The compute kernels ``sharder`` offers for ``sharding_type`` on ``device`` (names)."""
    return [str(getattr(k, "value", k)) for k in sharder.compute_kernels(sharding_type, device)]


def _allowed(name: str, constraint: Any, offered: Sequence[str], offered_kernels: Sequence[str], device: str
             ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Sharding types a table may take: the constraint's (in its order) among what the sharder
    offers and shardlab places (:data:`PLACED_TYPES`); ``("data_parallel",)`` for a table the
    constraint allows no placed type but data-parallel, where the sharder offers it. And the
    kernels it may take: ``offered_kernels`` the constraint's kernels allow (``dense`` for
    data-parallel). One line naming the table when no type or no kernel is left."""
    asked = getattr(constraint, "sharding_types", None)
    asked = [str(getattr(t, "value", t)) for t in asked] if asked else list(SHARDING_TYPES)
    kept = tuple(t for t in asked if t in PLACED_TYPES and t in offered)
    shard_kernels = tuple(offered_kernels)
    if not kept and REPLICATED in asked and REPLICATED in offered:
        kept, shard_kernels = (REPLICATED,), (REPLICATED_KERNEL,)
    kernels = getattr(constraint, "compute_kernels", None)
    if kernels:
        named = [str(getattr(k, "value", k)) for k in kernels]
        left = tuple(k for k in shard_kernels if k in named)
        if not left:
            raise ConstraintError(f"ShardlabPlanner: table '{name}': constraint field 'compute_kernels' = {named} "
                                  f"leaves out every kernel shardlab plans "
                                  f"{'data-parallel tables with' if kept == (REPLICATED,) else 'shards with'} "
                                  f"that the sharder offers ({', '.join(shard_kernels)})")
        shard_kernels = left
    if not kept:
        both = [t for t in PLACED_TYPES + (REPLICATED,) if t in offered]
        raise ConstraintError(f"ShardlabPlanner: table '{name}': constraint field 'sharding_types' = {asked} "
                              f"allows none of the types the sharder offers on {device} and shardlab plans "
                              f"({', '.join(both) or 'none'})")
    return kept, shard_kernels


def _cache_share(name: str, constraint: Any, sharder: Any) -> float:
    """:attr:`ModelTable.cache_share` of a table, checked: in [0, 1]."""
    got = getattr(getattr(constraint, "cache_params", None), "load_factor", None)
    field = "constraint field 'cache_params.load_factor'"
    if got is None:
        got, field = _fused_params(sharder).get("cache_load_factor"), "sharder field 'cache_load_factor'"
    if got is None:
        return C.UVM_CACHE_SHARE
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not 0.0 <= float(got) <= 1.0:
        raise ConstraintError(f"ShardlabPlanner: table '{name}': {field} = {got!r} must be in [0, 1]")
    return float(got)


def _pooling(name: str, config: Any, constraint: Any) -> float | None:
    """Mean lookups per sample of a table over its features from the constraint's
    ``pooling_factors`` (times ``num_poolings``); None when there is no constraint or it keeps
    TorchRec's default ``[1.0]`` (an unset field reads the same). One value per feature
    (TorchRec's rule), else one line naming the table."""
    pfs = None if constraint is None else getattr(constraint, "pooling_factors", None)
    if not pfs or [float(p) for p in pfs] == [C.TORCHREC_DEFAULT_POOLING]:
        return None
    features = list(config.feature_names)
    if len(pfs) != len(features):
        raise ShardlabError(f"ShardlabPlanner: table '{name}': constraint field 'pooling_factors' has {len(pfs)} "
                            f"values for {len(features)} features {features}")
    polls = getattr(constraint, "num_poolings", None) or [1.0] * len(pfs)
    if len(polls) != len(pfs):
        raise ShardlabError(f"ShardlabPlanner: table '{name}': constraint field 'num_poolings' has {len(polls)} "
                            f"values for {len(pfs)} pooling factors")
    return float(sum(float(p) * float(n) for p, n in zip(pfs, polls)))


def named_configs(module: Any, sharders: Sequence[Any] | None = None) -> list[tuple[Collection, Any, str]]:
    """(collection, ``EmbeddingBagConfig``, Task name) of every table of every collection the
    sharders shard (:func:`collections`; module docstring for the names)."""
    found = [(c, config) for c in collections(module, sharders) for config in c.configs]
    counts: dict[str, int] = {}
    for _, config in found:
        counts[config.name] = counts.get(config.name, 0) + 1
    return [(c, config, config.name if counts[config.name] == 1 else f"{c.path}/{config.name}")
            for c, config in found]


def _offered(c: Collection, device: str) -> tuple[list[str], tuple[str, ...]]:
    """The sharding types ``c``'s sharder offers on ``device`` with a kernel shardlab plans
    (``constants.OFFLOAD_KERNELS``: ``fused``, or host memory), data-parallel where it offers it
    with the dense kernel; and the kernels of those every such type offers (that order). One line
    when there are none: shardlab never hands a sharder a kernel it did not offer."""
    types = [str(getattr(t, "value", t)) for t in c.sharder.sharding_types(device)]
    per = {t: set(_kernels(c.sharder, t, device)) & set(C.OFFLOAD_KERNELS) for t in types if t != REPLICATED}
    offered = [t for t, ks in per.items() if ks]
    common = set.intersection(*(per[t] for t in offered)) if offered else set()
    if not common:
        raise ShardlabError(f"ShardlabPlanner: the sharder of '{c.path}' ({c.kind}) offers no kernel shardlab plans "
                            f"({', '.join(C.OFFLOAD_KERNELS)}) on {device}"
                            + (" for every sharding type it offers" if offered else ""))
    if REPLICATED in types and REPLICATED_KERNEL in _kernels(c.sharder, REPLICATED, device):
        offered.append(REPLICATED)
    return offered, tuple(k for k in C.OFFLOAD_KERNELS if k in common)


def _min_cols(name: str, config: Any, constraint: Any) -> int | None:
    """The constraint's ``min_partition`` (columns), checked: an integer in [1, dim]."""
    got = None if constraint is None else getattr(constraint, "min_partition", None)
    if got is None:
        return None
    if isinstance(got, bool) or not isinstance(got, int) or not 1 <= got <= int(config.embedding_dim):
        raise ConstraintError(f"ShardlabPlanner: table '{name}': constraint field 'min_partition' = {got!r} must be an "
                            f"integer in [1, {int(config.embedding_dim)}] (its dim)")
    return int(got)


def model_tables(module: Any, sharders: Sequence[Any] | None, constraints: Mapping[str, Any] | None,
                 compute_device: str) -> list[ModelTable]:
    """Every table of the model (:func:`named_configs`) with the constraints read: sharding types
    among those its collection's sharder offers with a kernel shardlab plans, the kernels, pooling factors,
    ``min_partition`` and the fused parameters to carry into the plan; one line for a
    constraint naming no table of the model."""
    found = named_configs(module, sharders)
    offered = {c.path: _offered(c, compute_device) for c, _, _ in found}
    constraints = dict(constraints or {})
    unknown = sorted(set(constraints) - {config.name for _, config, _ in found})
    if unknown:
        raise ShardlabError(f"ShardlabPlanner: constraints name table '{unknown[0]}', which the module does not hold")
    out = []
    for c, config, name in found:
        con = constraints.get(config.name)
        fused = tuple((f, getattr(con, f)) for f in FUSED_FIELDS if getattr(con, f, None) is not None)
        types, kernels = _allowed(name, con, *offered[c.path], compute_device)
        out.append(ModelTable(c.path, config, name, types, _pooling(name, config, con), c.kind, c.weighted, fused,
                              _min_cols(name, config, con), c.pooled, kernels, _cache_share(name, con, c.sharder)))
    return out


def task_precision(tables: Sequence[ModelTable]) -> str:
    """The Task's one ``weights_precision``; one line naming a table of another or unknown type."""
    seen: dict[str, str] = {}
    for t in tables:
        dtype = getattr(t.config.data_type, "name", str(t.config.data_type))
        if dtype not in PRECISIONS:
            raise ShardlabError(f"ShardlabPlanner: table '{t.name}': data_type {dtype} is not one shardlab costs "
                                f"({', '.join(PRECISIONS)})")
        seen.setdefault(PRECISIONS[dtype], f"table '{t.name}'")
    return str(_one_per_model(seen, "weights precision", "is"))


def rank_memory_bytes(topology: Any) -> int:
    """Memory per rank a plan may fill (bytes): the smallest rank's HBM (DDR on a cpu topology)."""
    kind = "ddr" if str(topology.compute_device) == "cpu" else "hbm"
    return int(min(getattr(d.storage, kind) for d in topology.devices))
