"""What a training step can see, as table keys: the held-out family tests check their tables
against it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from shardlab.data.tasks import list_pools, load_pool

ROOT = Path(__file__).resolve().parents[1]


def key(rows: Any, dim: Any, pooling: Any) -> tuple[int, int, float]:
    """A table's (rows, dim, pooling factor) key; dim 0 for the any-dim key."""
    return int(rows), int(dim), round(float(pooling), 4)


def keys(tables: Iterable[Mapping[str, Any]]) -> tuple[set, set]:
    """(rows, dim, pooling) keys and (rows, pooling) any-dim keys of table dicts."""
    tables = list(tables)
    return ({key(t["rows"], t["dim"], t["pooling_factor"]) for t in tables},
            {key(t["rows"], 0, t["pooling_factor"]) for t in tables})


def training_tables() -> list[dict[str, Any]]:
    """Every table a training step can see, as dicts: the shipped pools (all splits) and the
    tables of the measured CPU samples (``datasets/cpu/compute.jsonl.gz``)."""
    out = [{"rows": t.rows, "dim": t.dim, "pooling_factor": t.pooling_factor}
           for pool in list_pools() for t in load_pool(pool).tables]
    with gzip.open(ROOT / "datasets" / "cpu" / "compute.jsonl.gz", "rt") as f:
        out += [t for line in f for t in json.loads(line)["tables"]]
    return out
