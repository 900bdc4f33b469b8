"""Broad compute campaign: NeuroShard's pre-training data taken to the space real models live
in, measured with the same fused fbgemm ops as :mod:`shardlab.measure.campaign`.

Sample i draws (from ``seed`` and i alone) 1..max_tables synthetic tables from
:class:`BroadSpace` -- rows log-uniform in [10^2, 10^8] (capped so one table's weights and
optimizer state fit ``max_table_gb``; the cap is recorded), pooling log-uniform in [1, 100] with
a share of one-hot and of fixed-length multi-hot features, dims 4..256, access laws from
near-uniform (Zipf alpha 0) to heavy skew (alpha 1.4) -- and, in a share of samples, replaces
some tables by one **column slice** (the table at dim/k, k in 2, 4, 8, same lookups), the
sub-tables column-wise sharding puts on a device, so a model learns what a split costs. With
``row_share`` (default 0, so earlier seeds draw what they always drew) a share of
samples also replaces some tables by one **row block** (rows/k of them, k in 2, 4, 8, with
the lookups that fall in them: :func:`shardlab.data.lookups.row_block_table`), what row-wise
sharding puts on a device; that choice has its own random stream.
Keys ``compute:<profile>:broad:train:s<seed>:<i>``; kind ``compute``; a rerun resumes.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from shardlab import constants as C
from shardlab.data.generator import table_from_params
from shardlab.data.lookups import row_block_table
from shardlab.errors import ShardlabError
from shardlab.measure.campaign import run_jobs, take_within
from shardlab.measure.hardware import HardwareProfile, environment, get_profile, measurable_profile
from shardlab.measure.store import SampleStore
from shardlab.tables import Table, block_bytes

POOL = "broad"


@dataclass(frozen=True)
class BroadSpace:
    """The table space of the broad campaign (ranges inclusive)."""

    rows: tuple[float, float] = (1e2, 1e8)
    """Rows, log-uniform (rows); capped per table by ``max_table_gb``."""
    pooling: tuple[float, float] = (1.0, 100.0)
    """Mean bag length of the multi-hot features, log-uniform (lookups per sample)."""
    one_hot: float = 0.2
    """Share of one-hot features (every bag exactly one lookup)."""
    fixed_multi_hot: float = 0.1
    """Share of fixed-length multi-hot features (every bag exactly round(pooling) long)."""
    dims: tuple[int, ...] = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    """Embedding dims drawn uniformly (columns)."""
    alpha: tuple[float, float] = (0.0, 1.4)
    """Zipf exponent of the access law, uniform: 0 near-uniform, 1.4 heavy skew."""
    bag_k: tuple[float, float] = (0.5, 50.0)
    """Negative-binomial dispersion of variable bags, log-uniform (small: bursty lengths)."""
    max_table_gb: float = 1.0
    """Cap on one table's weights + optimizer state (GB): rows above it are reduced to fit."""
    split_share: float = 0.3
    """Share of samples in which 1..3 tables are replaced by one of their column slices."""
    split_ways: tuple[int, ...] = (2, 4, 8)
    """Column splits k: a slice has dim/k columns (a multiple of 4) and the table's lookups."""
    row_share: float = 0.0
    """Share of samples in which 1..3 tables are replaced by one of their row blocks."""
    row_ways: tuple[int, ...] = (2, 4, 8)
    """Row splits k: a block has about rows/k rows and the lookups that fall in them."""

    def __post_init__(self) -> None:
        if not 0 < self.rows[0] <= self.rows[1] or not 0 < self.pooling[0] <= self.pooling[1]:
            raise ShardlabError("BroadSpace: fields 'rows' and 'pooling' must be positive (low, high) ranges")
        for name in ("one_hot", "fixed_multi_hot", "split_share", "row_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ShardlabError(f"BroadSpace: field '{name}' must be a share in [0, 1]")
        if any(d <= 0 or d % C.DIM_MULTIPLE for d in self.dims):
            raise ShardlabError(f"BroadSpace: field 'dims' must be positive multiples of {C.DIM_MULTIPLE}")


def space_from_json(text: str, **overrides: Any) -> BroadSpace:
    """A :class:`BroadSpace` from a JSON object of some of its fields (``'{"pooling": [1, 200]}'``),
    the rest at their defaults; ``overrides`` (fields) win over the JSON. One-line errors name the
    bad field."""
    try:
        given = json.loads(text) if text else {}
    except json.JSONDecodeError as e:
        raise ShardlabError(f"BroadSpace: option '--space' is not a JSON object ({e.msg})") from None
    if not isinstance(given, dict):
        raise ShardlabError("BroadSpace: option '--space' must be a JSON object of BroadSpace fields")
    given.update(overrides)
    fields = set(BroadSpace.__dataclass_fields__)
    for name, value in given.items():
        if name not in fields:
            raise ShardlabError(f"BroadSpace: no field '{name}' (fields: {', '.join(sorted(fields))})")
        default = getattr(BroadSpace(), name)
        if isinstance(default, tuple):
            if not isinstance(value, list) or not value or not all(isinstance(v, (int, float)) for v in value):
                raise ShardlabError(f"BroadSpace: field '{name}' must be a list of numbers, got {value!r}")
            given[name] = tuple(int(v) if isinstance(default[0], int) else float(v) for v in value)
        elif not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ShardlabError(f"BroadSpace: field '{name}' must be a number, got {value!r}")
        else:
            given[name] = float(value)
    for name in ("rows", "pooling", "alpha", "bag_k"):
        if name in given and len(given[name]) != 2:
            raise ShardlabError(f"BroadSpace: field '{name}' must be a [low, high] pair, got {list(given[name])}")
    return BroadSpace(**given)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def broad_table(rng: np.random.Generator, name: str, space: BroadSpace, batch_size: int,
                precision: str = "fp32", optimizer: str = "exact_sgd") -> Table:
    """One synthetic table drawn from ``space``; its lookups are generated and its reuse bins
    measured at ``batch_size`` (so features describe what the profiler replays)."""
    dim = int(space.dims[int(rng.integers(len(space.dims)))])
    per_row = block_bytes(1, dim, precision, optimizer)
    cap_rows = max(1, int(space.max_table_gb * C.GB // max(per_row, 1)))
    drawn = _log_uniform(rng, *space.rows)
    rows = int(min(drawn, cap_rows, 2**31 - 1))
    kind = rng.uniform()
    fixed = kind < space.one_hot + space.fixed_multi_hot
    pooling = 1.0 if kind < space.one_hot else _log_uniform(rng, *space.pooling)
    if fixed:
        pooling = float(max(1, round(pooling)))
    params = {"rows": max(rows, 1), "alpha": float(rng.uniform(*space.alpha)), "pooling": pooling,
              "bag_k": _log_uniform(rng, *space.bag_k), "fixed": fixed}
    capped = f", rows capped {int(drawn)} -> {rows} (max_table_gb {space.max_table_gb:g})" if drawn > rows else ""
    table, _ = table_from_params(name, params, dim, batch_size, int(rng.integers(2**31 - 1)),
                                 source=f"synthetic:broad ({'one-hot' if kind < space.one_hot else 'fixed multi-hot' if fixed else 'multi-hot'}{capped})")
    return table


def column_slice(table: Table, ways: int) -> Table | None:
    """One column slice of ``table`` split ``ways`` ways (dim/ways columns, same lookups), or
    None when dim/ways is not a positive multiple of 4."""
    if table.dim % ways or (table.dim // ways) % C.DIM_MULTIPLE:
        return None
    return table.with_dim(table.dim // ways, name=f"{table.name}{C.COLUMN_SLICE_MARK}1/{ways}]")


def broad_sample_tables(index: int, seed: int, space: BroadSpace, batch_size: int, max_tables: int,
                        mem_bytes: int, precision: str, optimizer: str) -> list[Table]:
    """The tables of broad sample ``index`` (module docstring), whose memory fits ``mem_bytes``.
    Deterministic in (seed, index, space, batch_size)."""
    rng = np.random.default_rng([seed, index, 0xB40AD])
    want = int(rng.integers(1, max_tables + 1))
    split = rng.uniform() < space.split_share
    drawn = (broad_table(rng, f"broad-s{seed}-{index}-{j}", space, batch_size, precision, optimizer)
             for j in range(4 * want))
    chosen = take_within(drawn, want, mem_bytes, precision, optimizer)
    if split and chosen:
        for i in rng.permutation(len(chosen))[: int(rng.integers(1, min(3, len(chosen)) + 1))]:
            part = column_slice(chosen[int(i)], int(space.split_ways[int(rng.integers(len(space.split_ways)))]))
            if part is not None:
                chosen[int(i)] = part
    rows_rng = np.random.default_rng([seed, index, 0x2085])     # its own stream: row_share 0 changes nothing
    if chosen and rows_rng.uniform() < space.row_share:
        for i in rows_rng.permutation(len(chosen))[: int(rows_rng.integers(1, min(3, len(chosen)) + 1))]:
            t = chosen[int(i)]
            k = int(space.row_ways[int(rows_rng.integers(len(space.row_ways)))])
            if t.rows >= 2 * k and C.COLUMN_SLICE_MARK not in t.name:
                j = int(rows_rng.integers(k))
                start, stop = j * t.rows // k, (j + 1) * t.rows // k
                chosen[int(i)] = row_block_table(t, start, stop - start, batch_size)
    return chosen


def run_broad_campaign(store_path: str, n_samples: int, profile: str | HardwareProfile = C.MEASURE_PROFILE,
                       space: BroadSpace = BroadSpace(), max_tables: int = 10, mem_cap_gb: float = 3.0,
                       workers: int = 1, seed: int = 0, progress: bool = True,
                       on_sample: Callable[[str, dict[str, Any]], None] | None = None,
                       deadline: float | None = None) -> int:
    """Measure broad samples 0..n_samples-1 not yet in the store (kind ``compute``); returns how
    many were added. ``mem_cap_gb``: one op's tables at most (GB); ``workers`` and ``deadline``:
    see :func:`~shardlab.measure.campaign.run_jobs`."""
    prof = measurable_profile(profile)
    if n_samples < 0 or workers < 1 or max_tables < 1:
        raise ShardlabError("broad campaign: fields 'n_samples' >= 0, 'workers' >= 1, 'max_tables' >= 1 required")
    mem = int(mem_cap_gb * C.GB)
    provenance = {**environment(prof.device), "profile": prof.to_dict(), "pool": POOL, "split": "train",
                  "campaign": {"kind": "compute", "space": POOL, "seed": seed, "max_tables": max_tables,
                               "mem_cap_gb": mem_cap_gb, **{f"space_{k}": v for k, v in asdict(space).items()}}}
    prefix = f"compute:{prof.name}:{POOL}:train:s{seed}:"
    with SampleStore(store_path) as store:
        done = store.keys("compute")
        todo = [i for i in range(n_samples) if f"{prefix}{i}" not in done]

        def jobs():    # drawn as they are taken: a sample's row blocks cost ~0.4 s to draw at batch 65536
            for i in todo:
                if deadline is not None and time.monotonic() > deadline:
                    return
                tables = broad_sample_tables(i, seed, space, prof.batch_size, max_tables, mem,
                                             prof.weights_precision, prof.optimizer)
                yield f"{prefix}{i}", [t.to_dict() for t in tables], prof.to_dict()

        return run_jobs(store, "compute", jobs(), provenance, workers, f"broad compute samples ({prof.name})",
                        progress, on_sample, deadline, total=len(todo))
