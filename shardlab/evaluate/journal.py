"""The measurement journal: every measurement of a measured evaluation appended, as it is taken,
to a JSON-lines file (one line per measurement: task, sitting, round, item, per-device ms), so an
interrupted evaluation loses nothing it measured."""

from __future__ import annotations

import json

import numpy as np

from shardlab.errors import ShardlabError
from shardlab.paths import check_output_path

#: The fields of one journal line (one measurement).
JOURNAL_FIELDS = ("task", "sitting", "round", "item", "ms")


def check_journal(path: str) -> None:
    """Refuse, in one line, a journal that cannot take appended measurements: a directory,
    device or FIFO (:func:`check_output_path`), or an existing non-empty file whose first line
    is not a measurement record (a task, plan or any other file would be spoilt by appending)."""
    check_output_path(path)
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
    except FileNotFoundError:
        return
    except OSError as e:
        raise ShardlabError(f"{path}: journal not readable ({e.strerror or e})") from None
    if not first:
        return
    try:
        record = json.loads(first)
    except ValueError:
        record = None
    if not isinstance(record, dict) or set(record) != set(JOURNAL_FIELDS):
        raise ShardlabError(f"{path}: not a measurement journal (its first line is not one measurement); "
                            "journal to a new file, or to one an earlier run journalled to")


def append_journal(path: str | None, task: str, round_: int, name: str, m: np.ndarray | float | None,
             sitting: int | str = 0) -> None:
    """Append one measurement to the journal file (flushed at once); ``sitting``: its index, or
    ``"selection"`` for the sitting that picks the reference."""
    if path is None:
        return
    value = m.tolist() if isinstance(m, np.ndarray) else m
    with open(path, "a") as f:
        f.write(json.dumps(dict(zip(JOURNAL_FIELDS, (task, sitting, round_, name, value)))) + "\n")
        f.flush()
