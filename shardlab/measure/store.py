"""Where measured samples live: a crash-safe SQLite store while they are measured, and
shipped datasets (gzipped JSON lines) once they are exported.

**Store.** Every sample is committed in its own transaction (``synchronous=FULL``, WAL journal), so a
``kill -9`` in the middle of a campaign loses no completed sample and leaves a readable file.
Samples are keyed: a campaign derives each sample's key from its seed and index, so a rerun
skips the keys already present and resumes where the crash left off. Each sample points at a
provenance record (hardware, versions, batch, optimizer, precision, timing settings, date,
command, code revision).

**Shipped datasets.** A store's samples exported as gzipped JSON lines, one file per kind
(``compute.jsonl.gz``, ``comm_4.jsonl.gz``, ...), with the provenance records beside them
(``provenance.json``) and a PROVENANCE.md. Text exports diff and review better than a binary
SQLite file, and they load without the store.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

from shardlab import constants as C
from shardlab.data.tasks import datasets_dir
from shardlab.errors import ShardlabError
from shardlab.io import write_bytes_atomic, write_json_atomic
from shardlab.paths import check_output_path, safe_filename

SCHEMA = """
CREATE TABLE IF NOT EXISTS provenance (
    id INTEGER PRIMARY KEY,
    data TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    key TEXT NOT NULL UNIQUE,
    payload TEXT NOT NULL,
    provenance_id INTEGER NOT NULL REFERENCES provenance(id),
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
CREATE INDEX IF NOT EXISTS samples_kind ON samples(kind);
"""


class SampleStore:
    """A SQLite file of samples. ``kind`` is e.g. ``"compute"`` or ``"comm:4"``; ``key`` is
    unique per sample; ``payload`` and ``provenance`` are JSON-able dicts."""

    def __init__(self, path: str | os.PathLike, create: bool = True):
        """``create``: a store to write, made when missing (the path checked first as any output:
        never a device, FIFO, directory or a link to one); False: a store to read, which must
        exist -- reading never creates one, nor changes a file that is not a store."""
        self.path = Path(path)
        if create:
            check_output_path(self.path)
        elif not self.path.is_file():
            raise ShardlabError(f"{self.path}: no such sample store (nothing to read)")
        try:
            if create:
                self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.executescript(SCHEMA)
            else:
                uri = "file:" + urllib.parse.quote(str(self.path.resolve())) + "?mode=rw"
                self._db = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)
                have = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if not {"samples", "provenance"} <= have:
                    self._db.close()
                    raise ShardlabError(f"{self.path}: not a sample store (no samples table)")
        except sqlite3.DatabaseError as e:
            raise ShardlabError(f"{self.path}: not a usable sample store ({e})") from None
        self._prov_ids: dict[str, int] = {}

    def __enter__(self) -> "SampleStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (the file stays consistent either way)."""
        self._db.close()

    def _provenance_id(self, provenance: dict[str, Any]) -> int:
        text = json.dumps(provenance, sort_keys=True)
        if text not in self._prov_ids:
            self._db.execute("INSERT OR IGNORE INTO provenance(data) VALUES (?)", (text,))
            row = self._db.execute("SELECT id FROM provenance WHERE data = ?", (text,)).fetchone()
            self._prov_ids[text] = int(row[0])
        return self._prov_ids[text]

    def add(self, kind: str, key: str, payload: dict[str, Any], provenance: dict[str, Any]) -> bool:
        """Commit one sample; returns False (and stores nothing) if ``key`` is already there."""
        with self._db:  # one transaction per sample
            self._db.execute("BEGIN IMMEDIATE")
            cur = self._db.execute(
                "INSERT OR IGNORE INTO samples(kind, key, payload, provenance_id) VALUES (?, ?, ?, ?)",
                (kind, key, json.dumps(payload), self._provenance_id(provenance)))
            return cur.rowcount == 1

    def keys(self, kind: str | None = None) -> set[str]:
        """Keys of the stored samples (of one kind, or all)."""
        q, args = ("SELECT key FROM samples WHERE kind = ?", (kind,)) if kind else ("SELECT key FROM samples", ())
        return {r[0] for r in self._db.execute(q, args)}

    def count(self, kind: str | None = None) -> int:
        """Number of stored samples (of one kind, or all)."""
        q, args = ("SELECT COUNT(*) FROM samples WHERE kind = ?", (kind,)) if kind else ("SELECT COUNT(*) FROM samples", ())
        return int(self._db.execute(q, args).fetchone()[0])

    def kinds(self) -> dict[str, int]:
        """Kind -> number of samples."""
        return {k: n for k, n in self._db.execute("SELECT kind, COUNT(*) FROM samples GROUP BY kind")}

    def samples(self, kind: str) -> Iterator[dict[str, Any]]:
        """The samples of ``kind`` in insertion order, each ``{"key", "created_at",
        "provenance", **payload}``."""
        rows = self._db.execute(
            "SELECT s.key, s.payload, s.created_at, p.data FROM samples s JOIN provenance p "
            "ON p.id = s.provenance_id WHERE s.kind = ? ORDER BY s.id", (kind,))
        for key, payload, created, prov in rows:
            yield {"key": key, "created_at": created, "provenance": json.loads(prov), **json.loads(payload)}

    def integrity_ok(self) -> bool:
        """SQLite's own integrity check."""
        return self._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


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


def current_dataset_name(recorded: str) -> str:
    """A dataset name as a record made before a move spells it (``"cpu+cpu_broad"``), spelled as
    today (``"cpu+cpu/broad"``): each ``+``-joined part through ``constants.DATASET_MOVED``."""
    return "+".join(C.DATASET_MOVED.get(part, part) for part in recorded.split("+"))


def dataset_folder(name: str) -> Path:
    """The folder of the shipped dataset ``name`` (``"cpu"``, ``"cpu/broad"``: a path under
    ``datasets/``); a moved dataset's old name (``constants.DATASET_MOVED``) is refused with the new one."""
    if name in C.DATASET_MOVED:
        raise ShardlabError(f"load: dataset '{name}' was moved: spell it '{C.DATASET_MOVED[name]}'")
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
