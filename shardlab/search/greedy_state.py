"""Greedy placement state: memory used and accumulated weight per device, for the heuristics'
one-pass placements (each step O(ngpu) numpy work)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from shardlab import constants as C
from shardlab.errors import InfeasibleError
from shardlab.tables import Table, Task


class DeviceState:
    """Memory used (bytes, int64 array) and accumulated weight (float64 array) per device
    during a greedy placement; each step is O(ngpu) numpy work, not Python loops."""

    def __init__(self, task: Task):
        self.task = task
        self.mem = np.zeros(task.ngpu, dtype=np.int64)
        self.weight = np.zeros(task.ngpu, dtype=np.float64)
        self._cap = task.mem_cap_bytes

    def fits(self, device: int, table: Table) -> bool:
        """Whether ``table`` fits on ``device`` under the cap."""
        return int(self.mem[device]) + self.task.table_bytes(table) <= self._cap

    def _fit_mask(self, table: Table, need: int | None = None, exclude: Sequence[int] = ()) -> np.ndarray:
        """Boolean mask of the devices where ``table`` (or ``need`` bytes of it) fits, devices in
        ``exclude`` left out; raises :class:`InfeasibleError` naming the table (and how many GB
        short) when there is none."""
        need = self.task.table_bytes(table) if need is None else need
        mask = self.mem <= self._cap - need
        mask[list(exclude)] = False
        if not mask.any():
            free = self._cap - int(np.delete(self.mem, list(exclude)).min(initial=self._cap))
            raise InfeasibleError(
                f"task '{self.task.name}': table '{table.name}' fits no device: it needs "
                f"{need / C.GB:.3f} GB, the emptiest device has {free / C.GB:.3f} GB free "
                f"({(need - free) / C.GB:.3f} GB short)", table.name, (need - free) / C.GB)
        return mask

    def feasible_devices(self, table: Table, need: int | None = None, exclude: Sequence[int] = ()) -> list[int]:
        """Devices where ``table`` (``need`` bytes of it: a row block) fits, not in ``exclude``
        (ascending ids); raises :class:`InfeasibleError` when there is none."""
        return np.flatnonzero(self._fit_mask(table, need, exclude)).tolist()

    def lightest_feasible(self, table: Table, need: int | None = None, exclude: Sequence[int] = ()) -> int:
        """The feasible device (as :meth:`feasible_devices`) with the smallest weight (ties: less
        memory, then the lower id)."""
        mask = self._fit_mask(table, need, exclude)
        w = np.where(mask, self.weight, np.inf)
        tied = mask & (w == w.min())
        m = np.where(tied, self.mem, np.iinfo(np.int64).max)
        return int(np.argmin(m))

    def place(self, device: int, table: Table, weight: float = 0.0, need: int | None = None) -> None:
        """Account ``table`` (``need`` bytes of it, default all) and its ``weight`` on ``device``."""
        self.mem[device] += self.task.table_bytes(table) if need is None else need
        self.weight[device] += weight
