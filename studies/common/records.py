"""A study run's JSON-lines record, written so that a crash loses nothing already measured.

A run writes ``<run>.jsonl`` (header, then one record per task) and ``<run>.journal.jsonl`` (every
measurement as taken) line by line while it measures; when it has finished, :func:`pack_run` stores
both gzip-compressed (``.jsonl.gz``, byte-for-byte the same lines), so that the kept runs stay small
enough to travel with every device call. Readers take either form. :func:`fresh_process_row` runs
one timed study point in a fresh process; :func:`took` says what one measured verdict took.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

from shardlab import constants as C
from shardlab.evaluate.sequential import BUDGET_SHARING
from shardlab.io import write_bytes_atomic, write_text_atomic


def append_record(f: IO[str], record: Mapping[str, Any]) -> None:
    """Append one record to an open ``.jsonl`` file as one line and force it to disk."""
    f.write(json.dumps(record) + "\n")
    f.flush()
    os.fsync(f.fileno())


def took(evaluation: Mapping[str, Any]) -> str:
    """The sittings and rounds an Evaluation JSON was measured in, e.g. ``3 sittings, 24 rounds``."""
    sittings = len(evaluation.get("sittings_ms") or [evaluation.get("rounds_ms") or []])
    return f"{sittings} sitting{'s' * (sittings != 1)}, {len(evaluation.get('rounds_ms') or [])} rounds"


def budget_settings(budget_s: float | None) -> dict[str, Any]:
    """A run header's settings of measuring with a time budget (none without one): seconds per
    task on average, how they are shared, the most sittings and the spending function
    (``shardlab.evaluate.sequential``)."""
    if budget_s is None:
        return {}
    return {"budget_s": float(budget_s), "sharing": BUDGET_SHARING, "looks": C.SEQUENTIAL_LOOKS,
            "spending": C.SEQUENTIAL_SPENDING}


def read_text(path: str | Path) -> str:
    """The text of a ``.jsonl`` or of a packed ``.jsonl.gz``."""
    path = Path(path)
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def run_name(path: str | Path) -> str:
    """A run's name: its file name less ``.jsonl`` / ``.jsonl.gz``."""
    name = Path(path).name
    for suffix in (".gz", ".jsonl"):
        name = name[:-len(suffix)] if name.endswith(suffix) else name
    return name


def run_paths(folder: str | Path, prefix: str) -> list[Path]:
    """The run records ``<prefix>*Z.jsonl`` or ``.jsonl.gz`` of a results folder (journals not
    included), sorted by run name; a run kept in both forms is listed once, packed."""
    out: dict[str, Path] = {}
    for pattern in (f"{prefix}*Z.jsonl", f"{prefix}*Z.jsonl.gz"):
        for p in Path(folder).glob(pattern):
            out[run_name(p)] = p
    return [out[k] for k in sorted(out)]


def read_run(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, task records) of a study run's ``.jsonl`` (or packed ``.jsonl.gz``): the first
    line, then every line of kind ``task``."""
    rows = [json.loads(line) for line in read_text(path).splitlines() if line.strip()]
    return rows[0], [r for r in rows[1:] if r.get("kind") == "task"]


def _pack(plain: Path) -> Path:
    """``plain`` stored as ``plain.gz`` (fixed gzip header, so the same lines give the same bytes),
    read back and compared before the plain file is removed."""
    data = plain.read_bytes()
    packed = write_bytes_atomic(plain.with_name(plain.name + ".gz"), gzip.compress(data, compresslevel=9, mtime=0))
    if gzip.decompress(packed.read_bytes()) != data:
        packed.unlink()
        raise OSError(f"packing {plain.name} did not read back the same bytes; left as it was")
    plain.unlink()
    return packed


def pack_run(jsonl: str | Path) -> Path:
    """Store a finished run's ``.jsonl`` and its ``.journal.jsonl`` (when there is one) gzipped;
    returns the packed run record's path. Nothing is dropped: each packed file holds the same bytes."""
    jsonl = Path(jsonl)
    journal = jsonl.with_name(f"{run_name(jsonl)}.journal.jsonl")
    if journal.is_file():
        _pack(journal)
    return _pack(jsonl)


def rewrite_report(path: str | Path, report: Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], str]) -> Path:
    """Rewrite the ``.md`` beside a run's ``.jsonl`` (or ``.jsonl.gz``) from its records with ``report(header,
    records)`` (nothing measured); returns the ``.md`` path."""
    path = Path(path)
    header, records = read_run(path)
    md = path.with_name(f"{run_name(path)}.md")
    write_text_atomic(md, report(header, records))
    return md


def fresh_process_row(cmd: Sequence[str], row: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run a study point ``cmd`` in a fresh process and return the JSON object its last stdout
    line holds; a timeout or failure is ``row`` with an ``error`` saying so (one line)."""
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**row, "error": f"over {timeout_s:.0f} s"}
    if done.returncode:
        return {**row, "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])
