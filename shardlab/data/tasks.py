"""Task generation following the seeds: T tables drawn from a pool split, a random dim per
table from {4, 8, 16, 32, 64, 128} (or each table's own dim, ``dims=None``), G devices with a
memory cap each.

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
                  split: str = "test", dims: Sequence[int] | None = C.SEED_DIMS,
                  weights_precision: str = "fp32", optimizer: str = "exact_sgd",
                  max_fill: float = 0.9, name: str | None = None,
                  tables: Sequence[Table] | None = None) -> Task:
    """Draw a task of ``ntables`` distinct tables from ``pool``'s ``split`` (or from ``tables``).

    Each table gets a dim drawn uniformly from those of ``dims`` at which it fits one device
    (``mem_cap_gb``, GB); tables that fit at no dim are not drawn. ``dims=None`` keeps every
    table's own dim instead; a drawn table that does not fit one device at it is an
    :class:`InfeasibleError` naming it. Draws are repeated (up to 100 times) until all tables
    together use at most ``max_fill`` of the ``ngpu`` devices' memory, so that table-wise
    placement is possible. Deterministic in ``seed``.
    """
    source = tuple(tables) if tables is not None else pool_tables(pool, split)
    if ntables < 1 or ntables > len(source):
        raise ShardlabError(f"field 'ntables' = {ntables} must be in [1, {len(source)}] "
                            f"(tables in {pool if tables is None else 'the given list'} {split})")
    if dims is not None and (not dims or any(d % C.DIM_MULTIPLE or d <= 0 for d in dims)):
        raise ShardlabError(f"field 'dims' = {list(dims)} must be positive multiples of {C.DIM_MULTIPLE}")
    origin = f"{pool}-{split}" if tables is None else "tables"
    label = name or f"{origin}-{ntables}x{ngpu}-seed{seed}"
    probe = Task(label, ngpu, mem_cap_gb, (source[0],), batch_size, weights_precision, optimizer)
    cap = probe.mem_cap_bytes
    rng = np.random.default_rng([seed, ntables, ngpu])
    dims = None if dims is None else sorted(int(d) for d in dims)
    draws = 100 if dims is not None or ntables < len(source) else 1  # kept dims, all: one draw
    for _ in range(draws):
        chosen: list[Table] = []
        total = 0
        for i in rng.permutation(len(source)):
            t = source[int(i)]
            if dims is None:
                _check_own_dim(probe, t)
                chosen.append(t)
            else:
                fitting = [d for d in dims if probe.block_bytes(t.rows, d) <= cap]
                if not fitting:
                    continue
                chosen.append(t.with_dim(fitting[int(rng.integers(len(fitting)))]))
            total += probe.block_bytes(t.rows, chosen[-1].dim)
            if len(chosen) == ntables:
                break
        if len(chosen) < ntables:
            raise InfeasibleError(f"task '{label}': only {len(chosen)} of the candidate tables fit the "
                                  f"{mem_cap_gb:g} GB cap at any dim, {ntables} asked")
        if total <= max_fill * cap * ngpu:
            return Task(label, ngpu, mem_cap_gb, tuple(chosen), batch_size, weights_precision,
                        optimizer)
    what = " at their own dims" if dims is None else ""
    raise InfeasibleError(f"task '{label}': {draws} draw(s) of {ntables} tables{what} all needed "
                          f"more than {max_fill:.0%} of {ngpu} x {mem_cap_gb:g} GB; raise "
                          "mem_cap_gb or ngpu")


def _check_own_dim(probe: Task, t: Table) -> None:
    """InfeasibleError naming ``t`` if it does not fit one device of ``probe`` at its own dim."""
    need = probe.block_bytes(t.rows, t.dim)
    if need > probe.mem_cap_bytes:
        excess = (need - probe.mem_cap_bytes) / C.GB
        raise InfeasibleError(f"task '{probe.name}': table '{t.name}' does not fit at its own dim "
                              f"{t.dim}: needs {need / C.GB:.3f} GB, {excess:.3f} GB over the "
                              f"{probe.mem_cap_gb:g} GB cap (field 'dim'; pass dims to draw "
                              "smaller ones)", t.name, excess)


def task_dims(dims: Sequence[int] | None, imported: bool) -> tuple[tuple[int, ...] | None, str]:
    """The ``dims`` argument of :func:`generate_task` for the ``tasks`` verb, and the words for
    its summary line: explicit ``dims`` are drawn from; ``None`` keeps an imported table's own
    dims ("dims kept") and draws a pool task's from ``SEED_DIMS`` as the seeds do."""
    if dims is None and imported:
        return None, "dims kept"
    chosen = tuple(int(d) for d in (C.SEED_DIMS if dims is None else dims))
    return chosen, "dims drawn from " + ",".join(str(d) for d in chosen)


def generate_tasks(n: int, seed: int = 0, **kwargs) -> list[Task]:
    """``n`` tasks with seeds ``seed, seed+1, ...`` (other arguments as :func:`generate_task`)."""
    return [generate_task(seed=seed + i, **kwargs) for i in range(n)]
