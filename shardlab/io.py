"""Reading and writing shardlab's JSON files atomically (a crash never leaves half a file)."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from shardlab.errors import ShardlabError
from shardlab.plan import Plan
from shardlab.tables import Task


def write_json_atomic(path: str | os.PathLike, data: Any, indent: int | None = 1) -> Path:
    """Write ``data`` as JSON to ``path`` via a temporary file and ``os.replace``.

    A ``.gz`` suffix writes gzip-compressed JSON. Parent folders are created. Returns the path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=indent, sort_keys=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            raw = text.encode()
            f.write(gzip.compress(raw, mtime=0) if path.suffix == ".gz" else raw)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 files; give the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file and ``os.replace``; parent
    folders are created. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def torch_save_atomic(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` ``obj`` to ``path`` via a temporary file and ``os.replace``; parent
    folders are created. Returns the path."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)
    return path


def read_json(path: str | os.PathLike) -> Any:
    """Read JSON (gzip-compressed when the name ends in ``.gz``); one-line error if unreadable."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except FileNotFoundError:
        raise ShardlabError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as e:
        raise ShardlabError(f"{path}: not valid JSON ({str(e).splitlines()[0]})") from None


def load_task(path: str | os.PathLike) -> Task:
    """Load a Task JSON file."""
    return Task.from_dict(read_json(path))


def save_task(task: Task, path: str | os.PathLike) -> Path:
    """Save ``task`` as Task JSON (atomically)."""
    return write_json_atomic(path, task.to_dict())


def load_plan(path: str | os.PathLike) -> Plan:
    """Load a Plan JSON file."""
    return Plan.from_dict(read_json(path))


def save_plan(plan: Plan, path: str | os.PathLike) -> Path:
    """Save ``plan`` as Plan JSON (atomically)."""
    return write_json_atomic(path, plan.to_dict())


def names_list(value: str | Iterable[str]) -> list[str]:
    """Names from a list, or from a string as papermill's ``-p name ...`` passes one:
    comma-separated (``4x50,8x80``) or list-like (``["4x50", "8x80"]``); blanks dropped."""
    if isinstance(value, str):
        value = [v.strip().strip("'\"") for v in value.strip().strip("[]").split(",")]
    return [str(v).strip() for v in value if str(v).strip()]
