"""Loader for the public DLRM synthetic embedding-lookup dataset format (dlrm_datasets).

A file holds one batch for T tables as a torch-saved tuple ``(indices, offsets, lengths)``,
optionally gzip-compressed (``.pt.gz``):

- ``indices``: int64 [N], the row ids looked up, table after table, sample after sample;
- ``offsets``: int64 [T*B + 1], CSR offsets into ``indices``; ``offsets[t*B:(t+1)*B+1]``
  slices table t's B bags;
- ``lengths``: int [T, B], bag length of each (table, sample).

:func:`tables_from_dlrm_file` computes the 21 features (:mod:`shardlab.data.features`) for every
table: rows = max(100, max index + 1), pooling_factor = mean of ``lengths[t]``, reuse bins
from the access count of each unique index. Each such table also carries a reference to its
trace, ``distribution = {"model": "trace", "path": <absolute path>, "table_index": t}``, so the
profiler replays its real lookups (:func:`shardlab.data.lookups.table_lookups`).

Your own arrays: a ``.npz`` file with ``indices`` and ``offsets`` (and ``lengths`` [T, B] for
more than one table; without it the file is one table with B = len(offsets) - 1) loads the
same way, e.g. ``np.savez("mine.npz", indices=idx, offsets=offs)``. Or build
``check_lookups(indices, offsets, lengths)`` and write it with :func:`save_dlrm_file`; then
``tables_from_dlrm_file("mine.pt", dims=...)`` gives replayable tables.
"""

from __future__ import annotations

import gzip
import io
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from shardlab import constants as C
from shardlab.data.features import table_stats_from_lookups
from shardlab.errors import ShardlabError
from shardlab.tables import Table

#: ``distribution["model"]`` of a table whose lookups are replayed from a trace file.
TRACE_MODEL = C.TRACE_MODEL


@dataclass(frozen=True)
class DlrmLookups:
    """One batch of lookups for ``n_tables`` tables and ``batch_size`` samples (numpy arrays).

    ``indices`` int64 [N]; ``offsets`` int64 [n_tables * batch_size + 1]; ``lengths`` int64
    [n_tables, batch_size].
    """

    indices: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray

    @property
    def n_tables(self) -> int:
        """Number of tables T."""
        return int(self.lengths.shape[0])

    @property
    def batch_size(self) -> int:
        """Samples per batch B."""
        return int(self.lengths.shape[1])

    def table_lookups(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Table t's ``(indices [N_t], offsets [B+1])`` with offsets rebased to start at 0."""
        if not 0 <= t < self.n_tables:
            raise ShardlabError(f"table index {t} out of range [0, {self.n_tables})")
        b = self.batch_size
        offs = self.offsets[t * b:(t + 1) * b + 1]
        return self.indices[offs[0]:offs[-1]], offs - offs[0]


def _to_numpy(name: str, value: object, path: Path) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    raise ShardlabError(f"{path}: field '{name}' must be a tensor, got {type(value).__name__}")


def check_lookups(indices: np.ndarray, offsets: np.ndarray, lengths: np.ndarray,
                  where: str = "lookups") -> DlrmLookups:
    """Validate the (indices, offsets, lengths) layout and return it as :class:`DlrmLookups`."""
    indices = np.asarray(indices).astype(np.int64, copy=False)
    offsets = np.asarray(offsets).astype(np.int64, copy=False)
    lengths = np.asarray(lengths).astype(np.int64, copy=False)
    if lengths.ndim != 2:
        raise ShardlabError(f"{where}: field 'lengths' must be 2-D [tables, batch], got shape {lengths.shape}")
    t, b = lengths.shape
    if offsets.ndim != 1 or offsets.size != t * b + 1:
        raise ShardlabError(f"{where}: field 'offsets' must have tables*batch+1 = {t * b + 1} entries, "
                            f"got shape {offsets.shape}")
    if indices.ndim != 1 or offsets[0] != 0 or offsets[-1] != indices.size:
        raise ShardlabError(f"{where}: field 'offsets' must run from 0 to len(indices) = {indices.size}")
    if not np.array_equal(np.diff(offsets), lengths.reshape(-1)):
        raise ShardlabError(f"{where}: field 'lengths' disagrees with the differences of 'offsets'")
    if indices.size and indices.min() < 0:
        raise ShardlabError(f"{where}: field 'indices' holds negative row ids")
    return DlrmLookups(indices, offsets, lengths)


def load_dlrm_file(path: str | os.PathLike) -> DlrmLookups:
    """Load a ``.pt`` or ``.pt.gz`` file of the DLRM synthetic dataset format (module docstring)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ShardlabError(f"{path}: no such file") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds on a bad file
        raise ShardlabError(f"{path}: not a torch-saved file ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(data, (tuple, list)) or len(data) != 3:
        raise ShardlabError(f"{path}: expected a tuple (indices, offsets, lengths), got {type(data).__name__}")
    arrays = [_to_numpy(n, v, path) for n, v in zip(("indices", "offsets", "lengths"), data)]
    return check_lookups(*arrays, where=str(path))


def _load_npz(path: Path) -> DlrmLookups:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ShardlabError(f"{path}: not a readable .npz file ({str(e).splitlines()[0][:120]})") from None
    for key in ("indices", "offsets"):
        if key not in arrays:
            raise ShardlabError(f"{path}: field '{key}' is missing")
    offsets = arrays["offsets"].astype(np.int64)
    lengths = arrays.get("lengths")
    if lengths is None:
        lengths = np.diff(offsets)[None, :] if offsets.ndim == 1 else offsets
    return check_lookups(arrays["indices"], offsets, lengths, where=str(path))


def load_lookups_file(path: str | os.PathLike) -> DlrmLookups:
    """Load a lookup trace: ``.npz`` (module docstring) or the dataset's ``.pt`` / ``.pt.gz``."""
    path = Path(path)
    if path.suffix.lower() == ".npz":
        if not path.is_file():
            raise ShardlabError(f"{path}: no such file")
        return _load_npz(path)
    return load_dlrm_file(path)


@lru_cache(maxsize=8)
def _cached(path: str, mtime_ns: int, size: int) -> DlrmLookups:
    return load_lookups_file(path)


def cached_lookups(path: str | os.PathLike) -> DlrmLookups:
    """:func:`load_lookups_file`, cached (the 8 latest files; a changed file is reloaded)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        raise ShardlabError(f"{p}: no such file") from None
    return _cached(str(p.resolve()), st.st_mtime_ns, st.st_size)


def save_dlrm_file(lookups: DlrmLookups, path: str | os.PathLike) -> Path:
    """Write ``lookups`` in the same format (gzip when the name ends in ``.gz``)."""
    path = Path(path)
    buf = io.BytesIO()
    torch.save((torch.from_numpy(lookups.indices), torch.from_numpy(lookups.offsets),
                torch.from_numpy(lookups.lengths)), buf)
    data = buf.getvalue()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def tables_from_lookups(lookups: DlrmLookups, dims: int | Sequence[int] = 64,
                        name_prefix: str = "t", source: str | None = None,
                        table_ids: Sequence[int] | None = None,
                        trace_path: str | os.PathLike | None = None) -> list[Table]:
    """Tables with features computed from ``lookups`` (:mod:`shardlab.data.features`).

    ``dims``: one dim for all tables or one per selected table (the dataset has none);
    ``table_ids``: which tables (default all), named ``f"{name_prefix}{t}"``. ``trace_path``:
    the file ``lookups`` were loaded from; each table then refers to it (module docstring) and
    its real lookups are replayed when measured. Without it the tables carry features only
    and cannot be replayed later: save the lookups first (:func:`save_dlrm_file`) and load
    them with :func:`tables_from_dlrm_file`.
    """
    ids = list(range(lookups.n_tables)) if table_ids is None else list(table_ids)
    dim_list = [dims] * len(ids) if isinstance(dims, int) else list(dims)
    if len(dim_list) != len(ids):
        raise ShardlabError(f"dims: {len(dim_list)} values for {len(ids)} tables")
    where = None if trace_path is None else str(Path(trace_path).resolve())
    out = []
    for t, dim in zip(ids, dim_list):
        indices, _ = lookups.table_lookups(t)
        stats = table_stats_from_lookups(indices, lookups.lengths[t])
        dist = {} if where is None else {"model": TRACE_MODEL, "path": where, "table_index": t}
        out.append(Table(f"{name_prefix}{t}", stats["rows"], dim, stats["pooling_factor"],
                         tuple(float(x) for x in stats["reuse_bins"]), source=source,
                         distribution=dist))
    return out


def tables_from_dlrm_file(path: str | os.PathLike, dims: int | Sequence[int] = 64,
                          name_prefix: str = "t", table_ids: Sequence[int] | None = None) -> list[Table]:
    """Load a trace file (``.pt``, ``.pt.gz`` or ``.npz``) and compute every (or the selected)
    table's features; the tables replay the file's lookups when measured."""
    path = Path(path)
    return tables_from_lookups(cached_lookups(path), dims, name_prefix,
                               source=f"dlrm-dataset:{path.name}", table_ids=table_ids,
                               trace_path=path)
