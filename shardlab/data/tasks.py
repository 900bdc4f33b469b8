"""Task generation following the seeds: T tables drawn from a pool split, a random dim per
table from {4, 8, 16, 32, 64, 128}, G devices with a memory cap each.

Train and test tasks draw from disjoint halves of the pool (``TablePool.train`` /
``TablePool.test``), so a method trained on train tasks is judged on tables it never saw.
The same arguments always give the same task.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from shardlab import constants as C
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.tables import Table, Task

SPLITS = ("train", "test", "all")


def pool_tables(pool: str, split: str) -> tuple[Table, ...]:
    """Tables of ``split`` ("train", "test" or "all") of the named shipped pool."""
    from shardlab.data.pool import load_pool

    if split not in SPLITS:
        raise ShardlabError(f"field 'split' = {split!r} must be one of {', '.join(SPLITS)}")
    p = load_pool(pool)
    return {"train": p.train, "test": p.test, "all": p.tables}[split]


def task_from_tables(tables: Sequence[Table], ngpu: int, mem_cap_gb: float, name: str,
                     batch_size: int = C.DEFAULT_BATCH_SIZE, weights_precision: str = "fp32",
                     optimizer: str = "exact_sgd") -> Task:
    """A task over the given tables as they are (dims kept)."""
    return Task(name, ngpu, mem_cap_gb, tuple(tables), batch_size, weights_precision, optimizer)


def generate_task(pool: str = C.DEFAULT_POOL, ntables: int = 50, ngpu: int = 4,
                  mem_cap_gb: float = 4.0, batch_size: int = C.DEFAULT_BATCH_SIZE, seed: int = 0,
                  split: str = "test", dims: Sequence[int] = C.SEED_DIMS,
                  weights_precision: str = "fp32", optimizer: str = "exact_sgd",
                  max_fill: float = 0.9, name: str | None = None,
                  tables: Sequence[Table] | None = None) -> Task:
    """Draw a task of ``ntables`` distinct tables from ``pool``'s ``split`` (or from ``tables``).

    Each table gets a dim drawn uniformly from those of ``dims`` at which it fits one device
    (``mem_cap_gb``, GB); tables that fit at no dim are not drawn. Draws are repeated (up to
    100 times) until all tables together use at most ``max_fill`` of the ``ngpu`` devices'
    memory, so that table-wise placement is possible. Deterministic in ``seed``.
    """
    source = tuple(tables) if tables is not None else pool_tables(pool, split)
    if ntables < 1 or ntables > len(source):
        raise ShardlabError(f"field 'ntables' = {ntables} must be in [1, {len(source)}] "
                            f"(tables in {pool if tables is None else 'the given list'} {split})")
    if not dims or any(d % C.DIM_MULTIPLE or d <= 0 for d in dims):
        raise ShardlabError(f"field 'dims' = {list(dims)} must be positive multiples of {C.DIM_MULTIPLE}")
    origin = f"{pool}-{split}" if tables is None else "tables"
    label = name or f"{origin}-{ntables}x{ngpu}-seed{seed}"
    probe = Task(label, ngpu, mem_cap_gb, (source[0],), batch_size, weights_precision, optimizer)
    cap = probe.mem_cap_bytes
    rng = np.random.default_rng([seed, ntables, ngpu])
    dims = sorted(int(d) for d in dims)
    for _ in range(100):
        chosen: list[Table] = []
        total = 0
        for i in rng.permutation(len(source)):
            t = source[int(i)]
            fitting = [d for d in dims if probe.block_bytes(t.rows, d) <= cap]
            if not fitting:
                continue
            dim = fitting[int(rng.integers(len(fitting)))]
            chosen.append(t.with_dim(dim))
            total += probe.block_bytes(t.rows, dim)
            if len(chosen) == ntables:
                break
        if len(chosen) < ntables:
            raise InfeasibleError(f"task '{label}': only {len(chosen)} of the candidate tables fit the "
                                  f"{mem_cap_gb:g} GB cap at any dim, {ntables} asked")
        if total <= max_fill * cap * ngpu:
            return Task(label, ngpu, mem_cap_gb, tuple(chosen), batch_size, weights_precision,
                        optimizer)
    raise InfeasibleError(f"task '{label}': 100 draws of {ntables} tables all needed more than "
                          f"{max_fill:.0%} of {ngpu} x {mem_cap_gb:g} GB; raise mem_cap_gb or ngpu")


def generate_tasks(n: int, seed: int = 0, **kwargs) -> list[Task]:
    """``n`` tasks with seeds ``seed, seed+1, ...`` (other arguments as :func:`generate_task`)."""
    return [generate_task(seed=seed + i, **kwargs) for i in range(n)]
