"""The comm profiler inside a process group that is already running: ranks started by
``torchrun`` (one process per GPU, on one host or many; ``python -m shardlab.dist``) instead of
spawned on this host by :class:`~shardlab.measure.comm.CommBench`.

:class:`GroupBench` measures exactly what a ``CommBench`` measures (the same buffers, barriers,
forward delays and timing: :mod:`shardlab.measure.comm`), and returns the same
:class:`~shardlab.measure.records.CommRecord`, but *every rank calls it*, in the same order with the
same arguments (the callers are deterministic, so they do). Besides measuring it lets ranks share
values: :meth:`GroupBench.gather` (every rank's value, on every rank) and :meth:`GroupBench.share`
(rank 0's value, on every rank), so that one rank (0) can own a file and the others follow it.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch
import torch.distributed as dist

from shardlab.errors import ShardlabError
from shardlab.measure.comm import BACKENDS, check_patterns, comm_record, measure_rank
from shardlab.measure.records import CommRecord
from shardlab.measure.rowwise_comm import RowWise


class GroupBench:
    """``CommBench.measure`` on the default process group (module docstring). ``batch_size``:
    the global batch B (rows); ``dtype``: the pooled embeddings' element type. The group must be
    initialised (``dist.init_process_group``) and, on CUDA, this rank's device set
    (``torch.cuda.set_device(LOCAL_RANK)``)."""

    #: Every rank of the group takes part in each call (a spawned bench is driven by one process).
    collective = True

    def __init__(self, batch_size: int, dtype: torch.dtype = torch.float32):
        if not dist.is_initialized():
            raise ShardlabError("group bench: no process group (start the ranks with torchrun and "
                                "call dist.init_process_group first)")
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.backend = str(dist.get_backend())
        self.device = BACKENDS.get(self.backend)
        if self.device is None:
            raise ShardlabError(f"group bench: backend {self.backend!r} is neither gloo (cpu) nor nccl (cuda)")
        if batch_size < self.world_size:
            raise ShardlabError(f"group bench: field 'batch_size' = {batch_size} must be >= world_size "
                                f"({self.world_size})")
        self.batch_size, self.dtype = int(batch_size), dtype
        local = torch.cuda.current_device() if self.device == "cuda" else None
        self._cfg = {"batch_size": self.batch_size, "dtype": dtype, "device_index": local,
                     "device_name": f"cuda:{local}" if self.device == "cuda" else "cpu"}

    @classmethod
    def for_profile(cls, profile: Any) -> "GroupBench":
        """A bench at a hardware profile's batch size on the running group."""
        if BACKENDS.get(profile.comm_backend) is None or str(dist.get_backend()) != profile.comm_backend:
            raise ShardlabError(f"group bench: profile '{profile.name}' wants backend {profile.comm_backend!r} "
                                f"but the group runs {dist.get_backend()!r}")
        return cls(profile.batch_size)

    @property
    def launcher(self) -> dict[str, Any]:
        """How the ranks were started, for provenance: torchrun's world, local world and node count."""
        local = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))
        return {"launcher": "torchrun", "world_size": self.world_size, "local_world_size": local,
                "nnodes": max(1, self.world_size // max(1, local)), "backend": self.backend}

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order, on every rank."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

    def share(self, value: Any) -> Any:
        """Rank 0's ``value`` (picklable) on every rank."""
        box = [value if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def measure(self, dim_sums: Sequence[int], delays_ms: Sequence[float] | None = None,
                repeats: int = 10, warmup: int = 3, rowwise: RowWise | None = None) -> CommRecord:
        """Forward and backward all-to-all for ``dim_sums[g]`` columns on rank g, rank g delayed
        ``delays_ms[g]`` ms before the forward, with ``rowwise``'s collectives if any (as
        :meth:`CommBench.measure`); every rank gets the whole sample."""
        return self.measure_many([(dim_sums, delays_ms, rowwise)], repeats, warmup)[0]

    def measure_many(self, patterns: Sequence[tuple[Sequence[int], Sequence[float] | None, RowWise | None]],
                     repeats: int = 10, warmup: int = 3, seed: Any = 0) -> list[CommRecord]:
        """:meth:`CommBench.measure_many` on the group: every pattern's exchanges in interleaved
        sweeps (the same orders on every rank), one record per pattern on every rank."""
        checked = check_patterns(self.world_size, patterns, repeats, warmup)
        times = self.gather(measure_rank(self.rank, self._cfg, checked, repeats, warmup, seed))
        return [comm_record(self.world_size, self.batch_size, dims, delays, [t[k] for t in times], repeats, warmup,
                            self.backend, self.device, self.dtype, rw) for k, (dims, delays, rw) in enumerate(checked)]
