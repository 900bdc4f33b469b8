"""Reading and writing shardlab's JSON files atomically (a crash never leaves half a file)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable

from shardlab import constants as C
from shardlab.bounds import BOUNDS
from shardlab.errors import ShardlabError
from shardlab.paths import check_output_path
from shardlab.plan import Plan
from shardlab.tables import Task


def _write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Write a file atomically: :func:`shardlab.paths.check_output_path` picks the real file
    (or refuses with one line), ``write`` fills a temporary file in the same folder, which is
    fsynced and ``os.replace``-d over the real file. The temporary file is removed on any
    failure; an ``OSError`` (disk full, permission denied, ...) becomes one ShardlabError line
    naming ``path``. Returns ``path`` as given (a symlink given stays the path returned)."""
    target = check_output_path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:100]}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 files; give the usual mode
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        reason = e.strerror or (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ShardlabError(f"{Path(path)}: cannot write output ({reason})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    _fsync_dir(target.parent)
    return Path(path)


def _fsync_dir(folder: Path) -> None:
    """Best-effort fsync of ``folder`` so a replace survives a crash (ignored where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: str | os.PathLike, data: Any, indent: int | None = 1) -> Path:
    """Write ``data`` as JSON to ``path`` via a temporary file and ``os.replace``.

    A ``.gz`` suffix writes gzip-compressed JSON. Parent folders are created. The path is
    checked by :func:`shardlab.paths.check_output_path`: only a regular file is ever written
    (devices, FIFOs, sockets and directories are refused with one line; a symlink to a regular
    or not-yet-existing file is written through, replacing its target and keeping the link).
    Returns the path.
    """
    raw = (json.dumps(data, indent=indent, sort_keys=False) + "\n").encode()
    if Path(path).suffix == ".gz":
        raw = gzip.compress(raw, mtime=0)
    return _write_atomic(path, lambda f: f.write(raw))


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file and ``os.replace``; parent
    folders are created and the path is checked as in :func:`write_json_atomic`. Returns the
    path."""
    raw = text.encode("utf-8")
    return _write_atomic(path, lambda f: f.write(raw))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace``; parent folders are
    created and the path is checked as in :func:`write_json_atomic`. Returns the path."""
    data = bytes(data)
    return _write_atomic(path, lambda f: f.write(data))


def torch_save_atomic(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` ``obj`` to ``path`` via a temporary file and ``os.replace``; parent
    folders are created and the path is checked as in :func:`write_json_atomic`. Returns the
    path."""
    import torch

    return _write_atomic(path, lambda f: torch.save(obj, f))


def torch_load_safe(path: str | os.PathLike, what: str) -> Any:
    """Load a torch file written by :func:`torch_save_atomic` without ever running code from it:
    ``torch.load(weights_only=True)`` (tensors, containers, numbers, strings), with only
    ``torch.torch_version.TorchVersion`` (a ``str`` subclass the shipped files' provenance holds)
    allowed besides. A file that needs anything else -- a pickle that would call a function --
    is refused in one line naming ``what`` and the path, before any of it runs; so is a damaged
    file."""
    import torch
    from torch.torch_version import TorchVersion

    if not os.path.isfile(path):
        raise ShardlabError(f"{what} '{path}': no such file")
    try:
        with torch.serialization.safe_globals([TorchVersion]), warnings.catch_warnings():
            warnings.simplefilter("ignore")          # torch's pickle-protocol notes: the error below says it all
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 -- torch raises many kinds on a damaged or unsafe file
        text = str(e)
        unsafe = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", text)
        if unsafe:
            raise ShardlabError(f"{what} '{path}': refusing to load, the file would run code "
                                f"({unsafe.group(1)}); only tensors and plain data are read") from None
        detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)   # the cause, not torch's advice
        first = (detail.group(1) if detail else (text.strip().splitlines() or [""])[0])[:100]
        raise ShardlabError(f"{what} '{path}': not a readable model file ({type(e).__name__}: {first})") from None


def read_json(path: str | os.PathLike) -> Any:
    """Read JSON (gzip-compressed when the name ends in ``.gz``); one-line error if unreadable."""
    path = Path(path)
    try:
        st = os.stat(path)                       # never opens a FIFO (which would block) or a device
        if not stat.S_ISREG(st.st_mode):
            raise ShardlabError(f"{path}: not a regular file (a JSON file to read)")
        if st.st_size > C.MAX_INPUT_BYTES:
            raise ShardlabError(f"{path}: {st.st_size:,} bytes, more than the {C.MAX_INPUT_BYTES:,} a JSON "
                                "input may have")
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = _gunzip_bounded(raw, path)
        return json.loads(raw, object_pairs_hook=lambda pairs: _unique_keys(pairs, path))
    except FileNotFoundError:
        raise ShardlabError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as e:
        raise ShardlabError(f"{path}: not valid JSON ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise ShardlabError(f"{path}: JSON nested too deeply to read") from None


def _unique_keys(pairs: list[tuple[str, Any]], path: Path) -> dict[str, Any]:
    """A JSON object as a dict; a key given twice (``"ngpu": 2, "ngpu": 3``: which one was
    meant?) is one line naming it, not the last value silently."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ShardlabError(f"{path}: field '{twice}' appears twice in one object")
    return out


def _gunzip_bounded(raw: bytes, path: Path) -> bytes:
    """Decompress gzip ``raw``, refusing (one line) more than ``constants.MAX_INPUT_BYTES``."""
    with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
        out = f.read(C.MAX_INPUT_BYTES + 1)
    if len(out) > C.MAX_INPUT_BYTES:
        raise ShardlabError(f"{path}: decompresses to more than the {C.MAX_INPUT_BYTES:,} bytes a JSON input may have")
    return out


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


def option_value(text: str) -> Any:
    """A method option as text (a spec's ``key=value`` or ``--set key=value``) parsed: JSON where
    it parses (``4``, ``0.5``, ``[1, 2]``, ``null``), ``true``/``false`` in any case, else the
    text itself (``analytic``)."""
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return json.loads(text)
    except ValueError:
        return text


def strict_bool(value: Any, name: str) -> bool:
    """A boolean notebook parameter as papermill passes it: ``value`` if it is a bool, or the
    strings ``"true"`` / ``"false"`` (any case). Anything else -- ``"no"``, ``"yes"``, ``1``,
    ``None`` -- is a one-line error naming the parameter (``-p measure no`` injects the string
    ``"no"``, which Python would take as true)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ShardlabError(f"parameter '{name}' = {value!r} must be True or False")


#: Seconds per unit of a duration (``90s``, ``10m``, ``1.5h``; a bare number is seconds).
DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: Any, what: str = "field 'budget'") -> float:
    """A duration in seconds from ``90``, ``90s``, ``10m`` or ``1.5h`` (finite, > 0); one line
    naming ``what`` otherwise. What ``--budget`` and the notebooks' ``budget`` read."""
    t = str(text).strip().lower()
    unit = DURATION_UNITS.get(t[-1:]) if t else None
    try:
        value = float(t[:-1] if unit else t) * (unit or 1.0)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise ShardlabError(f"{what} = {text!r} must be a duration like 90s, 10m or 1h")
    return value


def strict_bounded(value: Any, name: str, off: int | None = None) -> int | float:
    """A numeric notebook parameter in its range of :data:`shardlab.bounds.BOUNDS` (the range
    the CLI option and the Python argument of the same name have): ``value`` (an int where the
    range is of integers, a whole float as papermill may pass one becoming an int), else a
    one-line error naming the parameter. ``off``: a value outside the range that the notebook
    reads as "none" (e.g. ``verify = 0``: no verification), returned as it is."""
    if off is not None and not isinstance(value, bool) and value == off:
        return off
    bound = BOUNDS[name]
    if not bound.admits(value):
        extra = f" (or {off}: none)" if off is not None else ""
        raise ShardlabError(f"parameter '{name}' = {value!r} {bound.requirement}{extra}")
    return int(value) if bound.integer else float(value)


def strict_folder(value: Any, name: str, empty_ok: bool = True) -> str:
    """A folder notebook parameter: a string naming a folder that exists or can be made (an empty
    string, where ``empty_ok``: write nothing); a file, device or FIFO there is a one-line error
    naming the parameter (``-p out_dir /dev/null``)."""
    if not isinstance(value, str) or (not value and not empty_ok):
        raise ShardlabError(f"parameter '{name}' = {value!r} must be a folder path")
    if value and os.path.exists(value) and not os.path.isdir(value):
        raise ShardlabError(f"parameter '{name}' = {value!r} must be a folder, and is a file or device")
    return value
