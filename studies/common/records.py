"""A study run's JSON-lines record, written so that a crash loses nothing already measured."""

from __future__ import annotations

import json
import os
from typing import IO, Any, Mapping


def append_record(f: IO[str], record: Mapping[str, Any]) -> None:
    """Append one record to an open ``.jsonl`` file as one line and force it to disk."""
    f.write(json.dumps(record) + "\n")
    f.flush()
    os.fsync(f.fileno())
