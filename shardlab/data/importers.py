"""Importers of real model configs: JSON/CSV table lists and TorchRec ``EmbeddingBagConfig``s.

Real configs give rows, dim and pooling factor but rarely lookups, so rarely reuse bins.
A record without ``reuse_bins`` needs an explicit assumption: ``assume_zipf=ALPHA`` draws one
batch of Zipf(ALPHA) lookups per table with the synthetic generator and measures its bins;
the table's ``source`` then says the bins are assumed, and its ``distribution`` lets the
profiler regenerate the same lookups. Nothing is filled in silently.
"""

from __future__ import annotations

import csv
import math
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from shardlab import constants as C
from shardlab.data.generator import table_from_params
from shardlab.errors import ShardlabError
from shardlab.io import read_json
from shardlab.tables import Table

#: Dispersion of bag lengths for imported tables (negative binomial; large = near Poisson).
IMPORT_BAG_K = 1000.0


def _with_assumed_bins(name: str, rows: int, dim: int, pooling: float, batch_size: int,
                       alpha: float, seed: int, origin: str, fixed: bool = False) -> Table:
    index_seed = zlib.crc32(f"{seed}:{name}".encode())
    params = {"rows": rows, "alpha": alpha, "pooling": pooling, "bag_k": IMPORT_BAG_K, "fixed": fixed}
    generated, _ = table_from_params(name, params, dim, batch_size, index_seed)
    bags = f"every bag exactly {round(pooling)} long" if fixed else "bag lengths near-Poisson"
    source = (f"{origin}; reuse bins measured on assumed Zipf({alpha:g}) lookups ({bags}), batch "
              f"{batch_size}")
    if "no lookup in the measured batch" in (generated.source or ""):
        source += "; no lookup in that batch: every row it touches is touched once (bin 0)"
    return Table(name, rows, dim, pooling, generated.reuse_bins, source, index_seed,
                 generated.distribution)


#: The fields a table record may have (``name``, ``rows`` and ``dim`` required).
RECORD_FIELDS = ("name", "rows", "dim", "pooling_factor", "reuse_bins", "fixed_bags", "source")

#: The columns a table CSV may have (``name``, ``rows`` and ``dim`` required; all 17 bins or none).
CSV_BIN_COLUMNS = tuple(f"reuse_bin_{i}" for i in range(C.N_REUSE_BINS))
CSV_COLUMNS = ("name", "rows", "dim", "pooling_factor") + CSV_BIN_COLUMNS
_CSV_SAID = "columns: name, rows, dim, pooling_factor, reuse_bin_0 .. reuse_bin_16"


def tables_from_records(records: Iterable[Mapping[str, Any]], batch_size: int = C.DEFAULT_BATCH_SIZE,
                        assume_zipf: float | None = None, seed: int = 0,
                        origin: str = "imported") -> list[Table]:
    """Tables from dicts with ``name``, ``rows``, ``dim``, ``pooling_factor`` and optionally
    ``reuse_bins`` (17 fractions), ``source`` and ``fixed_bags`` (true: every bag exactly
    ``pooling_factor`` long -- one-hot or fixed multi-hot features; default near-Poisson lengths). Without bins, ``assume_zipf`` is required
    (module docstring); ``batch_size`` (samples) is the batch the bins are measured at."""
    out: list[Table | None] = []
    todo: list[tuple] = []
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise ShardlabError(f"table {i}: must be a JSON object with {', '.join(RECORD_FIELDS[:4])}, "
                                f"got {type(rec).__name__}")
        name = str(rec.get("name") or f"table{i}")
        unknown = sorted(set(rec) - set(RECORD_FIELDS))
        if unknown:
            raise ShardlabError(f"table '{name}': field '{unknown[0]}' is not a table field "
                                f"(known: {', '.join(RECORD_FIELDS)})")
        for key in ("rows", "dim"):
            if key not in rec:
                raise ShardlabError(f"table '{name}': field '{key}' is missing")
        pooling = rec.get("pooling_factor", 1.0)
        bins = rec.get("reuse_bins")
        if bins is not None:
            out.append(Table(name, rec["rows"], rec["dim"], pooling, bins, rec.get("source", origin)))
            continue
        if assume_zipf is not None and not (math.isfinite(assume_zipf) and assume_zipf > 0):
            raise ShardlabError(f"field 'assume_zipf' = {assume_zipf!r} must be a finite Zipf exponent > 0")
        if assume_zipf is None:
            raise ShardlabError(f"table '{name}': field 'reuse_bins' is missing (give them, or pass "
                                f"assume_zipf=ALPHA / --assume-zipf ALPHA to measure them on assumed "
                                f"Zipf lookups)")
        probe = Table(name, rec["rows"], rec["dim"], pooling, (1.0,) + (0.0,) * (C.N_REUSE_BINS - 1))
        out.append(None)
        todo.append((name, probe.rows, probe.dim, probe.pooling_factor, batch_size, assume_zipf, seed,
                     rec.get("source", origin), bool(rec.get("fixed_bags"))))
    # one generated batch per table, tables in parallel threads (numpy releases the GIL; each
    # table has its own seeded generator, so the result does not depend on the threads)
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1, len(todo)))) as pool:
        made = iter(list(pool.map(lambda args: _with_assumed_bins(*args), todo)))
    return [t if t is not None else next(made) for t in out]


def _csv_records(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        cols = reader.fieldnames or []
        bin_cols = CSV_BIN_COLUMNS
        for need in ("name", "rows", "dim"):
            if need not in cols:
                raise ShardlabError(f"{path}: column '{need}' is missing ({_CSV_SAID})")
        odd = [c for c in cols if c not in CSV_COLUMNS]
        if odd:
            raise ShardlabError(f"{path}: column '{odd[0]}' is not a table column ({_CSV_SAID})")
        if any(c in cols for c in bin_cols) and not all(c in cols for c in bin_cols):
            missing = next(c for c in bin_cols if c not in cols)
            raise ShardlabError(f"{path}: column '{missing}' is missing (give all 17 reuse_bin columns or none)")
        records = []
        for line, row in enumerate(reader, start=2):
            def num(key: str, cast: type = float) -> Any:
                try:
                    return cast(row[key])
                except (TypeError, ValueError):
                    raise ShardlabError(f"{path}:{line}: table '{row.get('name')}': field '{key}' = "
                                        f"{row.get(key)!r} is not a number") from None
            rec: dict[str, Any] = {"name": row.get("name"), "rows": num("rows", int), "dim": num("dim", int)}
            if "pooling_factor" in cols:
                rec["pooling_factor"] = num("pooling_factor")
            if all(c in cols for c in bin_cols):
                rec["reuse_bins"] = [num(c) for c in bin_cols]
            records.append(rec)
    return records


def load_table_list(path: str | os.PathLike, batch_size: int = C.DEFAULT_BATCH_SIZE,
                    assume_zipf: float | None = None, seed: int = 0) -> list[Table]:
    """Tables from a ``.json`` file (a list of table objects, or ``{"tables": [...]}`` like
    ``datasets/criteo/*.json``) or a ``.csv`` file (columns name, rows, dim, pooling_factor and
    optionally reuse_bin_0 .. reuse_bin_16)."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        if not path.exists():
            raise ShardlabError(f"{path}: no such file")
        records = _csv_records(path)
    else:
        data = read_json(path)
        records = data.get("tables") if isinstance(data, dict) else data
        if not isinstance(records, list):
            raise ShardlabError(f"{path}: expected a list of tables or an object with 'tables'")
    return tables_from_records(records, batch_size, assume_zipf, seed, origin=f"imported:{path.name}")


def tables_from_torchrec_configs(configs: Sequence[Any], pooling_factors: Mapping[str, float] | None = None,
                                 batch_size: int = C.DEFAULT_BATCH_SIZE, assume_zipf: float | None = None,
                                 seed: int = 0) -> list[Table]:
    """Tables from TorchRec ``EmbeddingBagConfig`` objects (``name``, ``num_embeddings``,
    ``embedding_dim``). ``pooling_factors`` maps table name -> mean lookups per sample (default
    1.0, TorchRec's planner default). Bins need ``assume_zipf`` (module docstring)."""
    pooling_factors = dict(pooling_factors or {})
    records = [{"name": c.name, "rows": int(c.num_embeddings), "dim": int(c.embedding_dim),
                "pooling_factor": float(pooling_factors.get(c.name, 1.0))} for c in configs]
    unknown = set(pooling_factors) - {r["name"] for r in records}
    if unknown:
        raise ShardlabError(f"pooling_factors: table '{sorted(unknown)[0]}' is not among the configs")
    return tables_from_records(records, batch_size, assume_zipf, seed, origin="imported:torchrec")
