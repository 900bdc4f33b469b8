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

The batch slices and index counts are :mod:`shardlab.schedule`'s, as the profilers and the
evaluators count them.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from shardlab.costmodel.rowwise_comm import WithRowWise
from shardlab.schedule import batch_rows, owner_counts
from shardlab.search.row_wise import RowBlocks, RowChoice


def row_pattern(rows: RowBlocks, choice: Mapping[int, RowChoice], batch_size: int) -> tuple[np.ndarray, dict]:
    """The all-to-all offset (G,) and the row-wise pattern (``{"dim", "index_counts"}``) of one
    choice of row layouts (module docstring), at ``batch_size`` samples per step."""
    task = rows.task
    g = task.ngpu
    offset = np.zeros(g)
    counts = np.zeros((g, g), dtype=np.int64)
    slices = batch_rows(batch_size, g)
    dim = 0
    for i, c in choice.items():
        t = task.tables[i]
        if c.k == g and g > 1:
            offset += t.dim
            dim += t.dim
        counts += np.array(owner_counts(g, slices, [(b.device, b.table.pooling_factor) for b in rows.blocks(i, c)]))
    return offset, {"dim": int(dim), "index_counts": counts.tolist() if counts.any() else []}


def row_aware_comm(base: Any, rowwise_model: Any, rows: RowBlocks, choice: Mapping[int, RowChoice]) -> WithRowWise:
    """The comm model of search states with ``choice``'s row layouts (module docstring)."""
    offset, pattern = row_pattern(rows, choice, int(rowwise_model.setting("batch_size")))
    return WithRowWise(base, rowwise_model.increment(rows.task.ngpu, pattern), offset)
