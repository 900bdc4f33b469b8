"""Statistics of the shipped table pools against the published DLRM locality statistics.

Pure functions returning plain numbers, numpy arrays and lists of dicts, for the
data-exploration notebook (``notebooks/explore_data.ipynb``) and its figures
(:mod:`shardlab.report.data_figures`). Units: memory in GB (2**30 bytes, ``constants.GB``),
rows and lookups as counts, histograms as fractions over the 17 reuse bins
(``constants.N_REUSE_BINS``; bin i holds access counts in (2**(i-1), 2**i], bin 0 exactly 1).

The published numbers are read from ``datasets/published/dlrm_locality_stats.json``: the per-file
locality statistics published with Meta's synthetic lookup traces (a ``files`` list, one entry
per published file; its ``PROVENANCE.md`` says where each came from).
``$SHARDLAB_PUBLISHED_STATS`` may name another file of the same shape. Where the file is absent,
:func:`published_reference` falls back to the copies of the target numbers kept in the generator
presets (:func:`shardlab.data.presets.published_target`, checked against the file by the tests)
and says so in its ``source`` field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.data.generator import aggregate_histograms
from shardlab.data.presets import compare_histograms, get_preset, l1_distance, published_target
from shardlab.data.tasks import POOLS, SPLITS, TablePool, datasets_dir, list_pools, load_pool
from shardlab.errors import ShardlabError, field_error
from shardlab.io import read_json

#: Environment variable naming the published statistics file (module docstring).
PUBLISHED_STATS_ENV = "SHARDLAB_PUBLISHED_STATS"
#: Labels of the 17 reuse bins (access counts per row in one batch).
BIN_LABELS = tuple(["1", "2"] + [f"{2**(i - 1) + 1}-{2**i}" for i in range(2, C.N_REUSE_BINS - 1)]
                   + [f">{2**(C.N_REUSE_BINS - 2)}"])
#: The shipped Criteo table lists (datasets/criteo/<name>.json).
CRITEO_DATASETS = ("criteo_kaggle_dac", "criteo_1tb")
#: Units of the per-table features of :func:`table_features`.
FEATURE_UNITS = {"rows": "rows", "dim": "columns", "pooling_factor": "lookups per sample",
                 "size_gb": "GB (fp32 weights)", "n_lookups": "lookups per batch",
                 "reuse": "lookups per distinct row touched", "touched_frac": "fraction of rows"}


# ----------------------------------------------------------------------------- published
def published_stats_path() -> Path:
    """The published statistics file: ``$SHARDLAB_PUBLISHED_STATS`` where set, else the shipped
    ``datasets/published/dlrm_locality_stats.json``."""
    env = os.environ.get(PUBLISHED_STATS_ENV)
    return Path(env) if env else datasets_dir() / "published" / "dlrm_locality_stats.json"


def load_published_files(path: str | Path | None = None) -> list[dict[str, Any]] | None:
    """Per-file entries of the published stats JSON (default :func:`published_stats_path`), each
    a dict with at least ``file``, ``year``, ``batch_size`` (samples), ``num_tables``,
    ``avg_pooling_factor`` (lookups per table per sample), ``unique_fraction`` (distinct rows /
    lookups) and the two 17-fraction lists ``hist_accesses_by_reuse_factor`` and
    ``hist_unique_rows_by_reuse_factor``. None when the file does not exist; a one-line
    ShardlabError when it exists but lacks these fields."""
    path = Path(path) if path is not None else published_stats_path()
    if path is None or not path.exists():
        return None
    data = read_json(path)
    files = data.get("files") if isinstance(data, Mapping) else None
    if not isinstance(files, list) or not files:
        raise ShardlabError(f"{path}: field 'files' is missing or empty")
    need = ("file", "year", "batch_size", "num_tables", "avg_pooling_factor", "unique_fraction",
            "hist_accesses_by_reuse_factor", "hist_unique_rows_by_reuse_factor")
    for f in files:
        for key in need:
            if key not in f:
                raise ShardlabError(f"{path}: file entry '{f.get('file', '?')}': field '{key}' "
                                    "is missing")
    return files


def _entry(f: Mapping[str, Any]) -> dict[str, Any]:
    return {"file": f["file"], "access_hist": [float(x) for x in f["hist_accesses_by_reuse_factor"]],
            "unique_hist": [float(x) for x in f["hist_unique_rows_by_reuse_factor"]],
            "avg_pooling": float(f["avg_pooling_factor"]),
            "unique_fraction": float(f["unique_fraction"])}


def published_reference(pool: str, path: str | Path | None = None) -> dict[str, Any]:
    """The published numbers the pool ``pool`` was calibrated to.

    Keys: ``access_hist`` and ``unique_hist`` (lists of 17 fractions: lookups / distinct rows
    per reuse bin), ``unique_fraction`` (distinct (table, row) pairs / lookups),
    ``avg_pooling`` (lookups per table per sample), ``n_tables``, ``batch_size`` (samples),
    ``year``, ``files`` (the target file names; numbers are their mean), ``source`` (the JSON
    file read, or the presets' copy when it is absent) and ``others``: one dict per published
    file of the same year (``file``, ``access_hist``, ``unique_hist``, ``avg_pooling``,
    ``unique_fraction``) except a single target file itself (a mean's files are kept); empty
    without the JSON file.
    """
    preset = get_preset(POOLS[check_pool_name(pool)][1])
    path = Path(path) if path is not None else published_stats_path()
    files = load_published_files(path)
    if files is None:
        t = published_target(preset)
        return {**{k: t[k] for k in ("access_hist", "unique_hist", "unique_fraction",
                                     "avg_pooling", "n_tables", "batch_size", "files")},
                "year": preset.target_year, "others": [],
                "source": f"copied in shardlab/data/presets.py ({t['source']}); "
                          f"{path or '$' + PUBLISHED_STATS_ENV} not found"}
    by_name = {f["file"]: f for f in files}
    missing = [n for n in preset.target_files if n not in by_name]
    if missing:
        raise ShardlabError(f"published stats: file entry '{missing[0]}' (target of preset "
                            f"'{preset.name}') is missing")
    src = [_entry(by_name[n]) for n in preset.target_files]
    mean = {k: np.mean([e[k] for e in src], axis=0) for k in ("access_hist", "unique_hist",
                                                             "avg_pooling", "unique_fraction")}
    first = by_name[preset.target_files[0]]
    return {"access_hist": mean["access_hist"].tolist(), "unique_hist": mean["unique_hist"].tolist(),
            "unique_fraction": float(mean["unique_fraction"]),
            "avg_pooling": float(mean["avg_pooling"]), "n_tables": int(first["num_tables"]),
            "batch_size": int(first["batch_size"]), "year": int(first["year"]),
            "files": list(preset.target_files),
            "source": str(path),
            "others": [_entry(f) for f in files if f["year"] == first["year"]
                       and not (len(src) == 1 and f["file"] == first["file"])]}


# ----------------------------------------------------------------------------- selection
def check_pool_name(pool: Any) -> str:
    """``pool`` if it names a shipped pool, else a one-line ShardlabError naming field 'pool'."""
    if not isinstance(pool, str) or pool not in POOLS:
        raise field_error("data", "pool", pool, f"must be one of {', '.join(list_pools())}")
    return pool


def select_tables(pool: TablePool, split: str = "all", max_tables: int = 0, seed: int = 0
                  ) -> tuple[int, ...]:
    """Indices (sorted, into ``pool.tables``) of the tables of ``split`` ("train", "test" or
    "all"); with ``max_tables`` > 0, a uniform random subset of at most that many, drawn with
    ``seed`` (same seed, same subset). One-line ShardlabError naming the bad field."""
    if split not in SPLITS:
        raise field_error("data", "split", split, f"must be one of {', '.join(SPLITS)}")
    if isinstance(max_tables, bool) or not isinstance(max_tables, int) or max_tables < 0:
        raise field_error("data", "max_tables", max_tables, "must be an integer >= 0 (0 = all)")
    idx = {"train": pool.train_idx, "test": pool.test_idx,
           "all": tuple(range(len(pool.tables)))}[split]
    if 0 < max_tables < len(idx):
        pick = np.random.default_rng([seed, 0xE7A1]).choice(len(idx), max_tables, replace=False)
        idx = tuple(idx[int(i)] for i in pick)
    return tuple(sorted(int(i) for i in idx))


def load_selection(pool: str, split: str = "all", max_tables: int = 0, seed: int = 0
                   ) -> tuple[TablePool, tuple[int, ...]]:
    """The loaded pool called ``pool`` and :func:`select_tables` of it (errors name the field)."""
    p = load_pool(check_pool_name(pool))
    return p, select_tables(p, split, max_tables, seed)


# ----------------------------------------------------------------------------- histograms
def pool_aggregate(pool: TablePool, indices: Sequence[int]) -> dict[str, Any]:
    """Dataset-level numbers of the selected tables, defined as the published ones
    (:func:`shardlab.data.generator.aggregate_histograms`): ``access_hist``, ``unique_hist``
    (17 fractions each), ``unique_fraction``, ``avg_pooling`` (lookups per table per sample),
    ``n_lookups``, ``n_unique`` (counts in one batch of ``pool.batch_size``), ``n_tables``."""
    if not indices:
        raise ShardlabError("data: field 'indices' is empty (no tables selected)")
    return aggregate_histograms([pool.stats[i] for i in indices])


def uniform_l1(ref: Mapping[str, Any]) -> dict[str, float]:
    """A yardstick: L1 of the flat histogram (1/17 per bin) against the reference's
    ``access_hist`` and ``unique_hist``; keys ``l1_access``, ``l1_unique``."""
    flat = np.full(C.N_REUSE_BINS, 1.0 / C.N_REUSE_BINS)
    return {"l1_access": l1_distance(flat, ref["access_hist"]),
            "l1_unique": l1_distance(flat, ref["unique_hist"])}


def comparison_rows(agg: Mapping[str, Any], ref: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows for a table of distances to the published reference: the pool selection, the flat
    histogram (a yardstick) and, where the JSON file was read, the other published files of the
    same year (min and max). Keys: ``against_published``, ``l1_access``, ``l1_unique`` (0..2),
    ``avg_pooling`` (lookups per table per sample), ``unique_fraction`` (None where undefined)."""
    cmp, flat = compare_histograms(agg, ref), uniform_l1(ref)
    rows = [{"against_published": f"pool selection ({agg['n_tables']} tables)",
             "l1_access": round(cmp["l1_access"], 4), "l1_unique": round(cmp["l1_unique"], 4),
             "avg_pooling": round(float(agg["avg_pooling"]), 4),
             "unique_fraction": round(float(agg["unique_fraction"]), 5)},
            {"against_published": "flat histogram (1/17 per bin)",
             "l1_access": round(flat["l1_access"], 4), "l1_unique": round(flat["l1_unique"], 4),
             "avg_pooling": None, "unique_fraction": None}]
    for label, pick in (("min", min), ("max", max)):
        if ref["others"]:
            o = pick(ref["others"], key=lambda e: l1_distance(e["access_hist"], ref["access_hist"]))
            rows.append({"against_published": f"published file {o['file']} ({label} L1)",
                         "l1_access": round(l1_distance(o["access_hist"], ref["access_hist"]), 4),
                         "l1_unique": round(l1_distance(o["unique_hist"], ref["unique_hist"]), 4),
                         "avg_pooling": o["avg_pooling"], "unique_fraction": o["unique_fraction"]})
    rows.append({"against_published": "published reference", "l1_access": 0.0, "l1_unique": 0.0,
                 "avg_pooling": round(float(ref["avg_pooling"]), 4),
                 "unique_fraction": round(float(ref["unique_fraction"]), 5)})
    return rows


def bin_differences(agg: Mapping[str, Any], ref: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Signed per-bin differences aggregate - reference (fractions), shape [17] each, under
    ``access`` and ``unique``; positive where the pool has too much mass."""
    return {k: np.asarray(agg[f"{k}_hist"], dtype=np.float64)
            - np.asarray(ref[f"{k}_hist"], dtype=np.float64) for k in ("access", "unique")}


def others_l1(ref: Mapping[str, Any]) -> np.ndarray:
    """L1 of the accesses histogram of each other published file of the same year
    (``ref["others"]``) against the reference, shape [k]: how much the published files differ
    among themselves (for a mean of files: each file against the mean)."""
    return np.array([l1_distance(o["access_hist"], ref["access_hist"]) for o in ref["others"]],
                    dtype=np.float64)


def per_table_histograms(pool: TablePool, indices: Sequence[int]) -> dict[str, np.ndarray]:
    """Each selected table's reuse histograms from its stored counts: ``access`` and ``unique``,
    shape [n, 17] (fractions; a row of zeros for a table without lookups)."""
    out = {}
    for k, key, total in (("access", "access_counts", "n_lookups"),
                          ("unique", "unique_counts", "n_unique")):
        counts = np.array([pool.stats[i][key] for i in indices], dtype=np.float64).reshape(
            len(indices), C.N_REUSE_BINS)
        n = np.array([pool.stats[i][total] for i in indices], dtype=np.float64)
        out[k] = counts / np.maximum(n, 1.0)[:, None]
    return out


def per_table_l1(pool: TablePool, indices: Sequence[int], ref: Mapping[str, Any],
                 kind: str = "access") -> np.ndarray:
    """L1 of each selected table's ``kind`` ("access" or "unique") histogram against the
    published aggregate, shape [n]; NaN for tables without lookups. Single tables are not meant
    to match the aggregate: this shows how varied the tables are."""
    if kind not in ("access", "unique"):
        raise field_error("data", "kind", kind, "must be 'access' or 'unique'")
    h = per_table_histograms(pool, indices)[kind]
    l1 = np.abs(h - np.asarray(ref[f"{kind}_hist"], dtype=np.float64)).sum(axis=1)
    return np.where(h.sum(axis=1) > 0, l1, np.nan)


def lookup_concentration(n_lookups: Sequence[float]) -> np.ndarray:
    """Share of all lookups held by the k heaviest tables, for k = 1..n, shape [n] (ends at 1)."""
    x = np.sort(np.asarray(n_lookups, dtype=np.float64))[::-1]
    return np.cumsum(x) / max(float(x.sum()), 1.0)


# ----------------------------------------------------------------------------- features
def table_features(pool: TablePool, indices: Sequence[int], precision: str = "fp32"
                   ) -> dict[str, Any]:
    """Per-table features of the selected tables, numpy arrays of shape [n] (``name`` and
    ``split`` are lists): ``rows``, ``dim`` (the pool's stored dim; tasks redraw dims),
    ``pooling_factor`` (mean lookups per sample), ``size_gb`` (weights at ``precision``, GB),
    ``n_lookups`` (in one batch of ``pool.batch_size``), ``reuse`` (hotness: lookups per distinct
    row touched; NaN without lookups), ``touched_frac`` (distinct rows touched / rows)."""
    tabs = [pool.tables[i] for i in indices]
    st = [pool.stats[i] for i in indices]
    train = set(pool.train_idx)
    n = np.array([s["n_lookups"] for s in st], dtype=np.float64)
    u = np.array([s["n_unique"] for s in st], dtype=np.float64)
    rows = np.array([t.rows for t in tabs], dtype=np.int64)
    return {"name": [t.name for t in tabs],
            "split": ["train" if i in train else "test" for i in indices],
            "rows": rows, "dim": np.array([t.dim for t in tabs], dtype=np.int64),
            "pooling_factor": np.array([t.pooling_factor for t in tabs], dtype=np.float64),
            "size_gb": np.array([t.memory_bytes(precision) for t in tabs], dtype=np.float64) / C.GB,
            "n_lookups": n, "reuse": np.where(u > 0, n / np.maximum(u, 1.0), np.nan),
            "touched_frac": u / rows}


def feature_summary_rows(features: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per numeric feature of :func:`table_features`: ``feature``, ``unit``, ``min``,
    ``median``, ``mean``, ``p99``, ``max`` (NaNs ignored; 4 significant digits)."""
    rows = []
    for key, unit in FEATURE_UNITS.items():
        x = np.asarray(features[key], dtype=np.float64)
        x = x[~np.isnan(x)]
        if not x.size:
            continue
        vals = (x.min(), np.median(x), x.mean(), np.quantile(x, 0.99), x.max())
        rows.append({"feature": key, "unit": unit,
                     **{k: float(f"{v:.4g}") for k, v in zip(("min", "median", "mean", "p99",
                                                              "max"), vals)}})
    return rows


def split_summary_rows(pool: TablePool, ref: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per split (train, test, all) of the whole pool: ``tables``, ``total_gb`` (fp32
    weights at the stored dim), ``median_rows``, ``mean_pooling``, ``lookups_m`` (millions per
    batch), ``l1_access`` / ``l1_unique`` of the split's aggregate against the reference."""
    out = []
    for split in SPLITS:
        idx = select_tables(pool, split)
        f = table_features(pool, idx)
        cmp = compare_histograms(pool_aggregate(pool, idx), ref)
        out.append({"split": split, "tables": len(idx), "total_gb": round(float(f["size_gb"].sum()), 2),
                    "median_rows": int(np.median(f["rows"])),
                    "mean_pooling": round(float(f["pooling_factor"].mean()), 3),
                    "lookups_m": round(float(f["n_lookups"].sum()) / 1e6, 1),
                    "l1_access": round(cmp["l1_access"], 4), "l1_unique": round(cmp["l1_unique"], 4)})
    return out


# ----------------------------------------------------------------------------- Criteo
def criteo_tables(dataset: str) -> dict[str, Any]:
    """The shipped Criteo table list ``datasets/criteo/<dataset>.json`` (public facts): ``name``
    (list), ``rows``, ``dim``, ``pooling_factor`` (arrays, shape [26]), ``size_gb`` (fp32
    weights, GB), ``source`` (the file's citation). One-line error for unknown names."""
    if dataset not in CRITEO_DATASETS:
        raise field_error("data", "criteo dataset", dataset,
                          f"must be one of {', '.join(CRITEO_DATASETS)}")
    data = read_json(datasets_dir() / "criteo" / f"{dataset}.json")
    t = data["tables"]
    rows = np.array([x["rows"] for x in t], dtype=np.int64)
    dim = np.array([x["dim"] for x in t], dtype=np.int64)
    return {"name": [x["name"] for x in t], "rows": rows, "dim": dim,
            "pooling_factor": np.array([x.get("pooling_factor", 1) for x in t], dtype=np.float64),
            "size_gb": rows * dim * C.BYTES_PER_WEIGHT["fp32"] / C.GB,
            "source": data.get("source", "")}


def criteo_summary_rows(features: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per Criteo dataset (and for the pool selection when its :func:`table_features`
    are given): ``dataset``, ``tables``, ``dims``, ``total_rows``, ``max_rows``, ``median_rows``,
    ``total_gb`` (fp32 weights), ``mean_pooling`` (lookups per sample)."""
    sets = {name: criteo_tables(name) for name in CRITEO_DATASETS}
    if features is not None:
        sets["pool selection"] = features
    return [{"dataset": name, "tables": len(d["rows"]),
             "dims": ",".join(str(x) for x in sorted(set(int(v) for v in d["dim"]))),
             "total_rows": int(np.sum(d["rows"])), "max_rows": int(np.max(d["rows"])),
             "median_rows": int(np.median(d["rows"])),
             "total_gb": round(float(np.sum(d["size_gb"])), 2),
             "mean_pooling": round(float(np.mean(d["pooling_factor"])), 3)}
            for name, d in sets.items()]


def exploration_summary(pool: TablePool, indices: Sequence[int], ref: Mapping[str, Any],
                        split: str) -> dict[str, Any]:
    """A small JSON-able summary of the selection against the reference: pool, split, tables,
    batch size, published source and files, aggregate numbers, distances, the uniform yardstick
    and the spread of the other published files (L1 of accesses, min / max or None)."""
    agg = pool_aggregate(pool, indices)
    spread = others_l1(ref)
    return {"pool": pool.name, "preset": pool.preset, "split": split, "tables": len(indices),
            "batch_size": pool.batch_size, "published_source": ref["source"],
            "published_files": ref["files"],
            "aggregate": {k: agg[k] for k in ("access_hist", "unique_hist", "unique_fraction",
                                              "avg_pooling", "n_lookups", "n_unique")},
            "vs_published": compare_histograms(agg, ref), "uniform_vs_published": uniform_l1(ref),
            "other_files_l1_access": ([float(spread.min()), float(spread.max())]
                                      if spread.size else None)}
