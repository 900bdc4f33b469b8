"""Tasks with tables larger than a device, as a user brings them: Task JSONs carrying only the
interface fields (name, rows, dim, pooling_factor, reuse_bins), built from the development
families' public table lists (``datasets/heldout_models``; never the sealed ones).

A task (:func:`oversized_task`, deterministic in its family and index):

1. the family's tables at their own dims and pooling factors, reuse bins measured on one batch
   of assumed Zipf(1.05) lookups (``family_tables``), rows scaled by one factor per family so
   that its largest table has :data:`LARGEST_ROWS` rows (relative sizes kept; each table's rows
   >= 1), then stripped to the interface fields;
2. the family's largest table, then the others in a seeded random order, each kept while the
   tables fill at most :data:`FILL` of the devices' memory, up to :data:`MAX_TABLES` tables;
3. the memory cap: the largest table's bytes / u, u drawn in [1.3, 2.2) -- so that table fits no
   device and must be cut into row blocks (others above the cap too).
"""

from __future__ import annotations

import zlib

import numpy as np

from shardlab.data.model_families import FAMILY_SETS, family_tables
from shardlab.constants import GB
from shardlab.tables import Table, Task

#: Rows of each family's largest table after scaling (all its tables scaled alike).
LARGEST_ROWS = 1_000_000
#: Most tables per task, and the share of the devices' memory they may fill.
MAX_TABLES, FILL = 10, 0.7
#: Devices per task (measured as this many ranks on this machine).
NGPU = 4
#: Samples per step (the ``cpu`` profile's batch).
BATCH_SIZE = 4096
#: Seed of every draw (with the family's crc32 and the task index).
SEED = 20261127


def oversized_task(family: str, index: int, ngpu: int = NGPU, batch_size: int = BATCH_SIZE) -> Task:
    """Task ``index`` of ``family`` (module docstring), named ``oversized-<family>-<index>``."""
    rng = np.random.default_rng([SEED, index, zlib.crc32(family.encode())])
    tables = family_tables(family, batch_size, seed=index)
    scale = LARGEST_ROWS / max(t.rows for t in tables)
    bare = [Table(t.name, max(1, int(round(t.rows * scale))), t.dim, t.pooling_factor, t.reuse_bins)
            for t in tables]
    big = max(range(len(bare)), key=lambda i: (bare[i].rows * bare[i].dim, -i))
    cap_bytes = bare[big].rows * bare[big].dim * 4 / float(rng.uniform(1.3, 2.2))
    budget = FILL * ngpu * cap_bytes
    chosen, used = [big], bare[big].rows * bare[big].dim * 4
    for i in rng.permutation(len(bare)):
        i = int(i)
        need = bare[i].rows * bare[i].dim * 4
        if i != big and len(chosen) < MAX_TABLES and used + need <= budget:
            chosen.append(i)
            used += need
    picked = tuple(bare[i] for i in sorted(chosen))
    return Task(f"oversized-{family}-{index}", ngpu, cap_bytes / GB, picked, batch_size)


def study_tasks(per_family: int = 2, first: int = 0) -> list[Task]:
    """``per_family`` tasks of every development family (indices ``first`` on), family by family."""
    return [oversized_task(f, i) for f in FAMILY_SETS for i in range(first, first + per_family)]
