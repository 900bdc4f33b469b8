"""Tests of the shipped table pools (shardlab.data.tasks) and of studies/tools/build_pool.py."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab.data import generator as G
from shardlab.data.tasks import POOLS, TablePool, list_pools, load_pool, split_indices
from shardlab.errors import ShardlabError
from studies.tools import build_pool as BP

#: Lookups regenerated per pool in test_regenerated_tables_match_stored_stats (time budget).
REGEN_BUDGET = 40_000_000


@pytest.fixture(scope="module", params=sorted(POOLS))
def pool(request) -> TablePool:
    return load_pool(request.param)


def test_pool_shape(pool):
    preset = G.PRESETS[POOLS[pool.name][1]]
    assert pool.preset == preset.name and pool.batch_size == preset.batch_size
    assert len(pool.tables) == len(pool.stats) == preset.n_tables
    assert len({t.name for t in pool.tables}) == len(pool.tables)
    assert all(t.index_seed is not None and t.distribution_params.get("model") == G.MODEL
               for t in pool.tables)
    assert pool.provenance["preset"] == preset.name
    for key in ("seed", "command", "date", "numpy", "python", "git_revision", "machine",
                "hyperparameters"):
        assert key in pool.provenance


def test_pool_hits_published_aggregates(pool):
    agg = G.aggregate_histograms(pool.stats)
    cmp = G.compare_to_target(agg, pool.preset)
    assert cmp["l1_access"] <= 0.15, cmp
    assert cmp["l1_unique"] <= 0.15, cmp
    assert abs(cmp["pooling_rel_err"]) <= 0.05, cmp
    assert abs(cmp["unique_fraction_rel_err"]) <= 0.2, cmp
    assert np.mean([t.pooling_factor for t in pool.tables]) == pytest.approx(agg["avg_pooling"],
                                                                             rel=1e-4)


def test_stored_stats_match_tables(pool):
    for t, s in zip(pool.tables, pool.stats):
        assert s["name"] == t.name and s["batch_size"] == pool.batch_size
        assert sum(s["unique_counts"]) == s["n_unique"]
        assert sum(s["access_counts"]) == s["n_lookups"]
        assert t.pooling_factor == pytest.approx(s["n_lookups"] / pool.batch_size, rel=1e-5)
        if s["n_unique"]:
            assert np.allclose(t.reuse_bins, np.array(s["unique_counts"]) / s["n_unique"],
                               atol=1e-6)


def _sample(pool: TablePool, k: int = 20) -> list[int]:
    """~k tables spread over the lookup-count range (quantiles of the tables with at most
    REGEN_BUDGET / 4 lookups, so the smallest and large ones) plus the table with most rows."""
    n = np.array([s["n_lookups"] for s in pool.stats])
    order = np.argsort(n, kind="stable")
    affordable = order[n[order] <= REGEN_BUDGET // 4]
    picks = {int(i) for i in affordable[np.linspace(0, len(affordable) - 1, k - 1).astype(int)]}
    rows = np.array([t.rows for t in pool.tables])
    picks.add(int(np.argmax(np.where(n <= REGEN_BUDGET // 8, rows, 0))))
    return sorted(picks)


def test_regenerated_tables_match_stored_stats(pool):
    picks = _sample(pool)
    sizes = [pool.stats[i]["n_lookups"] for i in picks]
    assert len(picks) >= 15 and min(sizes) < 1000 and max(sizes) > 1_000_000
    assert sum(sizes) <= REGEN_BUDGET
    for i in picks:
        t, s = pool.tables[i], pool.stats[i]
        idx, off = G.generate_lookups(t, pool.batch_size, 0)
        fresh = G.lookup_stats(t.name, idx, off)
        for key in ("n_lookups", "n_unique", "unique_counts", "access_counts", "batch_size"):
            assert fresh[key] == s[key], (t.name, key)
        assert tuple(fresh["reuse_bins"]) == t.reuse_bins
        assert fresh["pooling_factor"] == t.pooling_factor
        rebuilt, _ = G.table_from_params(t.name, {"rows": t.rows, **t.distribution_params}, t.dim,
                                         pool.batch_size, t.index_seed, t.source)
        assert rebuilt == t


def test_train_test_split(pool):
    train, test = set(pool.train_idx), set(pool.test_idx)
    n = len(pool.tables)
    assert not train & test and train | test == set(range(n))
    assert len(train) == n // 2
    assert (list(pool.train_idx), list(pool.test_idx)) == split_indices(n, pool.provenance["seed"])
    assert {t.name for t in pool.train}.isdisjoint({t.name for t in pool.test})


def test_pool_lookup_and_listing():
    assert list_pools() == sorted(POOLS) and "dlrm-synth" in list_pools()
    p = load_pool()
    assert p is load_pool("dlrm-synth")  # cached
    assert p.table("t0").name == "t0"
    with pytest.raises(ShardlabError):
        p.table("no-such-table")


def test_unknown_pool_name():
    with pytest.raises(ShardlabError) as e:
        load_pool("criteo-synth")
    msg = str(e.value)
    assert "criteo-synth" in msg and all(name in msg for name in POOLS) and "\n" not in msg


def test_build_script_and_datasets_override(tmp_path, monkeypatch):
    data = BP.build("dlrm2021", seed=11, n_tables=4, out=tmp_path / "dlrm_synth",
                    name="dlrm-synth", workers=1)
    assert (tmp_path / "dlrm_synth" / "PROVENANCE.md").read_text().count("L1 distance") == 2
    monkeypatch.setenv("SHARDLAB_DATASETS", str(tmp_path))
    small = load_pool("dlrm-synth")
    assert len(small.tables) == 4 and small.provenance["seed"] == 11
    assert [t.to_dict() for t in small.tables] == data["tables"]
    assert small.tables == tuple(G.generate_tables("dlrm2021", 4, seed=11))
    monkeypatch.delenv("SHARDLAB_DATASETS")
    assert len(load_pool("dlrm-synth").tables) == G.PRESETS["dlrm2021"].n_tables
