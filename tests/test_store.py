"""Sample store: keyed, one transaction per sample, provenance deduplicated, readable."""

from __future__ import annotations

import sqlite3

import pytest

from shardlab.errors import ShardlabError
from shardlab.measure.hardware import environment
from shardlab.measure.store import SampleStore


def test_add_and_read_back(tmp_path):
    prov = environment("cpu")
    assert {"hardware", "torch", "fbgemm_gpu", "date", "command", "git"} <= set(prov)
    with SampleStore(tmp_path / "s.db") as store:
        assert store.add("compute", "k1", {"total_ms": 1.5}, prov)
        assert store.add("compute", "k2", {"total_ms": 2.5}, prov)
        assert not store.add("compute", "k1", {"total_ms": 9.9}, prov)  # key taken: kept as is
        assert store.add("comm:4", "c1", {"fw_comm_ms": [1, 2, 3, 4]}, {**prov, "backend": "gloo"})
        assert store.count("compute") == 2 and store.count() == 3
        assert store.kinds() == {"compute": 2, "comm:4": 1}
        rows = list(store.samples("compute"))
        assert [r["total_ms"] for r in rows] == [1.5, 2.5]
        assert rows[0]["provenance"] == prov and rows[0]["key"] == "k1"
    with SampleStore(tmp_path / "s.db") as again:  # reopen: everything is still there
        assert again.keys("compute") == {"k1", "k2"} and again.integrity_ok()
        n_prov = again._db.execute("SELECT COUNT(*) FROM provenance").fetchone()[0]
        assert n_prov == 2


def test_not_a_store(tmp_path):
    (tmp_path / "junk.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ShardlabError, match="not a usable sample store"):
        SampleStore(tmp_path / "junk.db")


def test_uncommitted_sample_is_absent_after_a_failed_add(tmp_path):
    with SampleStore(tmp_path / "s.db") as store:
        with pytest.raises(TypeError):
            store.add("compute", "bad", {"x": object()}, {})  # not JSON: nothing written
        assert store.count() == 0
        assert store.add("compute", "good", {"x": 1}, {})
    assert sqlite3.connect(tmp_path / "s.db").execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 1
