"""What a plan's devices exchange: the data of its all-to-alls, per batch, from its placements
(what the measured evaluators run and the cost models cost as a plan's communication)."""

from __future__ import annotations

from typing import Any

from shardlab.data.lookups import placed_row_block
from shardlab.measure.rowwise_comm import RowWise
from shardlab.plan import Plan
from shardlab.schedule import batch_rows, owner_counts
from shardlab.tables import Task


def comm_pattern(task: Task, plan: Plan, batch_size: int) -> tuple[list[float], RowWise]:
    """What ``plan``'s devices exchange per batch of ``batch_size`` samples: the per-device dim
    sums of the pooled all-to-all, and the row-wise traffic (``profile/rowwise_comm.py``).

    - A whole table or column block: its columns on its device's dim sum (as before).
    - A column range split by rows over every device (row-wise): its columns reduce-scattered
      and all-gathered (``RowWise.dim``), not in any dim sum.
    - A column range split by rows over some devices (table-row-wise within a group): each
      holder's partial sums go to every rank, the all-to-all's data movement, so its columns
      count on each holder's dim sum.
    - Every row block's owner receives its rows' lookups from every rank's batch slice
      (``RowWise.index_counts``, from the block's measured pooling factor). Whole tables' index
      traffic is not counted here (the shipped comm samples carry none).
    - A sequence table has no partial sums to reduce: each block's owner sends back the rows
      its lookups hit, so every block counts its own output width (its lookups x columns,
      :attr:`~shardlab.tables.Table.out_dim` of the block) on its owner's dim sum.
    """
    g = plan.ngpu
    dims: list[float] = [0] * g
    rw_dim = 0
    counts = [[0] * g for _ in range(g)]
    ranges: dict[tuple[str, int, int], list[Any]] = {}
    for p in plan.placements:
        ranges.setdefault((p.table, p.col_offset, p.cols), []).append(p)
    slices = batch_rows(batch_size, g)
    for (name, _, cols), blocks in ranges.items():
        t = task.table(name)
        if len(blocks) == 1 and blocks[0].rows == t.rows:
            dims[blocks[0].device] += t.out_width(cols)
            continue
        made = [placed_row_block(t, b.row_offset, b.rows, task.batch_size) for b in blocks]
        if not t.pooled:
            for b, sub in zip(blocks, made):
                dims[b.device] += sub.out_width(cols)
        elif {b.device for b in blocks} == set(range(g)) and g > 1:
            rw_dim += cols
        else:
            for b in blocks:
                dims[b.device] += cols
        owners = [(b.device, sub.pooling_factor) for b, sub in zip(blocks, made)]
        for r, row in enumerate(owner_counts(g, slices, owners)):
            counts[r] = [a + c for a, c in zip(counts[r], row)]
    index = tuple(tuple(r) for r in counts) if any(any(r) for r in counts) else ()
    return dims, RowWise(rw_dim, index)
