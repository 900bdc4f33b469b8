"""Shipped measured datasets: a store's samples exported as gzipped JSON lines, one file per
kind (``compute.jsonl.gz``, ``comm_4.jsonl.gz``, ...), with the provenance records beside
them (``provenance.json``) and a PROVENANCE.md. Text exports diff and review better than a
binary SQLite file, and they load without the store."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Iterator

from shardlab import constants as C
from shardlab.data.pool import datasets_dir
from shardlab.errors import ShardlabError
from shardlab.io import write_bytes_atomic, write_json_atomic
from shardlab.paths import safe_filename
from shardlab.profile.store import SampleStore


def kind_file(kind: str) -> str:
    """File name of a kind: ``comm:4`` -> ``comm_4.jsonl.gz`` (kinds come from a store: data,
    made a safe file name by :func:`~shardlab.paths.safe_filename`)."""
    return safe_filename(kind.replace(":", "_"), ".jsonl.gz")


def export_store(store_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, int]:
    """Write every kind of the store to ``out_dir`` (atomically per file); returns kind -> count.
    Each line is a sample without its provenance, plus ``provenance_index`` into
    ``provenance.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    provenances: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    counts = {}
    with SampleStore(store_path) as store:
        for kind in sorted(store.kinds()):
            lines = []
            for s in store.samples(kind):
                prov = s.pop("provenance")
                text = json.dumps(prov, sort_keys=True)
                if text not in index:
                    index[text] = len(provenances)
                    provenances.append(prov)
                s["provenance_index"] = index[text]
                lines.append(json.dumps(s, separators=(",", ":")))
            write_bytes_atomic(out / kind_file(kind), gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))
            counts[kind] = len(lines)
    write_json_atomic(out / "provenance.json", provenances)
    return counts


def dataset_folder(name: str) -> Path:
    """The folder of the shipped dataset ``name`` (``"cpu"``, ``"cpu/broad"``: a path under
    ``datasets/``; a moved dataset's old name, ``constants.DATASET_MOVED``, still finds it)."""
    name = C.DATASET_MOVED.get(name, name)
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        raise ShardlabError(f"load: field 'dataset' = {name!r} is not a folder under datasets/")
    return datasets_dir() / name


def load_measured(kind: str, name: str = "cpu") -> Iterator[dict[str, Any]]:
    """Samples of ``kind`` from the shipped dataset ``datasets/<name>/``, each with its
    provenance record under ``"provenance"``."""
    folder = dataset_folder(name)
    path = folder / kind_file(kind)
    if not path.exists():
        raise ShardlabError(f"measured dataset '{name}' has no kind '{kind}' ({path} is absent)")
    provenances = json.loads((folder / "provenance.json").read_text())
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.strip():
                s = json.loads(line)
                s["provenance"] = provenances[s.pop("provenance_index")]
                yield s
