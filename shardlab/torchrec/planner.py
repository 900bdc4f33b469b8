"""``ShardlabPlanner``: TorchRec's ``ShardingPlanner`` interface over shardlab's methods, so that
one line changes TorchRec's plan to shardlab's::

    planner = ShardlabPlanner(topology=topology, constraints=constraints)   # NeuroShard
    plan = planner.collective_plan(model, sharders, pg)                    # rank 0 plans
    model = DistributedModelParallel(model, env, device, plan=plan, sharders=sharders)

What it does with the model (``docs/torchrec.md``): every pooled collection the sharders shard
(``EmbeddingBagCollection``, and the position-weighted ``FeatureProcessedEmbeddingBagCollection``,
found and keyed as TorchRec's planner finds them) becomes tables of one Task -- rows and dim from
the configs, the precision of the configs, the optimizer of the sharders' fused params,
``topology.world_size`` devices with each rank's memory less TorchRec's own storage reservation,
a global batch of ``batch_size`` samples per rank times the ranks; pooling factors and reuse bins
measured on ``sample`` (the user's ``KeyedJaggedTensor`` batches), else from the constraints, else
a labelled assumption. A module of another kind that a sharder would shard is one line.

Constraints are honoured per table: sharding types (among what the collection's sharder offers
and shardlab places: table-, column-, row- and table-row-wise), ``min_partition``, kernels that
must include ``fused``, pooling factors, and the fused parameters carried into the plan. A table
allowed neither table- nor column-wise is laid out first, row-wise over every rank (table-row-wise
over one host, hosts taken in turn, where only that is allowed) as TorchRec lays such tables out;
the method places the other tables in the memory those leave on every rank, without costing
them. Every plan is checked against the constraints; a plan they forbid is one line naming the
table (TorchRec's ``PlannerError``, ``STRICT_CONSTRAINTS``).
"""

from __future__ import annotations

import hashlib
import time
import warnings
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

from torchrec.distributed.planner.types import PlannerError, PlannerErrorType
from torchrec.distributed.types import ShardingPlan, ShardingPlanner

from shardlab import constants as C
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.torchrec.export import check_export, export_for_device, export_torchrec, sharding_plan_of
from shardlab.io import save_plan, save_task
from shardlab.plan import Placement, Plan, validate_plan
from shardlab.search.portfolio import outside_space
from shardlab.search.registry import method_label, run_sharder, sharder_for, sharder_options
from shardlab.tables import Table, Task, block_bytes
from shardlab.torchrec.fixed_layouts import placed_task, pinned_row_layouts, replicas
from shardlab.torchrec.offload_choice import check_host_memory, first_offloads, min_hbm_bytes, offload_next
from shardlab.torchrec.model_tables import (REPLICATED, ConstraintError, ModelTable, collections, model_tables,
                                            rank_memory_bytes, resolved_sharders, task_optimizer, task_precision)
from shardlab.torchrec.sample_stats import model_task_tables, table_stats

class ShardlabPlannerError(ShardlabError, PlannerError):
    """A planning failure as TorchRec's code expects it (``except PlannerError``), with
    shardlab's one-line message; still a :class:`~shardlab.errors.ShardlabError`."""

    def __init__(self, message: str, error_type: PlannerErrorType = PlannerErrorType.OTHER) -> None:
        PlannerError.__init__(self, message, error_type)


class ShardlabPlanner(ShardingPlanner):
    """TorchRec ``ShardingPlanner`` planning with a shardlab method (module docstring).

    ``topology``: TorchRec's ``Topology``; ``batch_size``: samples per rank (TorchRec's meaning,
    default 512); ``constraints``: {table name: ``ParameterConstraints``}; ``method``: any
    registered sharder spec (default ``neuroshard``); ``profile``: the hardware profile whose
    shipped models a model-based method uses; ``model``: a cost-model bundle name or manifest
    path for methods that take one ("": the profile's default); ``seed``; ``sample``: the user's
    ``KeyedJaggedTensor`` batches, or :func:`~shardlab.torchrec.table_stats`'s result;
    ``reserved_share``: share of each rank's HBM kept free (0-1; TorchRec's
    ``heuristical_storage_reservation_percentage``); ``storage_reservation``: TorchRec's
    ``StorageReservation`` to apply (default: TorchRec's own ``HeuristicalStorageReservation`` at
    ``reserved_share``, which also keeps room for dense parameters and input batches).

    After :meth:`plan`, ``task_`` and ``plan_`` hold the Task and the shardlab Plan (what
    :meth:`save` writes, so that ``shardlab compare`` can judge the plan later)."""

    def __init__(self, topology: Any, batch_size: int | None = None, constraints: Mapping[str, Any] | None = None,
                 method: str = "neuroshard", profile: str = C.PLAN_PROFILE, model: str = "", seed: int = 0,
                 sample: Iterable[Any] | Mapping[str, Table] | None = None,
                 reserved_share: float = C.TORCHREC_RESERVED_SHARE, storage_reservation: Any = None) -> None:
        self.topology = topology
        self.batch_size = batch_size
        self.constraints = constraints
        self.method = method
        self.profile = profile
        self.model = model
        self.seed = seed
        self.sample = sample
        self.reserved_share = reserved_share
        self.storage_reservation = storage_reservation
        self.task_: Task | None = None
        self.plan_: Plan | None = None
        self._tried: Task | None = None
        self._check()

    def _check(self) -> None:
        """One-line errors naming a bad argument, before any planning."""
        per_rank = C.TORCHREC_DEFAULT_BATCH if self.batch_size is None else self.batch_size
        if isinstance(per_rank, bool) or not isinstance(per_rank, int) or per_rank < 1:
            raise ShardlabError(f"ShardlabPlanner: field 'batch_size' = {self.batch_size!r} must be an integer >= 1 "
                                "(samples per rank)")
        share = self.reserved_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share < 1.0:
            raise ShardlabError(f"ShardlabPlanner: field 'reserved_share' = {share!r} must be in [0, 1)")
        options = sharder_options(self.method)         # an unknown method: one line naming the known ones
        if self.model and "model" not in options:
            raise ShardlabError(f"ShardlabPlanner: field 'model' does not apply to method '{self.method}'")
        method_label(self.method)

    def hash_planner_context_inputs(self) -> int:
        """A SHA-256 hash (int) of everything besides the module that decides the plan: the
        topology (world, ranks per host, device, each rank's HBM and DDR), batch size,
        constraints, method, profile, model, seed, reserved share and storage reservation --
        equal for planners that plan any module alike, as TorchRec's planner hash is."""
        topo = self.topology
        devices = [(int(d.storage.hbm), int(d.storage.ddr)) for d in topo.devices]
        constraints = sorted((str(k), repr(v)) for k, v in dict(self.constraints or {}).items())
        parts = [int(topo.world_size), int(getattr(topo, "local_world_size", 0) or 0), str(topo.compute_device),
                 devices, self.batch_size, constraints, self.method, self.profile, self.model, self.seed,
                 float(self.reserved_share), type(self.storage_reservation).__name__,
                 getattr(self.storage_reservation, "_percentage", None)]
        return int(hashlib.sha256(repr(parts).encode("utf-8")).hexdigest(), 16)

    # ----------------------------------------------------------------------------- the Task
    def task(self, module: Any, sharders: Sequence[Any] | None = None) -> tuple[Task | None, list[ModelTable]]:
        """The Task of ``module`` (module docstring) and all its tables as read from the model.
        Data-parallel tables are not in the Task: each rank's memory is less their replicas, and
        a model of data-parallel tables only has no Task (None)."""
        topo = self.topology
        tables = model_tables(module, sharders, self.constraints, str(topo.compute_device))
        world = int(topo.world_size)
        batch = (C.TORCHREC_DEFAULT_BATCH if self.batch_size is None else self.batch_size) * world
        sample = self.sample
        if sample is not None and not isinstance(sample, Mapping):
            sample = table_stats(module, sample, sharders)
        if sample is not None:
            unknown = sorted(set(sample) - {t.name for t in tables})
            if unknown:
                raise ShardlabError(f"ShardlabPlanner: field 'sample' holds table '{unknown[0]}', which the module "
                                    "does not hold")
        precision, optimizer = task_precision(tables), task_optimizer(collections(module, sharders))
        cap = rank_memory_bytes(self._reserved(module, sharders))

        def held(t: ModelTable) -> int:
            return block_bytes(int(t.config.num_embeddings), int(t.config.embedding_dim), precision, optimizer)

        placed = [t for t in tables if t.allowed != (REPLICATED,)]       # each offloaded where it may be
        need = (sum(min_hbm_bytes(t, held(t)) for t in placed)
                + world * sum(held(t) for t in tables if t.allowed == (REPLICATED,)))
        if need > world * cap:                         # before the tables are checked: TorchRec's storage verdict first
            raise InfeasibleError(f"ShardlabPlanner: the tables need {need / C.GB:,.3f} GB, over the "
                                  f"{world * cap / C.GB:,.3f} GB all {world} ranks hold for them together")
        cap -= sum(held(t) for t in tables if t.allowed == (REPLICATED,))   # every rank holds each replica
        if not placed:
            return None, tables
        made = model_task_tables(placed, batch, sample, self.seed)
        name = f"torchrec-{type(module).__name__}-{len(made)}tables-{world}ranks"
        task = Task(name, world, cap / C.GB, tuple(made), batch, precision, optimizer)
        return task, tables

    def _reserved(self, module: Any, sharders: Sequence[Any] | None) -> Any:
        """The topology less TorchRec's storage reservation (``storage_reservation``, default
        TorchRec's ``HeuristicalStorageReservation(reserved_share)``: that share of HBM, the
        dense parameters times 6 and 20 copies of the input ids, as TorchRec's planner keeps);
        one line when nothing is left."""
        reservation = self.storage_reservation
        if reservation is None:
            from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation
            with warnings.catch_warnings():            # its FutureWarning: TorchRec's planner still uses it by default
                warnings.simplefilter("ignore", FutureWarning)
                reservation = HeuristicalStorageReservation(percentage=float(self.reserved_share))
        batch = C.TORCHREC_DEFAULT_BATCH if self.batch_size is None else self.batch_size
        try:
            reserved = reservation.reserve(topology=self.topology, batch_size=batch, module=module,
                                           sharders=resolved_sharders(sharders),
                                           constraints=dict(self.constraints or {}))
        except PlannerError:                           # TorchRec's own many-line refusal: said in one line below
            reserved = None
        if reserved is None or rank_memory_bytes(reserved) <= 0:
            left = 0.0 if reserved is None else rank_memory_bytes(reserved) / C.GB
            raise InfeasibleError(f"ShardlabPlanner: TorchRec's storage reservation leaves "
                                  f"{max(left, 0.0):.3f} GB on a rank for embedding tables "
                                  f"(of {rank_memory_bytes(self.topology) / C.GB:.3f} GB: reserved share, dense "
                                  "parameters and input batches)")
        return reserved

    # ----------------------------------------------------------------------------- planning
    def plan(self, module: Any, sharders: Sequence[Any] | None = None) -> Any:
        """TorchRec's ``ShardingPlan`` for ``module`` (one entry per collection path and table);
        a plan TorchRec would refuse, or one the constraints do not allow, is a one-line
        :class:`ShardlabPlannerError` naming the table (TorchRec's ``PlannerError`` and a
        :class:`~shardlab.errors.ShardlabError` at once). No sharders (``[]``): the empty plan,
        as TorchRec's planner returns."""
        if sharders is not None and len(sharders) == 0:
            return ShardingPlan({})
        try:
            return self._plan(module, sharders)
        except ShardlabPlannerError:
            raise
        except ShardlabError as e:
            raise ShardlabPlannerError(str(e), self._error_type(e)) from None

    def _error_type(self, e: ShardlabError) -> Any:
        """TorchRec's ``PlannerErrorType`` of a failure, by TorchRec's rule: a plan that does not
        fit is ``INSUFFICIENT_STORAGE`` when the tables' total bytes exceed all ranks' memory
        together (HBM, or host memory for the offloaded ones), else ``STRICT_CONSTRAINTS`` (as is
        a constraint that cannot be honoured);
        anything else ``OTHER``."""
        if isinstance(e, ConstraintError):
            return PlannerErrorType.STRICT_CONSTRAINTS
        if not isinstance(e, InfeasibleError):
            return PlannerErrorType.OTHER
        task = self._tried
        host = task.ngpu * min(int(d.storage.ddr) for d in self.topology.devices) if task is not None else 0
        if (task is None or sum(task.table_bytes(t) for t in task.tables) > task.ngpu * task.mem_cap_bytes
                or sum(task.host_bytes(t, t.rows, t.dim) for t in task.tables) > host):
            # no task: the tables' total was already over all ranks' memory (see :meth:`task`)
            return PlannerErrorType.INSUFFICIENT_STORAGE
        return PlannerErrorType.STRICT_CONSTRAINTS

    def _plan(self, module: Any, sharders: Sequence[Any] | None) -> Any:
        """:meth:`plan`'s work (its errors are ShardlabError; :meth:`plan` makes them TorchRec's)."""
        start = time.perf_counter()
        self._tried = None
        task, tables = self.task(module, sharders)
        self._tried = task
        replicated = [t for t in tables if t.allowed == (REPLICATED,)]
        if task is None:                               # data-parallel tables only: nothing to place
            self.task_ = self.plan_ = None
            return replicas(replicated, int(self.topology.world_size))
        tables = [t for t in tables if t.allowed != (REPLICATED,)]
        lws = int(getattr(self.topology, "local_world_size", None) or task.ngpu)
        task, offloaded = first_offloads(task, tables)
        more = 1
        while True:                                    # offload 1, 2, 4 ... more tables while no plan fits HBM
            self._tried = task
            try:
                plan, kinds = self._place(task, tables, lws)
                break
            except InfeasibleError as e:
                task, more = offload_next(task, tables, offloaded, e, more), 2 * more
        check_host_memory(task, plan, min(int(d.storage.ddr) for d in self.topology.devices))
        metadata = dict(plan.metadata)
        if replicated:
            metadata["data_parallel"] = {t.name: "replicated on every rank (TorchRec's dense kernel, gradients "
                                         "all-reduced); not in the Task and not costed" for t in replicated}
        if offloaded:
            metadata["offloaded"] = {n: offloaded[n] for n in sorted(offloaded)}
        plan = replace(plan, metadata=metadata, search_seconds=time.perf_counter() - start)
        sharding_plan = self._sharding_plan(task, tables, plan, lws)
        for path, entries in replicas(replicated, int(self.topology.world_size)).plan.items():
            if path in sharding_plan.plan:                 # beside the placed tables of that collection
                sharding_plan.plan[path].update(entries)
            else:
                sharding_plan.plan[path] = entries
        self.task_, self.plan_ = task, plan
        return sharding_plan

    def _place(self, task: Task, tables: Sequence[ModelTable], lws: int) -> tuple[Plan, dict[str, str]]:
        """The method's plan of ``task`` (row layouts the constraints pin laid out first), checked
        against the constraints, and the pinned tables' sharding types."""
        pinned, kinds = pinned_row_layouts(task, tables, lws)
        rest = [t for t in tables if t.name not in kinds]
        placements: list[Placement] = list(pinned)
        metadata: dict[str, Any] = {}
        label = method_label(self.method)
        sub = placed_task(task, rest, pinned)
        one_host = lws >= task.ngpu                    # table-column-wise blocks may then go anywhere
        whole = tuple(t.name for t in tables if "column_wise" not in t.allowed
                      and not ("table_column_wise" in t.allowed and one_host))
        no_rows = tuple(t.name for t in rest if not {"row_wise", "table_row_wise"} & set(t.allowed))
        min_cols = tuple((t.name, t.min_cols) for t in rest if t.min_cols)
        if rest:
            config: dict[str, Any] = {"model": self.model} if self.model else {}
            options = sharder_options(self.method)
            kept = tuple(n for n in whole if n not in kinds)
            if kept and "whole" in options:
                config["whole"] = kept
            if "row_wise" in options and len(no_rows) == len(rest):
                config["row_wise"] = False
            elif no_rows and "no_rows" in options:
                config["no_rows"] = no_rows
            if min_cols and "min_cols" in options:
                config["min_cols"] = min_cols
            if "host_size" in options:                  # table-row-wise layouts inside the topology's hosts
                config["host_size"] = lws
            got = run_sharder(sharder_for(self.method, self.profile, **config), sub, self.seed)
            placements.extend(got.placements)
            metadata = dict(got.metadata)
            label = got.method
        if kinds:
            metadata["pinned_row_layouts"] = dict(sorted(kinds.items()))
            metadata["torchrec_sharding_types"] = {**metadata.get("torchrec_sharding_types", {}), **kinds}
        metadata["torchrec_planner"] = {"reserved_share": float(self.reserved_share), "mem_cap_gb": task.mem_cap_gb,
                                        "storage_reservation": type(self.storage_reservation).__name__
                                        if self.storage_reservation is not None else "HeuristicalStorageReservation",
                                        "profile": self.profile,
                                        "local_world_size": lws}
        plan = Plan(task.name, label, task.ngpu, tuple(placements), self.seed, metadata=metadata)
        validate_plan(task, plan)
        why = outside_space(task, plan, True, True, whole, no_rows, min_cols)   # every method, one check
        if why is not None:
            raise ConstraintError(f"ShardlabPlanner: method '{label}' {why}: the table's constraints forbid it")
        return plan, kinds

    def collective_plan(self, module: Any, sharders: Sequence[Any] | None = None, pg: Any = None) -> Any:
        """:meth:`plan` on rank 0 of ``pg`` (default: the world), its ``ShardingPlan`` broadcast to
        every rank (only rank 0 keeps ``task_`` and ``plan_``). A one-line error on rank 0 is
        broadcast too and raised on every rank, so no rank waits for a plan that never comes."""
        import torch.distributed as dist

        if pg is None:
            if not dist.is_initialized():
                raise ShardlabError("ShardlabPlanner: collective_plan needs an initialised process group "
                                    "(torch.distributed.init_process_group); plan() needs none")
            pg = dist.group.WORLD
        message: list[Any] = [None, None]
        if dist.get_rank(pg) == 0:
            try:
                message[0] = self.plan(module, sharders)
            except ShardlabError as e:
                message[1] = str(e)
        dist.broadcast_object_list(message, src=dist.get_global_rank(pg, 0), group=pg)
        if message[1] is not None:
            raise ShardlabPlannerError(message[1])
        return message[0]

    def save(self, task_path: str, plan_path: str) -> None:
        """Write the last planned Task and Plan as JSON (``shardlab compare TASK PLAN ...``)."""
        if self.task_ is None or self.plan_ is None:
            raise ShardlabError("ShardlabPlanner: nothing planned yet (call plan() first)")
        save_task(self.task_, task_path)
        save_plan(self.plan_, plan_path)

    # ----------------------------------------------------------------------------- pieces
    def _sharding_plan(self, task: Task, tables: Sequence[ModelTable], plan: Plan, lws: int) -> Any:
        """The plan as TorchRec's ``ShardingPlan``: each table's entry of the export, its sharding
        type checked against the constraints, grouped by collection path under the table's own
        name; shards on ``cuda:<local rank>`` or ``cpu`` as the topology computes."""
        export = export_torchrec(task, plan, "model", lws)
        if str(self.topology.compute_device) == "cpu":
            export = export_for_device(export, "cpu")
        check_export(export, task)
        modules: dict[str, dict[str, Any]] = {}
        for t in tables:
            entry = dict(export["plan"][t.name])
            kind = entry["sharding_type"]
            if kind not in t.allowed and kind == "table_wise" and "column_wise" in t.allowed:
                kind = entry["sharding_type"] = "column_wise"
            if (kind not in t.allowed and kind in ("table_wise", "column_wise") and "table_column_wise" in t.allowed
                    and len({r // lws for r in entry["ranks"]}) == 1):       # column blocks inside one host
                kind = entry["sharding_type"] = "table_column_wise"
            if kind not in t.allowed:
                raise ConstraintError(f"ShardlabPlanner: method '{plan.method}' placed table '{t.name}' {kind}, which its "
                                    f"constraints do not allow ({', '.join(t.allowed)})")
            modules.setdefault(t.path, {})[t.table] = entry
        made = sharding_plan_of(modules)
        for t in tables:                               # the constraints' fused parameters, as TorchRec carries them
            share = task.table(t.name).hbm_share
            for field, value in t.fused:
                if field == "cache_params" and 0 < share < 1 and getattr(value, "load_factor", None) is None:
                    value = replace(value, load_factor=share)          # the cache share the plan was costed at
                setattr(made.plan[t.path][t.table], field, value)
        return made
