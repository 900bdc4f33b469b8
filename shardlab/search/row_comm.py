"""Row-wise comm in NeuroShard's search (issue 18; opt-in: ``NeuroShardSharder(rowwise_comm=...)``).

Without it the search costs a row block like any other block: its columns on its device's
all-to-all. With a row-wise comm model (:class:`~shardlab.costmodel.rowwise_comm.RowWiseComm`,
analytic, fitted to measured row-wise comm) each choice of row layouts gets its own comm model,
as the model evaluator costs a finished plan (``evaluate/model.py``):

- a table split over every device (row-wise, k = G) leaves the all-to-all: its columns are
  taken off every device's dim sum, and reduce-scattered forward / all-gathered backward;
- every row-split table's blocks receive their rows' lookups from every rank's batch slice
  (``index_counts[r][o]`` += round(block pooling x slice rows of r));
- the row-wise model's increment for that pattern is added to every device's comm.

The search layer sees no profiler: the slices are counted here as the profiler splits a batch
(B // G rows each, one more for the first B % G ranks).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from shardlab.search.row_wise import RowBlocks, RowChoice


class RowAwareComm:
    """``base`` (any comm model) with ``offset`` (G,) columns taken off every dim sum (floored at
    0) and ``increment`` (G, 2) fw/bw ms added: ``predict(dim_sums, delays_ms)`` -> (n, G, 2) ms."""

    def __init__(self, base: Any, offset: np.ndarray, increment: np.ndarray):
        self.base = base
        self.offset = np.asarray(offset, dtype=float)
        self.increment = np.asarray(increment, dtype=float)

    def predict(self, dim_sums: Any, delays_ms: Any = None) -> np.ndarray:
        """(n, G, 2) forward and backward ms per rank."""
        d = np.maximum(np.atleast_2d(np.asarray(dim_sums, dtype=float)) - self.offset[None], 0.0)
        return np.asarray(self.base.predict(d, delays_ms), dtype=float) + self.increment[None]


def slice_rows(batch_size: int, world_size: int) -> list[int]:
    """Rows of each rank's batch slice (module docstring)."""
    base, extra = divmod(batch_size, world_size)
    return [base + (1 if g < extra else 0) for g in range(world_size)]


def row_pattern(rows: RowBlocks, choice: Mapping[int, RowChoice], batch_size: int) -> tuple[np.ndarray, dict]:
    """The all-to-all offset (G,) and the row-wise pattern (``{"dim", "index_counts"}``) of one
    choice of row layouts (module docstring), at ``batch_size`` samples per step."""
    task = rows.task
    g = task.ngpu
    offset = np.zeros(g)
    counts = np.zeros((g, g), dtype=np.int64)
    slices = slice_rows(batch_size, g)
    dim = 0
    for i, c in choice.items():
        t = task.tables[i]
        if c.k == g and g > 1:
            offset += t.dim
            dim += t.dim
        for b in rows.blocks(i, c):
            counts[:, b.device] += np.round(b.table.pooling_factor * np.array(slices)).astype(np.int64)
    return offset, {"dim": int(dim), "index_counts": counts.tolist() if counts.any() else []}


def row_aware_comm(base: Any, rowwise_model: Any, rows: RowBlocks, choice: Mapping[int, RowChoice]) -> RowAwareComm:
    """The comm model of search states with ``choice``'s row layouts (module docstring)."""
    offset, pattern = row_pattern(rows, choice, int(rowwise_model.setting("batch_size")))
    return RowAwareComm(base, offset, rowwise_model.increment(rows.task.ngpu, pattern))

