"""Built fused ops kept for the next use: a measured round times the same device shards again
and again, and building an op (allocating and zeroing its weights) costs more than timing it
on large tables (``constants.OP_CACHE_GB``, ``constants.OP_CACHE_MEMORY_SHARE``)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from shardlab import constants as C
from shardlab.measure.hardware import HardwareProfile, available_memory_bytes
from shardlab.tables import Table


class OpCache:
    """Fused ops built once and timed again: key -> (op, lookup batches, gradients), holding at
    most ``max_gb`` GB of ops' weights and optimizer state (default
    :data:`~shardlab.constants.OP_CACHE_GB`). An op that would go over is built for its one use
    and dropped; nothing is evicted (in a round's cyclic order an evicting cache would drop
    every op before its next use). ``built`` / ``reused``: how many ops were built / taken from
    the cache; ``held_bytes``: what it holds (bytes). A measured sitting opens one with
    :meth:`for_this_host`."""

    def __init__(self, max_gb: float = C.OP_CACHE_GB, seed: Any = 0):
        self.max_gb = float(max_gb)
        self.held_bytes = 0
        self.built = 0
        self.reused = 0
        self._ops: dict[tuple, Any] = {}
        self._spacers: list[Any] = []
        self._rng = np.random.default_rng([int(x) for x in np.atleast_1d(seed)])

    def _spacer(self) -> Any:
        """A zeroed block (so it holds physical pages) of 0 to
        :data:`~shardlab.constants.OP_SPACER_BYTES` bytes (64-byte steps, drawn by the cache's
        seed), allocated before an op is built and kept as long as the op, so that the op's buffers
        lie elsewhere from one cache to the next; None when the constant is 0."""
        most = C.OP_SPACER_BYTES // 64
        return torch.zeros(int(self._rng.integers(0, most + 1)) * 64, dtype=torch.uint8) if most else None

    @classmethod
    def for_this_host(cls, seed: Any = 0) -> "OpCache":
        """A cache of :data:`~shardlab.constants.OP_CACHE_GB` GB, or of
        :data:`~shardlab.constants.OP_CACHE_MEMORY_SHARE` of the memory available now where that
        is less (the most where the OS does not say)."""
        free = available_memory_bytes()
        most = C.OP_CACHE_GB if free is None else min(C.OP_CACHE_GB, C.OP_CACHE_MEMORY_SHARE * free / C.GB)
        return cls(most, seed)

    def takes(self, key: tuple, nbytes: int) -> bool:
        """Whether :meth:`get` would keep (or already holds) the op under ``key``."""
        return key in self._ops or self.held_bytes + nbytes <= self.max_gb * C.GB

    def get(self, key: tuple, nbytes: int, make: Callable[[], Any]) -> Any:
        """The value cached under ``key``, else ``make()``, kept when ``nbytes`` more fit."""
        if key in self._ops:
            self.reused += 1
            return self._ops[key]
        self.built += 1
        spacer = self._spacer()
        value = make()
        if self.held_bytes + nbytes <= self.max_gb * C.GB:
            self._ops[key] = value
            self._spacers.append(spacer)
            self.held_bytes += nbytes
        return value


def op_key(tables: Sequence[Table], profile: HardwareProfile, pooled: bool, first_batch: int) -> tuple:
    """An op's identity in an :class:`OpCache`: its tables in order, pooled or not, its lookup
    batches and the profile fields that change the op."""
    return (tuple(tables), pooled, first_batch, profile.batch_size, profile.input_batches,
            profile.weights_precision, profile.optimizer, profile.device)


def op_bytes(tables: Sequence[Table], profile: HardwareProfile) -> int:
    """Bytes of an op's weights and optimizer state."""
    return sum(t.memory_bytes(profile.weights_precision, profile.optimizer) for t in tables)
