"""TorchRec's EmbeddingShardingPlanner as a baseline sharder (``docs/methods.md``).

The task's tables become an ``EmbeddingBagCollection`` on the meta device (no memory, no
process group); the planner is built with a ``Topology`` of G ranks whose HBM is the task's
cap (no storage reservation: shardlab's cap already is the budget, so both sides get the same
room), a per-rank batch of B / G, each table's pooling factor, the fused kernel and the
task's optimizer; ``planner.plan(module, sharders)`` runs its analytic perf model and greedy
partitioner; its ``ShardingPlan`` becomes our Plan (one placement per shard).

Modes: ``torchrec`` constrains sharding types to table-wise and column-wise (comparable with the
seeds); ``torchrec_free`` also allows row-wise and table-row-wise (data-parallel is left out:
a replicated table is not a placement of each row once). The default proposers slow down
steeply with the number of tables; above ``fast_above`` tables the greedy and uniform proposers
are used instead, and the plan's method name says which (``torchrec[greedy+uniform]``).

``costs``: "" keeps TorchRec's own analytic perf estimator; a shardlab cost-model bundle name
(``torchrec[costs=neuroshard_broad]``; ``default``: the profile's search model) has
:class:`~shardlab.torchrec.estimator.ShardlabPerfEstimator` fill every shard's perf
instead, from the task's own table statistics, so TorchRec's proposers and partitioner search
with shardlab's learned costs (``profile`` picks the shipped models).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

from shardlab import constants as C
from shardlab.torchrec.estimator import ShardlabPerfEstimator
from shardlab.errors import ShardlabError, check_ranges, is_int
from shardlab.torchrec.export import OPTIMIZERS, SHARDING_TYPES
from shardlab.plan import Placement, Plan
from shardlab.search.registry import check_search_gpus
from shardlab.search.row_split import row_split
from shardlab.tables import Task

CONSTRAINED = C.TORCHREC_CONSTRAINED_TYPES
FREE = SHARDING_TYPES


#: The planner API this sharder uses: class name -> module (torch, fbgemm_gpu and torchrec are
#: imported on first use: they are optional and slow to import).
_API = {
    "EmbOptimType": "fbgemm_gpu.split_embedding_configs",
    "EmbeddingBagCollectionSharder": "torchrec.distributed.embeddingbag",
    "EmbeddingShardingPlanner": "torchrec.distributed.planner", "ParameterConstraints": "torchrec.distributed.planner",
    "HardwareConfig": "torchrec.distributed.planner.types", "KernelConfig": "torchrec.distributed.planner.types",
    "TopologyFactory": "torchrec.distributed.planner.types", "TrainerConfig": "torchrec.distributed.planner.types",
    "GreedyProposer": "torchrec.distributed.planner.proposers", "UniformProposer": "torchrec.distributed.planner.proposers",
    "FixedPercentageStorageReservation": "torchrec.distributed.planner.storage_reservations",
    "EmbeddingEnumerator": "torchrec.distributed.planner.enumerators",
    "EmbeddingStorageEstimator": "torchrec.distributed.planner.shard_estimators",
    "EmbeddingBagConfig": "torchrec.modules.embedding_configs", "CacheParams": "torchrec.distributed.types",
    "EmbeddingBagCollection": "torchrec.modules.embedding_modules",
    "EmbeddingConfig": "torchrec.modules.embedding_configs",
    "EmbeddingCollection": "torchrec.modules.embedding_modules",
    "EmbeddingCollectionSharder": "torchrec.distributed.embedding",
    "Module": "torch.nn",
    "device": "torch",
}


def torchrec_api() -> SimpleNamespace:
    """The classes of :data:`_API` as attributes; a one-line :class:`ShardlabError` when torchrec
    (or fbgemm_gpu) is not importable."""
    try:
        return SimpleNamespace(**{name: getattr(importlib.import_module(mod), name) for name, mod in _API.items()})
    except Exception as e:  # pragma: no cover - depends on the install
        raise ShardlabError(f"torchrec planner: torchrec is not importable ({type(e).__name__}: {e}); "
                            "install it with scripts/setup.sh (SHARDLAB_TORCHREC=1)") from e


@dataclass
class TorchRecSharder:
    """TorchRec planner baseline (module docstring)."""

    name: str = "torchrec"
    sharding_types: tuple[str, ...] = CONSTRAINED
    fast_above: int = 200
    compute_device: str = "cuda"
    costs: str = ""
    profile: str = C.PLAN_PROFILE

    def __post_init__(self) -> None:
        check_ranges(f"method '{self.name}'", self, {
            "sharding_types": (lambda v: 1 <= len(v) and set(v) <= set(SHARDING_TYPES),
                               f"must be one or more of {', '.join(SHARDING_TYPES)}"),
            "fast_above": (lambda v: is_int(v) and v >= 0, "must be an integer >= 0 (tables)"),
            "compute_device": (lambda v: v in ("cuda", "cpu"), "must be cuda or cpu")})

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Plan with TorchRec's planner (deterministic; ``seed`` is recorded). Refuses at once
        ``ngpu > constants.MAX_TORCHREC_GPUS`` (the planner fails above it) and tables x GPUs
        over ``constants.MAX_TORCHREC_WORK`` (``MAX_TORCHREC_FREE_WORK`` with row-wise shards:
        it would plan for hours)."""
        check_search_gpus(task, C.MAX_TORCHREC_GPUS, "torchrec planner")
        work = len(task.tables) * task.ngpu
        bound = C.MAX_TORCHREC_FREE_WORK if "row_wise" in self.sharding_types else C.MAX_TORCHREC_WORK
        if work > bound:
            raise ShardlabError(f"task '{task.name}': {len(task.tables):,} tables x {task.ngpu} GPUs = {work:,} is over "
                                f"the torchrec planner's bound of {bound:,} (hours of planning); use "
                                "ShardlabPlanner or a shardlab method")
        tr = torchrec_api()

        if "row_wise" in self.sharding_types:
            row_split(task)          # one-line InfeasibleError when no row split fits
        else:
            task.check_feasible(column_wise="column_wise" in self.sharding_types)
        names = module_names(task)
        module = _task_module(tr, task, names)
        topology = tr.TopologyFactory.create_topology(
            trainer_config=tr.TrainerConfig(world_size=task.ngpu, local_world_size=task.ngpu),
            hardware_config=tr.HardwareConfig(hbm_cap_bytes=task.mem_cap_bytes),
            kernel_config=tr.KernelConfig(compute_device=self.compute_device))
        constraints = {names[t.name]: tr.ParameterConstraints(       # an offloaded table keeps its kernel and cache
            sharding_types=list(self.sharding_types), compute_kernels=[t.kernel], pooling_factors=[t.pooling_factor],
            cache_params=tr.CacheParams(load_factor=t.hbm_share) if t.kernel == C.OFFLOAD_KERNELS[1] else None)
                       for t in task.tables}
        fast = len(task.tables) > self.fast_above
        kwargs = {"proposer": [tr.GreedyProposer(), tr.UniformProposer()]} if fast else {}
        batch = max(1, task.batch_size // task.ngpu)
        estimators = self._estimators(tr, task, topology, constraints)
        planner = tr.EmbeddingShardingPlanner(topology=topology, batch_size=batch, constraints=constraints,
                                           enumerator=_ordered_enumerator(tr, topology, batch, constraints, estimators),
                                           storage_reservation=tr.FixedPercentageStorageReservation(0.0), **kwargs)
        fused = {"optimizer": getattr(tr.EmbOptimType, OPTIMIZERS[task.optimizer]), "learning_rate": 0.01}
        sharders = [tr.EmbeddingBagCollectionSharder(fused_params=fused), tr.EmbeddingCollectionSharder(fused_params=fused)]
        try:
            sharding_plan = planner.plan(module, sharders)
        except Exception as e:
            hint = ""
            if self.sharding_types == CONSTRAINED and any(task.table_bytes(t) > task.mem_cap_bytes for t in task.tables):
                hint = (" (method 'torchrec' allows table-wise and column-wise shards only; 'torchrec_free' also "
                        "row-wise, for tables that fit no device)")
            raise ShardlabError(f"task '{task.name}': torchrec planner failed: {str(e).splitlines()[0].strip()}{hint}") from e
        method = self.name + ("[greedy+uniform]" if fast else "")
        plan = plan_from_sharding_plan(task, sharding_plan, method, seed, {v: k for k, v in names.items()})
        if estimators:
            plan = replace(plan, metadata={**plan.metadata, "torchrec_costs": estimators[0].source})
        return plan

    def _estimators(self, tr: SimpleNamespace, task: Task, topology, constraints) -> list | None:
        """TorchRec's default estimators (None), or shardlab's perf estimator with TorchRec's
        storage estimator (``costs``, class docstring)."""
        if not self.costs:
            return None
        model = "" if self.costs == "default" else self.costs
        perf = ShardlabPerfEstimator(topology, constraints, model=model, profile=self.profile,
                                     tables={module_names(task)[t.name]: t for t in task.tables})
        return [perf, tr.EmbeddingStorageEstimator(topology, constraints)]


def _task_module(tr: SimpleNamespace, task: Task, names: dict[str, str]) -> Any:
    """The task's tables as a TorchRec module on the meta device: its pooled tables in one
    ``EmbeddingBagCollection`` (``ebc``), its sequence tables in one ``EmbeddingCollection`` per
    dim (``ec_<dim>``: TorchRec's collection holds tables of one dim), each table fed by its own
    feature."""
    module = tr.Module()
    pooled = [t for t in task.tables if t.pooled]
    if pooled:
        module.ebc = tr.EmbeddingBagCollection(tables=[tr.EmbeddingBagConfig(
            name=names[t.name], embedding_dim=t.dim, num_embeddings=t.rows, feature_names=[f"f_{names[t.name]}"])
            for t in pooled], device=tr.device("meta"))
    for dim in sorted({t.dim for t in task.tables if not t.pooled}):
        setattr(module, f"ec_{dim}", tr.EmbeddingCollection(tables=[tr.EmbeddingConfig(
            name=names[t.name], embedding_dim=t.dim, num_embeddings=t.rows, feature_names=[f"f_{names[t.name]}"])
            for t in task.tables if not t.pooled and t.dim == dim], device=tr.device("meta")))
    return module


def _ordered_enumerator(tr: SimpleNamespace, topology, batch_size: int, constraints, estimators: list | None = None):
    """TorchRec's default enumerator, but listing each table's allowed sharding types in the
    constraints' order: TorchRec 1.8 intersects them as Python sets, so which of two equally
    costed options (row-wise and table-row-wise on one host) it keeps followed the process's
    string-hash seed, and the same task gave a different plan from run to run."""
    class OrderedEnumerator(tr.EmbeddingEnumerator):
        def _filter_sharding_types(self, name, allowed_sharding_types, sharder_key=""):
            kept = super()._filter_sharding_types(name, allowed_sharding_types, sharder_key)
            order = list(constraints[name].sharding_types) if name in constraints else list(allowed_sharding_types)
            return sorted(kept, key=lambda t: (order.index(t) if t in order else len(order), t))

    return OrderedEnumerator(topology=topology, batch_size=batch_size, constraints=constraints, estimator=estimators)


def module_names(task: Task) -> dict[str, str]:
    """Table name -> the name its embedding bag gets in TorchRec's module: the name itself, but
    a torch module name takes no '.', so a name with one becomes ``<name with '_'>~<index>``
    (the index keeps two such names apart; TorchRec's plan is mapped back by
    :func:`plan_from_sharding_plan`)."""
    return {t.name: t.name if "." not in t.name else f"{t.name.replace('.', '_')}~{i}"
            for i, t in enumerate(task.tables)}


def plan_from_sharding_plan(task: Task, sharding_plan, method: str, seed: int = 0,
                            names: dict[str, str] | None = None) -> Plan:
    """Our Plan from a TorchRec ``ShardingPlan`` (one placement per shard). TorchRec's sharding
    type of each table goes to ``metadata["torchrec_sharding_types"]`` ({table: type}): row-wise
    and table-row-wise shards have the same placements when one host holds every rank, and the
    export (:func:`shardlab.torchrec.export.export_torchrec`) needs it to give TorchRec back its own plan.
    ``names``: module name -> table name where they differ (:func:`module_names`)."""
    placements, kinds = [], {}
    for module_plan in sharding_plan.plan.values():
        for module_name, ps in module_plan.items():
            table = (names or {}).get(module_name, module_name)
            kinds[table] = str(ps.sharding_type)
            if ps.sharding_spec is None:
                raise ShardlabError(f"table '{table}': sharding type {ps.sharding_type} has no shards "
                                    "(data-parallel is not representable as placements)")
            for shard, rank in zip(ps.sharding_spec.shards, ps.ranks):
                rows, cols = (int(x) for x in shard.shard_sizes)
                if rows == 0 or cols == 0:
                    continue  # row-wise: trailing empty shards
                placements.append(Placement(table, int(shard.shard_offsets[1]), cols, int(shard.shard_offsets[0]),
                                            rows, int(rank)))
    return Plan(task.name, method, task.ngpu, tuple(placements), seed,
                metadata={"torchrec_sharding_types": dict(sorted(kinds.items()))})
