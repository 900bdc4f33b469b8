"""Output paths and file names that are safe to use as root on a shared machine.

* :func:`check_output_path` decides whether an output path may be written and returns the real
  file to replace atomically; it refuses devices, FIFOs, sockets, directories and symlinks to
  them with one-line :class:`~shardlab.errors.ShardlabError` messages, and never opens the path
  (so a FIFO cannot block it).
* :func:`safe_filename` turns a name that is data (a task name, a method name) into a file name
  that cannot leave its folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from shardlab.errors import ShardlabError

_UNSAFE_CHAR = re.compile(r"[^A-Za-z0-9._-]")
_SAFE_SUFFIX = re.compile(r"[A-Za-z0-9._-]*")
_HASH_LEN = 10


#: File types that are not regular files, with their names in error messages.
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink"))


def _kind(mode: int) -> str:
    """A short English name for the file type in ``mode`` (for error messages)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _reason(e: OSError) -> str:
    """The one-line reason of an ``OSError`` (its strerror, else its first line)."""
    if e.strerror:
        return e.strerror
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _lstat(path: Path, shown: Path) -> os.stat_result | None:
    """``os.lstat(path)``, ``None`` when it does not exist; other failures as one line."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ShardlabError(f"{shown}: cannot write output ({_reason(e)})") from None


def _check_parent(parent: Path, shown: Path, create: bool) -> None:
    """Make sure ``parent`` is an existing, writable directory (creating it when ``create``)."""
    try:
        st = os.stat(parent)  # follows a symlinked folder
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise ShardlabError(f"{shown}: cannot write output ({_reason(e)})") from None
    if st is None:
        if not create:
            raise ShardlabError(f"{shown}: cannot write output (folder {parent} does not exist)")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ShardlabError(f"{shown}: cannot create folder {parent} ({_reason(e)})") from None
        st = os.stat(parent)
    if not stat.S_ISDIR(st.st_mode):
        raise ShardlabError(f"{shown}: cannot write output ({parent} is not a directory)")
    if not os.access(parent, os.W_OK | os.X_OK):
        try:
            ro = bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
        except OSError:
            ro = False
        why = "read-only file system" if ro else "permission denied"
        raise ShardlabError(f"{shown}: cannot write output ({why} in {parent})")


def check_output_path(path: str | os.PathLike) -> Path:
    """Check that ``path`` may be written as an output file; return the real file to replace.

    * A regular file, or a name that does not exist yet, is fine; missing parent folders are
      created. The returned path has its folders resolved (symlinked folders are followed).
    * A directory, character or block device (``/dev/null``, ``/dev/full``), FIFO or socket is
      refused: it is never replaced nor opened (checking a FIFO never blocks).
    * A symlink is written *through*: when its final target is a regular file, or does not
      exist yet in an existing folder, the returned path is that target, so the writer replaces
      the target atomically and the link is kept. A link to anything else (a directory, a
      device, ...), a link loop, or a dangling link into a missing folder is refused (folders
      are not created on a link's behalf).
    * An unwritable place (a parent that cannot be created, permission denied, read-only file
      system, ``/proc``) is refused.

    Every refusal is one :class:`ShardlabError` line naming ``path``. The check is advisory
    against concurrent changes; the writers of :mod:`shardlab.io` still never follow a link
    when they replace (``os.replace`` swaps the directory entry itself).
    """
    shown = Path(path)
    if not str(path):
        raise ShardlabError("output path: empty")
    if "\0" in str(path):
        raise ShardlabError(f"{str(path)!r}: output path contains a NUL character")
    target = Path(os.path.abspath(shown))
    st = _lstat(target, shown)
    via_link = st is not None and stat.S_ISLNK(st.st_mode)
    if via_link:
        target = Path(os.path.realpath(target))
        st = _lstat(target, shown)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise ShardlabError(f"{shown}: refusing to write output (symlink loop)")
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = f"a symlink to {_kind(st.st_mode)} ({target})" if via_link else _kind(st.st_mode)
        raise ShardlabError(f"{shown}: refusing to write output ({shown} is {what})")
    if target.name in ("", ".", ".."):
        raise ShardlabError(f"{shown}: refusing to write output (not a file name)")
    _check_parent(target.parent, shown, create=not via_link)
    parent = Path(os.path.realpath(target.parent))
    return parent / target.name


def _hash(name: str) -> str:
    """A short stable hash of ``name`` (hex)."""
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]


def safe_filename(name: str, suffix: str = "", max_len: int = 120) -> str:
    """A file name made from ``name`` (data, never a path) plus ``suffix`` (e.g. ``".html"``).

    The result has only ``[A-Za-z0-9._-]`` (anything else, path separators and control
    characters included, becomes ``_``), no ``..``, no leading dot, and at most ``max_len``
    characters. When the name had to be changed or truncated (or was empty), ``-`` and a short
    stable hash of the original name are appended before the suffix, so two different names
    never share a file and the same name always gives the same file. A safe name is kept.
    """
    if not isinstance(name, str):
        raise ShardlabError(f"file name: field 'name' = {name!r} must be a string")
    if not isinstance(suffix, str) or not _SAFE_SUFFIX.fullmatch(suffix) or ".." in suffix:
        raise ShardlabError(f"file name: field 'suffix' = {suffix!r} must be only [A-Za-z0-9._-], no '..'")
    room = max_len - len(suffix) - _HASH_LEN - 2
    if room < 1:
        raise ShardlabError(f"file name: field 'max_len' = {max_len} leaves no room for a name "
                            f"with suffix {suffix!r}")
    stem = _UNSAFE_CHAR.sub("_", name)
    stem = re.sub(r"\.{2,}", "_", stem)
    stem = stem.lstrip(".")
    if suffix.startswith("."):
        stem = stem.rstrip(".")
    changed = stem != name or not stem
    if not changed and len(stem) + len(suffix) <= max_len:
        return stem + suffix
    stem = stem[:room].rstrip(".") if suffix.startswith(".") else stem[:room]
    return f"{stem or '_'}-{_hash(name)}{suffix}"
