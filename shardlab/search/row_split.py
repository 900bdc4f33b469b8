"""Row-wise splits for the heuristics: a table that
fits no device whole becomes the fewest equal row blocks that each fit (the first ``rows % k``
blocks one row longer), and its blocks go to distinct devices, as TorchRec's row-wise shards
do. A table that fits stays whole, so tasks without oversized tables get the plans they always
got.
"""

from __future__ import annotations

import math

from shardlab import constants as C
from shardlab.errors import InfeasibleError
from shardlab.tables import Table, Task


def fewest_row_blocks(task: Task, table: Table) -> int:
    """The fewest equal row blocks of ``table`` that each fit one device (1: it fits whole).
    Raises :class:`InfeasibleError` naming the table and the GB short when even one block per
    device is too big."""
    cap = task.mem_cap_bytes
    if task.table_bytes(table) <= cap:
        return 1
    for k in range(2, min(task.ngpu, table.rows) + 1):
        if task.hbm_bytes(table, math.ceil(table.rows / k), table.dim) <= cap:
            return k
    k = min(task.ngpu, table.rows)
    need = task.hbm_bytes(table, math.ceil(table.rows / k), table.dim)
    raise InfeasibleError(f"task '{task.name}': table '{table.name}' fits no device even in {k} row blocks: "
                          f"each needs {need / C.GB:.3f} GB, {(need - cap) / C.GB:.3f} GB over the "
                          f"{task.mem_cap_gb:g} GB cap", table.name, (need - cap) / C.GB)


def equal_row_ranges(rows: int, k: int) -> list[tuple[int, int]]:
    """``k`` contiguous (row_offset, rows) ranges covering ``rows``, sizes differing by at most
    one (the longer ones first)."""
    base, extra = divmod(rows, k)
    out, start = [], 0
    for i in range(k):
        n = base + (1 if i < extra else 0)
        out.append((start, n))
        start += n
    return out


def row_split(task: Task) -> list[list[tuple[int, int]]]:
    """Per table of ``task`` (task order): its row ranges, one range for a table that fits whole
    (module docstring); InfeasibleError for a table that fits no device in any split, or when
    all tables together exceed the devices' memory."""
    out = [equal_row_ranges(t.rows, fewest_row_blocks(task, t)) for t in task.tables]
    total = sum(task.hbm_bytes(t, n, t.dim) for t, ranges in zip(task.tables, out) for _, n in ranges)
    if total > task.mem_cap_bytes * task.ngpu:
        excess = (total - task.mem_cap_bytes * task.ngpu) / C.GB
        raise InfeasibleError(f"task '{task.name}': tables need {total / C.GB:.3f} GB in all, {excess:.3f} GB over "
                              f"{task.ngpu} x {task.mem_cap_gb:g} GB", None, excess)
    return out
