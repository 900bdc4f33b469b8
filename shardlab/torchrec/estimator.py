"""``ShardlabPerfEstimator``: shardlab's cost models inside TorchRec's own planner, as a
``ShardEstimator`` that fills each shard's ``perf`` (ms)::

    estimator = [ShardlabPerfEstimator(topology, constraints), EmbeddingStorageEstimator(topology, constraints)]
    enumerator = EmbeddingEnumerator(topology, batch_size, constraints, estimator=estimator)
    planner = EmbeddingShardingPlanner(topology, batch_size, enumerator=enumerator, constraints=constraints)

**Compute** of a shard: the bundle's compute model (learned from measured fused TBE ops, or the
analytic one, by ``model``/``profile``) on the shard alone as one op -- forward and backward ms
of a block of the shard's rows and columns under the table's pooling factor and reuse bins at the
global batch (TorchRec's per-rank batch times the ranks). A row shard gets the table's lookups in
proportion to its rows and the table's reuse bins (the uniform-hash assumption TorchRec's own
estimator makes).

**Comm** of a shard: the increase of the busiest rank's forward and backward all-to-all ms when
the shard's columns are added to one rank of an otherwise idle all-to-all, by the profile's comm
model over ``topology.world_size`` ranks. A row shard pays the all-to-all of the table's full
width (each row shard sends partial sums for every sample, as TorchRec's estimator counts it).

**Kernels.** ``fused`` and the host-memory kernels (``fused_uvm_caching`` with the option's cache
load factor, ``fused_uvm``) are costed by shardlab: the block offloaded as the kernel says, its
host-link traffic the labelled analytic model's (:mod:`shardlab.costmodel.offload`). Other
kernels get the fused estimate's compute times TorchRec's own ratio for that kernel: the fused
kernel's bandwidth over this kernel's (``kernel_bw_lookup`` with the topology's bandwidths);
comm is unchanged.

Both are approximations a per-shard estimate must make: shardlab's plan cost is not a sum over
shards (a device runs its shards as one fused op; all-to-all time depends on every rank's
load), while TorchRec's partitioner and perf model add shard perfs per rank. ``source`` says
which models filled the estimates.

A table's statistics come from ``tables`` ({table name: shardlab Table}, e.g.
:func:`~shardlab.torchrec.table_stats` or ``ShardlabPlanner.task_``), else from the option
(rows and dim of its tensor, its pooling factors, reuse bins on assumed Zipf lookups).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.costmodel.bundle import CostModelBundle, load_bundle
from shardlab.data.importers import tables_from_records
from shardlab.data.hardware_profiles import FILE as PROFILE_FILE
from shardlab.data.hardware_profiles import profile_folder
from shardlab.tables import Table

ROW_TYPES = ("row_wise", "table_row_wise", "grid_shard")


class ShardlabPerfEstimator:
    """TorchRec ``ShardEstimator`` (its ``estimate`` protocol; torchrec is imported on use) over a shardlab cost-model bundle (module docstring).
    ``model``: bundle name or manifest path ("": the profile's default search model);
    ``profile``: hardware profile of the shipped models; ``tables``: known table statistics."""

    def __init__(self, topology: Any, constraints: Mapping[str, Any] | None = None, model: str = "",
                 profile: str = C.PLAN_PROFILE, tables: Mapping[str, Table] | None = None, seed: int = 0) -> None:
        self.topology = topology
        self.constraints = constraints
        self.model = model
        self.profile = profile
        self.tables = tables
        self.seed = seed
        self._bundle: CostModelBundle | None = None
        self._made: dict[str, Table] = {}

    @property
    def bundle(self) -> CostModelBundle:
        """The cost-model bundle (loaded once)."""
        if self._bundle is None:
            model = self.model or profile_folder(self.profile).search_model
            if not model:
                raise ShardlabError(f"ShardlabPerfEstimator: hardware profile '{self.profile}' names no search model "
                                    f"(field 'search_model' of its {PROFILE_FILE}); name one with field 'model'")
            self._bundle = load_bundle(model, self.profile)
        return self._bundle

    @property
    def source(self) -> str:
        """The models that filled the estimates: compute source + comm label."""
        return self.bundle.source + self.bundle.comm_for(int(self.topology.world_size))[1]

    def _table(self, option: Any, batch: int) -> Table:
        """The option's table statistics (module docstring), made once per table."""
        name = str(option.name)
        if self.tables and name in self.tables:
            return self.tables[name]
        if name not in self._made:
            rows, dim = (int(x) for x in option.tensor.shape)
            pf = float(sum(float(x) for x in option.input_lengths)) if option.input_lengths else C.TORCHREC_DEFAULT_POOLING
            rec = {"name": name, "rows": rows, "dim": dim, "pooling_factor": pf,
                   "source": "torchrec sharding option; pooling factor from its input lengths"}
            made = tables_from_records([rec], batch, C.ASSUMED_ZIPF, self.seed)[0]
            pooled = bool(getattr(option, "is_pooled", True))       # an EmbeddingCollection's option: sequence
            self._made[name] = made if pooled else replace(made, pooled=False)
        return self._made[name]

    def estimate(self, sharding_options: list[Any], sharder_data_map: Any = None) -> None:
        """Fill ``shard.perf`` of every shard of every option (ms; module docstring)."""
        from torchrec.distributed.planner.types import Perf

        world = int(self.topology.world_size)
        blocks, widths, where = [], [], []
        for i, option in enumerate(sharding_options):
            batch = int(option.batch_size) * world
            table = self._table(option, batch)
            share = self._hbm_share(option)
            if share is not None:                      # fused or host-memory kernels: shardlab's own costs
                table = replace(table, hbm_share=share)
            kind = str(getattr(option.sharding_type, "value", option.sharding_type))
            for j, shard in enumerate(option.shards):
                rows, cols = (int(x) for x in shard.size)
                if rows == 0 or cols == 0:
                    blocks.append(None)
                else:
                    share = rows / table.rows
                    blocks.append(Table(f"{table.name}[{j}]", rows, cols, table.pooling_factor * share,
                                        table.reuse_bins, table.source, pooled=table.pooled,
                                        hbm_share=table.hbm_share) if share < 1
                                  else table.with_dim(cols))
                # a pooled row-wise shard sends its table's full width of partial sums; a sequence
                # shard (and a pooled whole or column shard) its own output rows
                own = cols if blocks[-1] is None else blocks[-1].out_dim
                widths.append(table.dim if kind in ROW_TYPES and table.pooled else own)
                where.append((i, j))
        compute = np.zeros((len(blocks), 2))
        factor = np.array([self._kernel_factor(sharding_options[i]) for i, _ in where])
        real = [k for k, b in enumerate(blocks) if b is not None]
        if real:
            compute[real] = self.bundle.compute.predict([[blocks[k]] for k in real]) * factor[real, None]
        comm = self._comm_increase(np.asarray(widths, dtype=float), world)
        for k, (i, j) in enumerate(where):
            shard = sharding_options[i].shards[j]
            if blocks[k] is None:
                shard.perf = Perf(fwd_compute=0.0, fwd_comms=0.0, bwd_compute=0.0, bwd_comms=0.0)
                continue
            shard.perf = Perf(fwd_compute=float(compute[k, 0]), fwd_comms=float(comm[k, 0]),
                              bwd_compute=float(compute[k, 1]), bwd_comms=float(comm[k, 1]))

    @staticmethod
    def _hbm_share(option: Any) -> float | None:
        """The share of the option's table its kernel keeps in HBM: 1 for ``fused``, the cache
        load factor (default ``constants.UVM_CACHE_SHARE``) for ``fused_uvm_caching``, 0 for
        ``fused_uvm``; None for another kernel."""
        kernel = str(getattr(option.compute_kernel, "value", option.compute_kernel))
        if kernel not in C.OFFLOAD_KERNELS:
            return None
        if kernel == C.OFFLOAD_KERNELS[1]:
            factor = getattr(getattr(option, "cache_params", None), "load_factor", None)
            return float(C.UVM_CACHE_SHARE if factor is None else factor)
        return 1.0 if kernel == C.OFFLOAD_KERNELS[0] else 0.0

    def _kernel_factor(self, option: Any) -> float:
        """TorchRec's compute ratio of the option's kernel to ``fused`` (module docstring); 1 for
        the kernels shardlab costs itself (``fused`` and the host-memory ones, whose host-link
        traffic the analytic model adds); a one-line error naming the table for a kernel
        TorchRec's model has no bandwidth for."""
        from torchrec.distributed.planner.constants import kernel_bw_lookup

        kernel = str(getattr(option.compute_kernel, "value", option.compute_kernel))
        if kernel in C.OFFLOAD_KERNELS:
            return 1.0
        topo = self.topology
        cache = getattr(option, "cache_params", None)
        ratio = getattr(cache, "load_factor", None)
        args = (str(topo.compute_device), topo.hbm_mem_bw, topo.ddr_mem_bw, topo.hbm_to_ddr_mem_bw)
        fused = kernel_bw_lookup(args[0], "fused", *args[1:])
        this = kernel_bw_lookup(args[0], kernel, *args[1:], ratio)
        if not fused or not this:
            raise ShardlabError(f"ShardlabPerfEstimator: table '{option.name}': kernel '{kernel}' on "
                                f"{topo.compute_device} has no bandwidth in TorchRec's model to scale shardlab's fused cost by")
        return float(fused) / float(this)

    def _comm_increase(self, widths: np.ndarray, world: int) -> np.ndarray:
        """(n, 2) forward and backward all-to-all ms each width adds to the busiest rank (0 on one
        rank; never negative)."""
        out = np.zeros((len(widths), 2))
        if world < 2 or not len(widths):
            return out
        comm = self.bundle.comm_for(world)[0]
        uniq, inverse = np.unique(widths, return_inverse=True)
        dims = np.zeros((len(uniq) + 1, world))
        dims[1:, 0] = uniq
        pred = np.asarray(comm.predict(dims), dtype=float)          # (n + 1, G, 2)
        busiest = pred.sum(axis=2).argmax(axis=1)
        per = pred[np.arange(len(dims)), busiest]                   # (n + 1, 2)
        return np.maximum(per[1:] - per[0], 0.0)[inverse]
