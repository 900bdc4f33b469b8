"""Outputs are regular files or one-line refusals (never a device, FIFO, socket or directory
replaced; symlinks written through to a regular target); names are data, never paths."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat

import pytest

from shardlab import Task
from shardlab.cli import main
from shardlab.errors import ShardlabError
from shardlab.io import (read_json, save_task, torch_save_atomic, write_bytes_atomic, write_json_atomic,
                         write_text_atomic)
from shardlab.paths import check_output_path, safe_filename
from tests.conftest import make_table

WRITERS = {
    "bytes": lambda p: write_bytes_atomic(p, b"\x00\x01"),
    "json": lambda p: write_json_atomic(p, {"a": 1}),
    "text": lambda p: write_text_atomic(p, "hello\n"),
    "torch": lambda p: torch_save_atomic({"a": 1}, p),
}


def _one_line_error(fn, *args, match: str) -> str:
    """Call ``fn``; it must raise a one-line ShardlabError containing ``match``."""
    with pytest.raises(ShardlabError) as info:
        fn(*args)
    msg = str(info.value)
    assert "\n" not in msg and match in msg, msg
    return msg


@pytest.fixture
def no_hang():
    """Fail (instead of hanging) if a test blocks, e.g. by opening a FIFO."""
    def boom(*_):
        raise AssertionError("blocked")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _strays(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(".") or n.endswith(".tmp"))


# --- outputs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_normal_write_is_atomic_and_right(tmp_path, kind):
    path = tmp_path / "sub" / "deeper" / f"out.{kind}"
    assert WRITERS[kind](path) == path
    assert stat.S_ISREG(os.lstat(path).st_mode)
    if kind == "json":
        assert read_json(path) == {"a": 1}
    elif kind == "bytes":
        assert path.read_bytes() == b"\x00\x01"
    elif kind == "text":
        assert path.read_text() == "hello\n"
    else:
        import torch
        assert torch.load(path) == {"a": 1}
    WRITERS[kind](path)  # overwrite an existing regular file
    assert _strays(path.parent) == []
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask


def test_gzip_json(tmp_path):
    path = write_json_atomic(tmp_path / "x.json.gz", [1, 2], indent=None)
    assert read_json(path) == [1, 2] and path.read_bytes()[:2] == b"\x1f\x8b"


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_symlink_to_regular_file_rewrites_target_keeps_link(tmp_path, kind):
    target = tmp_path / "real" / "target.out"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.out"
    link.symlink_to(target)
    WRITERS[kind](link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert stat.S_ISREG(os.lstat(target).st_mode) and target.read_bytes() != b"old"
    assert _strays(tmp_path) == [] and _strays(target.parent) == []


def test_relative_symlink_chain(tmp_path):
    (tmp_path / "t.json").write_text("{}")
    os.symlink("t.json", tmp_path / "l1")
    os.symlink("l1", tmp_path / "l2")
    write_json_atomic(tmp_path / "l2", {"b": 2})
    assert os.readlink(tmp_path / "l2") == "l1" and os.readlink(tmp_path / "l1") == "t.json"
    assert json.loads((tmp_path / "t.json").read_text()) == {"b": 2}


def test_dangling_symlink_creates_target(tmp_path):
    target, link = tmp_path / "new.json", tmp_path / "link.json"
    link.symlink_to(target)
    write_json_atomic(link, {"c": 3})
    assert link.is_symlink() and stat.S_ISREG(os.lstat(target).st_mode)
    assert read_json(target) == {"c": 3}
    assert check_output_path(link) == target.resolve()


def test_dangling_symlink_into_missing_folder_refused(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "nowhere" / "new.json")
    _one_line_error(write_json_atomic, link, {}, match=str(link))
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


def test_symlink_loop_refused(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    _one_line_error(write_json_atomic, tmp_path / "a", {}, match="symlink")
    assert (tmp_path / "a").is_symlink() and (tmp_path / "b").is_symlink()


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_symlink_to_directory_refused(tmp_path, kind):
    folder = tmp_path / "d"
    folder.mkdir()
    link = tmp_path / "link"
    link.symlink_to(folder)
    _one_line_error(WRITERS[kind], link, match="symlink to a directory")
    assert link.is_symlink() and folder.is_dir() and os.listdir(folder) == []
    assert _strays(tmp_path) == []


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_directory_refused_unchanged(tmp_path, kind):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "keep.txt").write_text("x")
    _one_line_error(WRITERS[kind], folder, match="is a directory")
    assert folder.is_dir() and os.listdir(folder) == ["keep.txt"] and _strays(tmp_path) == []


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_fifo_refused_without_blocking(tmp_path, kind, no_hang):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _one_line_error(WRITERS[kind], fifo, match="FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and _strays(tmp_path) == []
    link = tmp_path / "to-pipe"
    link.symlink_to(fifo)
    _one_line_error(WRITERS[kind], link, match="symlink to a FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()


def test_socket_refused(tmp_path):
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        _one_line_error(write_text_atomic, path, "x", match="socket")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_device_refused_still_device(device, kind):
    before = os.lstat(device)
    _one_line_error(WRITERS[kind], device, match="character device")
    after = os.lstat(device)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino


def test_symlink_to_device_refused(tmp_path):
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    _one_line_error(write_json_atomic, link, {}, match="symlink to a character device")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode) and link.is_symlink()


@pytest.mark.parametrize("path", ["/proc/x.json", "/proc/shardlab-nope/x.json", "/sys/x.json",
                                  "/sys/shardlab-nope/x.json"])
@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_unwritable_path_one_line(path, kind):
    msg = _one_line_error(WRITERS[kind], path, match=path)
    assert "Traceback" not in msg and not os.path.exists(path)


def test_parent_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    _one_line_error(write_json_atomic, tmp_path / "f" / "x.json", {}, match=str(tmp_path / "f" / "x.json"))
    assert (tmp_path / "f").read_text() == "x"


def test_bad_path_strings():
    _one_line_error(check_output_path, "", match="empty")
    _one_line_error(check_output_path, "a\0b", match="NUL")


def test_failure_cleans_up_tmp(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    path.write_text('{"old": 1}')

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("shardlab.io.os.replace", broken_replace)
    msg = _one_line_error(write_json_atomic, path, {"new": 2}, match=str(path))
    assert "No space left" in msg
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"old": 1} and _strays(tmp_path) == []


def test_failure_in_writer_cleans_up_tmp(tmp_path):
    path = tmp_path / "model.pt"
    with pytest.raises(Exception):
        torch_save_atomic(lambda: None, path)  # a lambda cannot be pickled
    assert not path.exists() and os.listdir(tmp_path) == []


def test_cli_out_device_is_one_line_nonzero(tmp_path, capsys):
    task = Task("cli", 2, 1.0, tuple(make_table(f"t{i}") for i in range(4)))
    path = save_task(task, tmp_path / "t.json")
    rc = main(["shard", str(path), "--method", "random", "--out", "/dev/full"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "\n" not in err and "/dev/full" in err
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


# --- names are data ----------------------------------------------------------------------------

SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _is_safe(name: str, max_len: int = 120) -> bool:
    return (0 < len(name) <= max_len and set(name) <= SAFE and ".." not in name
            and not name.startswith(".") and "/" not in name)


@pytest.mark.parametrize("name", ["../../x", "a/b", "x" * 300, "", "täsk-Ω", "..", ".", ".hidden",
                                  "a\\b", "a\nb\x00c\x7f", "/etc/passwd", "名前", "x.", "a" * 119])
def test_safe_filename_is_safe(name):
    out = safe_filename(name, ".html")
    assert _is_safe(out) and out.endswith(".html"), out
    assert safe_filename(name, ".html") == out  # stable
    assert _is_safe(safe_filename(name))


def test_safe_filename_keeps_safe_names():
    assert safe_filename("dlrm-synth-12x4_seed3", ".html") == "dlrm-synth-12x4_seed3.html"
    assert safe_filename("v1.2") == "v1.2"


def test_safe_filename_changes_get_hash_and_stay_distinct():
    a, b = safe_filename("a/b", ".json"), safe_filename("a?b", ".json")
    assert a != b and a.startswith("a_b-") and b.startswith("a_b-")
    assert safe_filename("../../x").startswith("_") and "/" not in safe_filename("../../x")
    long1, long2 = "x" * 300, "x" * 299 + "y"
    o1, o2 = safe_filename(long1, ".html"), safe_filename(long2, ".html")
    assert o1 != o2 and len(o1) <= 120 and len(o2) <= 120
    assert safe_filename("", ".html") != safe_filename("_", ".html")
    assert safe_filename("täsk") != safe_filename("tösk")
    assert len(safe_filename("x" * 300, max_len=40)) <= 40


def test_safe_filename_bad_arguments():
    _one_line_error(safe_filename, 3, match="'name'")
    _one_line_error(safe_filename, "x", "/../y", match="'suffix'")
    _one_line_error(safe_filename, "x", ".html", 10, match="'max_len'")
