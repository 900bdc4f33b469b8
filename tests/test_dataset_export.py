"""Measured datasets: export a store to JSON lines and load it back unchanged."""

from __future__ import annotations

import pytest

from shardlab.errors import ShardlabError
from shardlab.profile.store import SampleStore, export_store, load_measured


def test_export_and_load_round_trip(tmp_path, monkeypatch):
    store = tmp_path / "s.db"
    with SampleStore(store) as s:
        s.add("compute", "a", {"total_ms": 1.0}, {"hardware": "x"})
        s.add("compute", "b", {"total_ms": 2.0}, {"hardware": "y"})
        s.add("comm:4", "c", {"fw_comm_ms": [1.0] * 4}, {"hardware": "x"})
        originals = {k: list(s.samples(k)) for k in ("compute", "comm:4")}
    counts = export_store(store, tmp_path / "ds" / "mine")
    assert counts == {"comm:4": 1, "compute": 2}
    monkeypatch.setenv("SHARDLAB_DATASETS", str(tmp_path / "ds"))
    for kind, rows in originals.items():
        assert list(load_measured(kind, "mine")) == rows
    with pytest.raises(ShardlabError, match="no kind 'comm:8'"):
        list(load_measured("comm:8", "mine"))


def test_shipped_cpu_dataset():
    compute = list(load_measured("compute", "cpu"))
    assert len(compute) >= 3000
    s = compute[0]
    assert s["total_ms"] > 0 and s["tables"] and s["provenance"]["profile"]["name"] == "cpu"
    assert {"hardware", "torch", "fbgemm_gpu", "date", "git", "command"} <= set(s["provenance"])
    comm4 = list(load_measured("comm:4", "cpu"))
    assert len(comm4) >= 1000 and len(comm4[0]["fw_comm_ms"]) == 4
