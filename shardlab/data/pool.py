"""Shipped table pools: synthetic DLRM-like tables with their measured per-table stats.

A pool lives in ``datasets/<dir>/pool.json.gz`` (built by ``scripts/build_pool.py``, see the
PROVENANCE.md beside it). ``datasets/`` is found next to the package
(``Path(__file__).resolve().parents[2] / "datasets"``) unless the environment variable
``SHARDLAB_DATASETS`` names another folder. Loads are cached per (name, folder).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from shardlab.errors import ShardlabError
from shardlab.io import read_json
from shardlab.tables import Table

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
