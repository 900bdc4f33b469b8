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
from shardlab.export import DTYPES, SHARDING_TYPES
from shardlab.export import OPTIMIZERS as FUSED_OPTIMIZERS

#: The kernel shardlab's costs were measured with (fbgemm's fused TBE: update in backward).
KERNEL = "fused"
#: TorchRec ``DataType`` name -> the Task's ``weights_precision``.
PRECISIONS = {v: k for k, v in DTYPES.items()}
#: fbgemm ``EmbOptimType`` name -> the Task's ``optimizer`` (plain SGD keeps no state either:
#: ``exact_sgd``; TorchRec's default, no optimizer in the sharder's fused params, too).
OPTIMIZERS = {**{v: k for k, v in FUSED_OPTIMIZERS.items()}, "SGD": "exact_sgd"}


@dataclass(frozen=True)
class ModelTable:
    """One table of the model: ``path`` of its collection (relative to the planned module),
    ``config`` (its ``EmbeddingBagConfig``), ``name`` in the Task, ``allowed`` sharding types
    (in the constraints' order), and ``pooling`` (mean lookups per sample over its features,
    from the constraints; None when they give none)."""

    path: str
    config: Any
    name: str
    allowed: tuple[str, ...]
    pooling: float | None

    @property
    def table(self) -> str:
        """The table's own name (TorchRec's plan and constraints key)."""
        return str(self.config.name)


def _ebc_class() -> type:
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    return EmbeddingBagCollection


def resolved_sharders(sharders: Sequence[Any] | None) -> list[Any]:
    """``sharders``, or TorchRec's default sharders where None (as TorchRec's planner reads it:
    every module kind TorchRec ships a sharder for is then to be planned)."""
    if sharders is None:
        from torchrec.distributed.sharding_plan import get_default_sharders
        return list(get_default_sharders())
    return list(sharders)


def _ebc_sharder(sharders: Sequence[Any] | None) -> Any:
    """The sharder of ``EmbeddingBagCollection`` among ``sharders`` (TorchRec's default sharders
    when None); a one-line error when there is none."""
    sharders = resolved_sharders(sharders)
    ebc = _ebc_class()
    for s in sharders:
        if getattr(s, "module_type", None) is ebc:
            return s
    raise ShardlabError("ShardlabPlanner: field 'sharders' holds no sharder of EmbeddingBagCollection "
                        "(pass EmbeddingBagCollectionSharder())")


def task_optimizer(sharders: Sequence[Any] | None) -> str:
    """The Task's ``optimizer`` from the EBC sharder's fused params (``exact_sgd`` without one)."""
    fused = getattr(_ebc_sharder(sharders), "fused_params", None) or {}
    opt = fused.get("optimizer")
    if opt is None:
        return "exact_sgd"
    name = getattr(opt, "name", str(opt)).split(".")[-1]
    if name not in OPTIMIZERS:
        raise ShardlabError(f"ShardlabPlanner: sharder field 'optimizer' = {name} is not one shardlab costs "
                            f"({', '.join(sorted(OPTIMIZERS))})")
    return OPTIMIZERS[name]


def _kernels(sharder: Any, sharding_type: str, device: str) -> list[str]:
    """The compute kernels ``sharder`` offers for ``sharding_type`` on ``device`` (names)."""
    return [str(getattr(k, "value", k)) for k in sharder.compute_kernels(sharding_type, device)]


def _allowed(name: str, constraint: Any, offered: Sequence[str], device: str) -> tuple[str, ...]:
    """Sharding types a table may take: the constraint's (in its order) among what the sharder
    offers and shardlab places; one line naming the table when none is left or the
    constraint's kernels leave out the fused one."""
    kernels = getattr(constraint, "compute_kernels", None)
    if kernels and KERNEL not in [str(getattr(k, "value", k)) for k in kernels]:
        raise ShardlabError(f"ShardlabPlanner: table '{name}': constraint field 'compute_kernels' = {list(kernels)} "
                            f"leaves out '{KERNEL}', the only kernel shardlab costs")
    asked = getattr(constraint, "sharding_types", None)
    asked = [str(getattr(t, "value", t)) for t in asked] if asked else list(SHARDING_TYPES)
    kept = tuple(t for t in asked if t in SHARDING_TYPES and t in offered)
    if not kept:
        both = [t for t in SHARDING_TYPES if t in offered]
        raise ShardlabError(f"ShardlabPlanner: table '{name}': constraint field 'sharding_types' = {asked} "
                            f"allows none of the types the sharder offers on {device} and shardlab places "
                            f"({', '.join(both) or 'none'})")
    return kept


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


def named_configs(module: Any, sharders: Sequence[Any] | None = None) -> list[tuple[str, Any, str]]:
    """(collection path, ``EmbeddingBagConfig``, Task name) of every table of every
    ``EmbeddingBagCollection`` in ``module`` (module docstring). One-line errors: no collection;
    another embedding module a sharder would shard -- a given one, or with ``sharders=None`` one
    of TorchRec's defaults (sequence, position-weighted, managed-collision, quantised collections)
    -- since shardlab plans pooled collections only, and leaving such a module out of the plan
    would hand TorchRec a plan that silently keeps it unsharded."""
    ebc_type = _ebc_class()
    others = {getattr(s, "module_type", None) for s in resolved_sharders(sharders)} - {ebc_type, None}
    found: list[tuple[str, Any]] = []
    for path, m in module.named_modules():
        if isinstance(m, ebc_type):
            found.extend((path, c) for c in m.embedding_bag_configs())
        elif others and type(m) in others:
            raise ShardlabError(f"ShardlabPlanner: module '{path}' ({type(m).__name__}) is not one shardlab plans "
                                "(pooled EmbeddingBagCollections only)")
    if not found:
        raise ShardlabError(f"ShardlabPlanner: module {type(module).__name__} holds no EmbeddingBagCollection")
    counts: dict[str, int] = {}
    for _, c in found:
        counts[c.name] = counts.get(c.name, 0) + 1
    return [(path, c, c.name if counts[c.name] == 1 else f"{path}/{c.name}") for path, c in found]


def model_tables(module: Any, sharders: Sequence[Any] | None, constraints: Mapping[str, Any] | None,
                 compute_device: str) -> list[ModelTable]:
    """Every table of the model (:func:`named_configs`) with the constraints read; the sharding
    types are those the EBC sharder offers with the fused kernel (a sharder offering only
    host-memory kernels is one line: shardlab never hands it a ``fused`` plan it did not offer);
    one line for a constraint naming no table of the model."""
    found = named_configs(module, sharders)
    sharder = _ebc_sharder(sharders)
    offered = [str(getattr(t, "value", t)) for t in sharder.sharding_types(compute_device)]
    offered = [t for t in offered if KERNEL in _kernels(sharder, t, compute_device)]
    if not offered:
        raise ShardlabError(f"ShardlabPlanner: the EmbeddingBagCollection sharder offers no sharding type with the "
                            f"'{KERNEL}' kernel on {compute_device}, the only kernel shardlab costs (host-memory "
                            "offload, fused_uvm / fused_uvm_caching, is not planned yet)")
    constraints = dict(constraints or {})
    unknown = sorted(set(constraints) - {c.name for _, c, _ in found})
    if unknown:
        raise ShardlabError(f"ShardlabPlanner: constraints name table '{unknown[0]}', which the module does not hold")
    out = []
    for path, c, name in found:
        con = constraints.get(c.name)
        out.append(ModelTable(path, c, name, _allowed(name, con, offered, compute_device), _pooling(name, c, con)))
    return out


def task_precision(tables: Sequence[ModelTable]) -> str:
    """The Task's one ``weights_precision``; one line naming a table of another or unknown type."""
    seen: dict[str, str] = {}
    for t in tables:
        dtype = getattr(t.config.data_type, "name", str(t.config.data_type))
        if dtype not in PRECISIONS:
            raise ShardlabError(f"ShardlabPlanner: table '{t.name}': data_type {dtype} is not one shardlab costs "
                                f"({', '.join(PRECISIONS)})")
        seen.setdefault(PRECISIONS[dtype], t.name)
    if len(seen) > 1:
        (a, ta), (b, tb) = list(seen.items())[:2]
        raise ShardlabError(f"ShardlabPlanner: table '{tb}' is {b} but table '{ta}' is {a}: shardlab plans one "
                            "weights precision per model")
    return next(iter(seen))


def rank_memory_bytes(topology: Any) -> int:
    """Memory per rank a plan may fill (bytes): the smallest rank's HBM (DDR on a cpu topology)."""
    kind = "ddr" if str(topology.compute_device) == "cpu" else "hbm"
    return int(min(getattr(d.storage, kind) for d in topology.devices))
