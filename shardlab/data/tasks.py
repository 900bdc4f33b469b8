"""Tables and tasks to shard: the shipped table pools, augmented copies of their tables, and
sharding tasks drawn from them.

**Pools.** A pool lives in ``datasets/<dir>/pool.json.gz`` (built by
``studies/tools/build_pool.py``, see the PROVENANCE.md beside it): synthetic DLRM-like tables
with their measured per-table stats and a stored train/test split. ``datasets/`` is found next
to the package (``Path(__file__).resolve().parents[2] / "datasets"``) unless the environment
variable ``SHARDLAB_DATASETS`` names another folder. Loads are cached per (name, folder).

**Augmentation** (pre-training data). NeuroShard copies every base table at each dim in {128,
64, 32, 16, 8, 4}; lookups do not depend on dim, so the copies keep their reuse bins.
Optionally (each switchable) a table also gets random variants with scaled rows, scaled pooling
factor or a shifted Zipf exponent; those change the lookups, so each variant's lookups are
regenerated with the synthetic generator and its bins measured again -- features always
describe the lookups the profiler will replay.

**Tasks**, as the seeds draw them: T tables drawn from a pool split, a random dim per table
from {4, 8, 16, 32, 64, 128} (or each table's own dim, ``dims=None``), G devices with a memory
cap each. Train and test tasks draw from disjoint halves of the pool (``TablePool.train`` /
``TablePool.test``), so a method trained on train tasks is judged on tables it never saw. The
same arguments always give the same task.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.data.generator import table_from_params
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.io import read_json
from shardlab.tables import Table, Task

#: Pool name -> (folder under datasets/, generator preset it was drawn from).
POOLS: dict[str, tuple[str, str]] = {
    "dlrm-synth": ("dlrm_synth", "dlrm2021"),
    "dlrm-synth-2022": ("dlrm_synth_2022", "dlrm2022"),
}


def datasets_dir() -> Path:
    """The datasets folder: ``$SHARDLAB_DATASETS`` if set, else ``<repo>/datasets``."""
    env = os.environ.get("SHARDLAB_DATASETS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "datasets"


def split_indices(n: int, seed: int) -> tuple[list[int], list[int]]:
    """The pool's train/test split: a permutation of range(n) seeded by ``seed``; the first
    n // 2 (sorted) are train, the rest (sorted) test. Returns (train, test) index lists."""
    perm = np.random.default_rng([seed, 0x5917]).permutation(n)
    half = n // 2
    return sorted(int(i) for i in perm[:half]), sorted(int(i) for i in perm[half:])


@dataclass(frozen=True, eq=False)
class TablePool:
    """A loaded pool.

    ``tables``: all tables (tuple of :class:`Table`, names t0..t{n-1}); ``stats``: per-table
    measured stats of one batch (dicts with ``n_lookups``, ``n_unique``, ``unique_counts``,
    ``access_counts`` (17 ints each), ``batch_size``); ``provenance``: how it was made;
    ``train_idx`` / ``test_idx``: the stored split (disjoint, covering all tables);
    ``batch_size``: samples per batch the stats were measured with; ``preset``: generator preset.
    Compared by identity (pools are cached per name and folder).
    """

    name: str
    preset: str
    batch_size: int
    tables: tuple[Table, ...]
    stats: tuple[Mapping[str, Any], ...] = field(repr=False)
    provenance: Mapping[str, Any] = field(repr=False)
    train_idx: tuple[int, ...] = field(repr=False)
    test_idx: tuple[int, ...] = field(repr=False)

    @property
    def train(self) -> tuple[Table, ...]:
        """The training half of the tables."""
        return tuple(self.tables[i] for i in self.train_idx)

    @property
    def test(self) -> tuple[Table, ...]:
        """The held-out half of the tables."""
        return tuple(self.tables[i] for i in self.test_idx)

    def table(self, name: str) -> Table:
        """The table called ``name`` (ShardlabError naming it if absent)."""
        for t in self.tables:
            if t.name == name:
                return t
        raise ShardlabError(f"pool '{self.name}' has no table '{name}'")

    def __len__(self) -> int:
        return len(self.tables)


def list_pools() -> list[str]:
    """Names of the known pools (whether or not their files are present)."""
    return sorted(POOLS)


def pool_path(name: str) -> Path:
    """Path of a pool's ``pool.json.gz``; one-line ShardlabError for unknown names."""
    if name not in POOLS:
        raise ShardlabError(f"unknown table pool '{name}' (known: {', '.join(list_pools())})")
    return datasets_dir() / POOLS[name][0] / "pool.json.gz"


def load_pool(name: str = "dlrm-synth") -> TablePool:
    """Load a shipped pool by name (cached); see :data:`POOLS` and :func:`list_pools`."""
    path = pool_path(name)
    return _load(name, str(path))


@lru_cache(maxsize=8)
def _load(name: str, path: str) -> TablePool:
    data = read_json(path)
    try:
        tables = tuple(Table.from_dict(t) for t in data["tables"])
        stats = tuple(data["stats"])
        train, test = tuple(data["split"]["train"]), tuple(data["split"]["test"])
        pool = TablePool(data["name"], data["preset"], int(data["batch_size"]), tables, stats,
                         data["provenance"], train, test)
    except (KeyError, TypeError) as e:
        raise ShardlabError(f"{path}: not a table pool (field {e} missing or malformed)") from None
    if len(stats) != len(tables) or sorted(train + test) != list(range(len(tables))):
        raise ShardlabError(f"{path}: stats or train/test split do not match the tables")
    return pool


@dataclass(frozen=True)
class Augmentation:
    """What to vary. ``dims``: copy each table at each of these dims (None keeps its dim).
    ``rows`` / ``pooling`` / ``distribution``: make ``variants`` random variants per table with
    rows x U_log(rows_scale), pooling x U_log(pooling_scale), alpha + U(alpha_shift)."""

    dims: tuple[int, ...] | None = tuple(sorted(C.SEED_DIMS, reverse=True))
    rows: bool = False
    pooling: bool = False
    distribution: bool = False
    variants: int = 1
    rows_scale: tuple[float, float] = (0.25, 4.0)
    pooling_scale: tuple[float, float] = (0.5, 2.0)
    alpha_shift: tuple[float, float] = (-0.15, 0.15)

    @property
    def changes_lookups(self) -> bool:
        """Whether variants need regenerated lookups."""
        return self.rows or self.pooling or self.distribution


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _variant(table: Table, aug: Augmentation, rng: np.random.Generator, k: int,
             batch_size: int) -> Table:
    d = table.distribution_params
    if table.index_seed is None or "alpha" not in d:
        raise ShardlabError(f"table '{table.name}': field 'distribution' is missing, so its rows, "
                            f"pooling or distribution cannot be augmented (only dims can)")
    params = {**d, "rows": table.rows}
    if aug.rows:
        params["rows"] = int(min(2**31 - 1, max(100, round(table.rows * _log_uniform(rng, *aug.rows_scale)))))
    if aug.pooling:
        params["pooling"] = float(d["pooling"]) * _log_uniform(rng, *aug.pooling_scale)
    if aug.distribution:
        params["alpha"] = max(0.0, float(d["alpha"]) + float(rng.uniform(*aug.alpha_shift)))
    seed = int(rng.integers(0, 2**31 - 1))
    out, _ = table_from_params(f"{table.name}~v{k}", params, table.dim, batch_size, seed,
                               source=f"augmented from {table.name} ({table.source or 'unknown'})")
    return out


def augment_tables(tables: Sequence[Table], aug: Augmentation = Augmentation(), seed: int = 0,
                   batch_size: int = C.DEFAULT_BATCH_SIZE) -> list[Table]:
    """Augmented copies of ``tables``: for each base table, its lookup variants (if any are
    switched on; else the table itself), each at every dim of ``aug.dims``. Names get ``~vK``
    (variant K) and ``@dD`` (dim D) suffixes. ``batch_size`` (samples) is the batch at which
    variants' bins are measured. Deterministic in ``seed``."""
    if aug.dims is not None and any(d % C.DIM_MULTIPLE or d <= 0 for d in aug.dims):
        raise ShardlabError(f"augmentation: field 'dims' = {list(aug.dims)} must be positive multiples of 4")
    rng = np.random.default_rng(seed)
    out: list[Table] = []
    for t in tables:
        bases = [_variant(t, aug, rng, k, batch_size) for k in range(aug.variants)] \
            if aug.changes_lookups else [t]
        for b in bases:
            if aug.dims is None:
                out.append(b)
            else:
                out.extend(b.with_dim(d, name=f"{b.name}@d{d}") for d in aug.dims)
    return out


SPLITS = ("train", "test", "all")


def pool_tables(pool: str, split: str) -> tuple[Table, ...]:
    """Tables of ``split`` ("train", "test" or "all") of the named shipped pool."""
    if split not in SPLITS:
        raise ShardlabError(f"field 'split' = {split!r} must be one of {', '.join(SPLITS)}")
    p = load_pool(pool)
    return {"train": p.train, "test": p.test, "all": p.tables}[split]


def task_from_tables(tables: Sequence[Table], ngpu: int, mem_cap_gb: float, name: str,
                     batch_size: int = C.DEFAULT_BATCH_SIZE, weights_precision: str = "fp32",
                     optimizer: str = "exact_sgd") -> Task:
    """A task over the given tables as they are (dims kept)."""
    return Task(name, ngpu, mem_cap_gb, tuple(tables), batch_size, weights_precision, optimizer)


def generate_task(pool: str = C.DEFAULT_POOL, ntables: int = 50, ngpu: int = C.DEFAULT_NGPU,
                  mem_cap_gb: float = C.DEFAULT_MEM_CAP_GB, batch_size: int = C.DEFAULT_BATCH_SIZE, seed: int = 0,
                  split: str = "test", dims: Sequence[int] | None = C.SEED_DIMS,
                  weights_precision: str = "fp32", optimizer: str = "exact_sgd",
                  max_fill: float = 0.9, name: str | None = None,
                  tables: Sequence[Table] | None = None) -> Task:
    """Draw a task of ``ntables`` distinct tables from ``pool``'s ``split`` (or from ``tables``).

    Each table gets a dim drawn uniformly from those of ``dims`` at which it fits one device
    (``mem_cap_gb``, GB); tables that fit at no dim are not drawn. A pool task of more tables
    than the split holds is drawn from the split's copies (:func:`pool_copies`: NeuroShard's
    augmentation, each copy at its own dim, its ``source`` saying so, the task's name ``-augmented``). ``dims=None`` keeps every
    table's own dim instead; a drawn table larger than one device is kept (the sharders cut it
    into row blocks), one that fits the devices not even in one row block per device is an
    :class:`InfeasibleError` naming it. Draws are repeated (up to 100 times) until all tables
    together use at most ``max_fill`` of the ``ngpu`` devices' memory, so that table-wise
    placement is possible. Deterministic in ``seed``.
    """
    source = tuple(tables) if tables is not None else pool_tables(pool, split)
    augmented = tables is None and dims is not None and ntables > len(source)
    if augmented:         # more tables than the pool holds: its copies at other dims (said so)
        probe = Task("probe", ngpu, mem_cap_gb, (source[0],), batch_size, weights_precision, optimizer)
        source, dims = pool_copies(source, pool, dims, ntables, probe), None
    if ntables < 1 or ntables > len(source):
        raise ShardlabError(f"field 'ntables' = {ntables} must be in [1, {len(source)}] "
                            f"(tables in {pool if tables is None else 'the given list'} {split})")
    if dims is not None and (not dims or any(d % C.DIM_MULTIPLE or d <= 0 for d in dims)):
        raise ShardlabError(f"field 'dims' = {list(dims)} must be positive multiples of {C.DIM_MULTIPLE}")
    origin = (f"{pool}-{split}" + ("-augmented" if augmented else "")) if tables is None else "tables"
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


def pool_copies(tables: Sequence[Table], pool: str, dims: Sequence[int], want: int, probe: Task) -> tuple[Table, ...]:
    """Copies of ``tables`` (a pool split) at each of ``dims`` that fit one device of ``probe``,
    named ``<table>@d<dim>`` with lookups unchanged (NeuroShard's augmentation); where they are
    fewer than ``want``, at every multiple of ``constants.DIM_MULTIPLE`` up to the largest of
    ``dims`` as well. Each copy's ``source`` says it is one."""
    def copies(at: Sequence[int]) -> list[Table]:
        return [replace(t.with_dim(d, name=f"{t.name}@d{d}"),
                        source=f"augmented: {pool} table {t.name} copied at dim {d} (lookups unchanged)")
                for t in tables for d in at if probe.block_bytes(t.rows, d) <= probe.mem_cap_bytes]
    out = copies(sorted(set(int(d) for d in dims)))
    if len(out) < want:
        out = copies(range(C.DIM_MULTIPLE, max(int(d) for d in dims) + 1, C.DIM_MULTIPLE))
    return tuple(out)


def _check_own_dim(probe: Task, t: Table) -> None:
    """InfeasibleError naming ``t`` if it does not fit the devices of ``probe`` at its own dim,
    even cut into one row block per device (a table larger than one device is sharded by rows)."""
    k = max(1, min(probe.ngpu, t.rows))
    need = probe.block_bytes(-(-t.rows // k), t.dim)
    if need > probe.mem_cap_bytes:
        excess = (need - probe.mem_cap_bytes) / C.GB
        what = "" if k == 1 else f" even in {k} row blocks"
        raise InfeasibleError(f"task '{probe.name}': table '{t.name}' does not fit at its own dim "
                              f"{t.dim}{what}: needs {need / C.GB:.3f} GB, {excess:.3f} GB over the "
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

