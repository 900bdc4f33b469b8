"""Importers: JSON/CSV table lists, TorchRec EmbeddingBagConfig lists, the Criteo example."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from shardlab.data.importers import load_table_list, tables_from_torchrec_configs
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.search import run_sharder, get_sharder

ROOT = Path(__file__).resolve().parents[1]
BINS = [0.5, 0.5] + [0.0] * 15


def test_json_list_with_bins(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"name": "a", "rows": 1000, "dim": 8, "pooling_factor": 3.0,
                                 "reuse_bins": BINS}]))
    (t,) = load_table_list(path)
    assert (t.name, t.rows, t.dim, t.pooling_factor, t.reuse_bins[1]) == ("a", 1000, 8, 3.0, 0.5)
    assert t.source == "imported:t.json"


def test_csv_with_and_without_bins(tmp_path):
    cols = ",".join(f"reuse_bin_{i}" for i in range(17))
    path = tmp_path / "t.csv"
    path.write_text(f"name,rows,dim,pooling_factor,{cols}\nx,500,16,2.5,{','.join(map(str, BINS))}\n")
    (t,) = load_table_list(path)
    assert (t.rows, t.dim, t.pooling_factor) == (500, 16, 2.5)
    path.write_text("name,rows,dim,pooling_factor\ny,20000,32,4\n")
    with pytest.raises(ShardlabError, match="table 'y': field 'reuse_bins' is missing"):
        load_table_list(path)
    (t,) = load_table_list(path, assume_zipf=1.1, batch_size=4096)
    assert t.pooling_factor == 4.0 and abs(sum(t.reuse_bins) - 1) < 1e-3
    assert "assumed Zipf(1.1)" in t.source and t.distribution_params["alpha"] == 1.1
    path.write_text("name,rows,dim\nz,many,32\n")
    with pytest.raises(ShardlabError, match="table 'z': field 'rows'"):
        load_table_list(path)


def test_assumed_bins_follow_the_assumption(tmp_path):
    # A steeper Zipf law concentrates lookups on fewer rows: fewer rows are seen only once.
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"name": "a", "rows": 1_000_000, "dim": 8, "pooling_factor": 1}]))
    flat = load_table_list(path, assume_zipf=0.5, batch_size=8192)[0]
    steep = load_table_list(path, assume_zipf=1.3, batch_size=8192)[0]
    assert flat.reuse_bins[0] > steep.reuse_bins[0] + 0.2
    assert load_table_list(path, assume_zipf=1.3, batch_size=8192)[0] == steep  # deterministic


def test_a_table_too_rare_for_the_batch_gets_one_access_per_row(tmp_path):
    """A declared pooling factor so small that the assumed batch draws no lookup: the table
    loads (bins all in bin 0: every row it touches is touched once) and its source says why."""
    path = tmp_path / "rare.json"
    path.write_text(json.dumps([{"name": "rare", "rows": 5000, "dim": 8, "pooling_factor": 1e-7},
                                {"name": "busy", "rows": 5000, "dim": 8, "pooling_factor": 2.0}]))
    rare, busy = load_table_list(path, batch_size=512, assume_zipf=1.05)
    assert rare.reuse_bins == (1.0,) + (0.0,) * 16 and rare.pooling_factor == 1e-7
    assert "no lookup in that batch" in rare.source and "no lookup" not in busy.source
    assert busy.reuse_bins[0] < 1.0


def test_torchrec_configs_duck_typed():
    configs = [SimpleNamespace(name="user", num_embeddings=100_000, embedding_dim=64, feature_names=["u"]),
               SimpleNamespace(name="item", num_embeddings=5000, embedding_dim=32, feature_names=["i"])]
    tables = tables_from_torchrec_configs(configs, {"user": 3.0}, batch_size=2048, assume_zipf=1.0)
    assert [(t.name, t.rows, t.dim, t.pooling_factor) for t in tables] == [
        ("user", 100_000, 64, 3.0), ("item", 5000, 32, 1.0)]
    with pytest.raises(ShardlabError, match="'nope' is not among the configs"):
        tables_from_torchrec_configs(configs, {"nope": 2.0}, assume_zipf=1.0)


def test_real_torchrec_configs_when_installed():
    modules = pytest.importorskip("torchrec.modules.embedding_configs",
                                  reason="torchrec is an optional extra (README)")
    cfg = modules.EmbeddingBagConfig(name="t", embedding_dim=16, num_embeddings=1000, feature_names=["f"])
    (t,) = tables_from_torchrec_configs([cfg], assume_zipf=1.0, batch_size=1024)
    assert (t.rows, t.dim) == (1000, 16)


def test_criteo_example_shards():
    tables = load_table_list(ROOT / "datasets/criteo/criteo_1tb.json", assume_zipf=1.05, batch_size=8192)
    assert len(tables) == 26 and sum(t.rows for t in tables) == 177944275
    task = generate_task(tables=tables, ntables=26, ngpu=8, mem_cap_gb=32.0, dims=[128], name="criteo1tb")
    assert all(t.dim == 128 for t in task.tables)
    plan = run_sharder(get_sharder("size_greedy"), task)
    assert len(plan.placements) == 26
