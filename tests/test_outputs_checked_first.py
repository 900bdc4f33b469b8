"""Outputs are checked as a set before anything is written, and reading never creates: a refused
``--out`` or ``--store`` leaves nothing beside it, a store is never created (or changed) by a
read, and a cost-model bundle whose part would land on a directory writes none of its files."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from shardlab.cli import main
from shardlab.costmodel.bundle import load_bundle
from shardlab.costmodel.train import load_records
from shardlab.errors import ShardlabError
from shardlab.measure.store import SampleStore


@pytest.fixture()
def odd(tmp_path):
    """A folder holding a directory, a FIFO and links to /dev/full and to the FIFO."""
    (tmp_path / "adir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to_full").symlink_to("/dev/full")
    (tmp_path / "to_fifo").symlink_to(tmp_path / "fifo")
    return tmp_path


ODD = ["adir", "fifo", "to_full", "to_fifo"]


def _one_line_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize("name", ODD)
def test_train_refuses_out_before_writing_anything_beside_it(odd, name, capsys):
    before = sorted(p.name for p in odd.iterdir())
    said = _one_line_exit_2(["train", "analytic", "--out", str(odd / name), "--no-progress"], capsys)
    assert "refusing to write output" in said and name in said
    assert sorted(p.name for p in odd.iterdir()) == before          # no <out>.compute.json etc.


def test_train_refuses_dev_full_and_leaves_dev_alone(capsys):
    said = _one_line_exit_2(["train", "analytic", "--out", "/dev/full", "--no-progress"], capsys)
    assert "/dev/full" in said and "character device" in said
    assert not any(Path(f"/dev/full.{part}").exists() for part in ("compute.json", "comm.json", "fallback.json"))


@pytest.mark.parametrize("name", ODD)
def test_a_store_to_write_is_checked_before_sqlite_opens_it(odd, name, capsys):
    before = sorted(p.name for p in odd.iterdir())
    said = _one_line_exit_2(["measure", "compute", "--store", str(odd / name), "--samples", "1",
                             "--no-progress"], capsys)
    assert "refusing to write output" in said
    assert sorted(p.name for p in odd.iterdir()) == before          # no <store>-journal / -wal / -shm
    assert not any(Path(f"/dev/full{s}").exists() for s in ("-journal", "-wal", "-shm"))  # nor beside a link's target


def test_reading_never_creates_or_changes_a_store(tmp_path):
    missing = tmp_path / "passwd.db"
    with pytest.raises(ShardlabError, match="no such sample store"):
        load_records("compute", str(missing), "cpu")
    assert not missing.exists()
    other = tmp_path / "other.db"                                    # a SQLite file that is no store
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x INTEGER)")
    raw = other.read_bytes()
    with pytest.raises(ShardlabError, match="not a sample store"):
        load_records("compute", str(other), "cpu")
    assert other.read_bytes() == raw
    with pytest.raises(ShardlabError, match="no such sample store"):
        SampleStore(tmp_path, create=False)


def test_a_store_written_then_read(tmp_path):
    path = tmp_path / "s.db"
    with SampleStore(path) as s:
        s.add("compute", "k1", {"x": 1}, {"host": "here"})
    with SampleStore(path, create=False) as s:
        assert s.keys("compute") == {"k1"}


def test_a_bundle_writes_none_of_its_files_when_one_is_refused(tmp_path):
    bundle = load_bundle("analytic")
    files = bundle.output_files(tmp_path / "m.json")
    assert files[-1] == tmp_path / "m.json" and len(files) == len(set(files)) >= 3
    files[0].mkdir()                                                 # the first part would be a directory
    with pytest.raises(ShardlabError, match="is a directory"):
        bundle.save(tmp_path / "m.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == [files[0].name]
