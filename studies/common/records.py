"""A study run's JSON-lines record, written so that a crash loses nothing already measured."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

from shardlab.io import write_text_atomic


def append_record(f: IO[str], record: Mapping[str, Any]) -> None:
    """Append one record to an open ``.jsonl`` file as one line and force it to disk."""
    f.write(json.dumps(record) + "\n")
    f.flush()
    os.fsync(f.fileno())


def read_run(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, task records) of a study run's ``.jsonl``: the first line, then every line of
    kind ``task``."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return rows[0], [r for r in rows[1:] if r.get("kind") == "task"]


def rewrite_report(path: str | Path, report: Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], str]) -> Path:
    """Rewrite the ``.md`` beside a run's ``.jsonl`` from its records with ``report(header,
    records)`` (nothing measured); returns the ``.md`` path."""
    path = Path(path)
    header, records = read_run(path)
    md = path.with_suffix(".md")
    write_text_atomic(md, report(header, records))
    return md
