"""A study run's JSON-lines record, written so that a crash loses nothing already measured.

A run writes ``<run>.jsonl`` (header, then one record per task) and ``<run>.journal.jsonl`` (every
measurement as taken) line by line while it measures; when it has finished, :func:`pack_run` stores
both gzip-compressed (``.jsonl.gz``, byte-for-byte the same lines), so that the kept runs stay small
enough to travel with every device call. Readers take either form. :func:`fresh_process_row` runs
one timed study point in a fresh process; :func:`took` says what one measured verdict took;
:func:`measure_run`, :func:`add_run_options` and :func:`run_or_report` are the measuring drivers'
run loop and command line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.evaluate.sequential import BUDGET_SHARING
from shardlab.io import write_bytes_atomic, write_text_atomic


#: A run's report: ``report(header, records)`` -> its markdown.
Report = Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], str]


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


def rewrite_report(path: str | Path, report: Report) -> Path:
    """Rewrite the ``.md`` beside a run's ``.jsonl`` (or ``.jsonl.gz``) from its records with ``report(header,
    records)`` (nothing measured); returns the ``.md`` path."""
    path = Path(path)
    header, records = read_run(path)
    md = path.with_name(f"{run_name(path)}.md")
    write_text_atomic(md, report(header, records))
    return md


def new_run(out: Path, prefix: str) -> tuple[str, Path]:
    """A new run in folder ``out`` (made if absent): its id (``prefix`` + UTC time, e.g.
    ``oversized-20261204T020000Z``) and the path of its ``.jsonl``."""
    out.mkdir(parents=True, exist_ok=True)
    run_id = prefix + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return run_id, out / f"{run_id}.jsonl"


def measure_run(jsonl: Path, header: Mapping[str, Any], items: Sequence[Any],
                measure: Callable[[int, Any], dict[str, Any]], report: Report, desc: str,
                progress: bool = True) -> Path:
    """Write a run (module docstring): ``header`` first, then for each of ``items`` the record
    ``measure(index, item)`` returns, with the wall ``seconds`` it took, each appended as soon as it
    is measured and the ``.md`` beside it rewritten by ``report(header, records)``; returns the
    packed run's path (:func:`pack_run`). A run's file is new: one that exists is an error."""
    records: list[dict[str, Any]] = []
    md = jsonl.with_name(f"{run_name(jsonl)}.md")
    with open(jsonl, "x") as f:
        append_record(f, header)
        for i, item in enumerate(tqdm(items, desc=desc, unit="task", disable=not progress)):
            start = time.perf_counter()
            rec = measure(i, item)
            rec["seconds"] = round(time.perf_counter() - start, 1)
            append_record(f, rec)
            records.append(rec)
            write_text_atomic(md, report(header, records))
    return pack_run(jsonl)


def add_run_options(ap: argparse.ArgumentParser, rounds: int, sittings: int = 2, results: Path | None = None) -> None:
    """The options every measuring study driver has: ``--rounds``, ``--sittings``, ``--out`` (the
    study's ``results`` folder by default) and ``--report`` (rewrite a stored run's ``.md``)."""
    ap.add_argument("--rounds", type=int, default=rounds, help=f"paired rounds per sitting (default {rounds})")
    ap.add_argument("--sittings", type=int, default=sittings, help=f"sittings (default {sittings})")
    ap.add_argument("--out", default=str(results), help="results folder (default: this study's results/)")
    ap.add_argument("--report", default=None, help="rewrite the .md of a stored run's jsonl; measures nothing")


def run_or_report(args: argparse.Namespace, report: Report, run: Callable[[], Path]) -> int:
    """A driver's end: with ``--report`` rewrite that run's ``.md``, else ``run()``; print the
    path written; a :class:`~shardlab.errors.ShardlabError` is one line and exit status 2."""
    try:
        print(rewrite_report(args.report, report) if args.report else run())
    except ShardlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


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
