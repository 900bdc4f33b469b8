"""Hardware profiles: named bundles of how costs are measured on one kind of machine.

A profile fixes the device kind, the batch size the kernels are timed at, weight precision,
optimizer, communication backend and timing settings. Every measured sample records the
profile it was taken under, and cost models are trained per profile. On CPU a batch of 65536
costs seconds per shard (STACK_NOTES.md), so the CPU profile times a smaller batch and says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from shardlab import constants as C
from shardlab.errors import ShardlabError, field_error


@dataclass(frozen=True)
class HardwareProfile:
    """How to measure. ``batch_size``: samples per timed batch; ``threads``: CPU threads for
    the kernels (1 is steadier than 2 on CPU); ``warmup`` / ``repeats``: untimed and timed runs
    (the median of ``repeats`` is the cost); ``input_batches``: distinct lookup batches rotated
    through the runs so caches do not flatter the result."""

    name: str
    device: str
    batch_size: int
    weights_precision: str = "fp32"
    optimizer: str = "exact_sgd"
    comm_backend: str = "gloo"
    threads: int = 1
    warmup: int = 5
    repeats: int = 10
    input_batches: int = 3

    def __post_init__(self) -> None:
        owner = f"hardware profile '{self.name}'"
        if self.device not in ("cpu", "cuda"):
            raise field_error(owner, "device", self.device, "must be 'cpu' or 'cuda'")
        if self.weights_precision not in C.BYTES_PER_WEIGHT:
            raise field_error(owner, "weights_precision", self.weights_precision,
                              f"must be one of {sorted(C.BYTES_PER_WEIGHT)}")
        if self.optimizer not in C.OPTIMIZERS:
            raise field_error(owner, "optimizer", self.optimizer, f"must be one of {list(C.OPTIMIZERS)}")
        if self.comm_backend not in ("gloo", "nccl"):
            raise field_error(owner, "comm_backend", self.comm_backend, "must be 'gloo' or 'nccl'")
        for key in ("batch_size", "threads", "repeats", "input_batches"):
            if getattr(self, key) < 1:
                raise field_error(owner, key, getattr(self, key), "must be >= 1")
        if self.warmup < 0:
            raise field_error(owner, "warmup", self.warmup, "must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stored with every sample."""
        return asdict(self)


#: The shipped profiles. ``cpu`` follows the seeds (EXACT_SGD, fp32, median of 10 after 5
#: warm-ups) at batch 4096 so a campaign is practical on a 2-core machine; ``h200`` times the
#: seeds' batch of 65536 with NCCL; ``h100`` times the same compute on the one H100 that
#: shardlab's lent device machine has (one GPU cannot run NCCL between ranks, so its comm
#: backend is gloo: comm measured under it is CPU comm, and says so).
PROFILES: dict[str, HardwareProfile] = {
    "cpu": HardwareProfile("cpu", "cpu", batch_size=4096),
    "h200": HardwareProfile("h200", "cuda", batch_size=65536, comm_backend="nccl", threads=1),
    "h100": HardwareProfile("h100", "cuda", batch_size=65536, comm_backend="gloo", threads=1),
}


def get_profile(name: str | HardwareProfile) -> HardwareProfile:
    """The shipped profile called ``name`` (or ``name`` itself); one-line error otherwise."""
    if isinstance(name, HardwareProfile):
        return name
    if name not in PROFILES:
        raise ShardlabError(f"hardware profile '{name}' is unknown (known: {', '.join(PROFILES)})")
    return PROFILES[name]


def profile_with(name: str, batch_size: int | None = None, repeats: int | None = None,
                 warmup: int | None = None) -> HardwareProfile:
    """A shipped profile with some timing settings overridden; the name records the change."""
    prof = get_profile(name)
    changes = {k: v for k, v in (("batch_size", batch_size), ("repeats", repeats), ("warmup", warmup))
               if v is not None and v != getattr(prof, k)}
    if not changes:
        return prof
    suffix = ",".join(f"{k}={v}" for k, v in changes.items())
    return replace(prof, name=f"{prof.name}[{suffix}]", **changes)
