"""Tests of the synthetic table generator (shardlab.data.generator)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardlab import constants as C
from shardlab.data import calibration as CAL
from shardlab.data import generator as G
from shardlab.data.features import reuse_histograms
from shardlab.data.stats import published_stats_path
from shardlab.errors import ShardlabError
from shardlab.tables import Table

#: The published statistics file (shipped in datasets/published; shardlab.data.stats).
PUBLISHED = published_stats_path()


def _table(rows=5000, alpha=1.1, q=3.0, hot=0.0, pooling=4.0, bag_k=2.0, seed=7, batch=2048):
    params = {"rows": rows, "alpha": alpha, "q": q, "hot": hot, "pooling": pooling, "bag_k": bag_k}
    return G.table_from_params("x", params, 16, batch, seed)


def test_lookups_are_deterministic_per_batch_index():
    t, _ = _table()
    i1, o1 = G.generate_lookups(t, 2048, 0)
    i2, o2 = G.generate_lookups(t, 2048, 0)
    assert np.array_equal(i1, i2) and np.array_equal(o1, o2)
    i3, o3 = G.generate_lookups(t, 2048, 1)
    assert not (len(i3) == len(i1) and np.array_equal(i3, i1))
    other, _ = _table(seed=8)
    assert not np.array_equal(G.generate_lookups(other, 2048, 0)[0][:100], i1[:100])


@pytest.mark.parametrize("rows,alpha,q,hot,pooling", [(100, 0.0, 0.0, 0.0, 30.0),
                                                      (7919, 1.3, 10.0, 0.2, 3.0),
                                                      (30_000_000, 0.8, 100.0, 0.0, 1.5),
                                                      (1000, 2.5, 0.0, 0.0, 0.01)])
def test_lookups_shapes_range_and_pooling(rows, alpha, q, hot, pooling):
    batch = 8192
    t, stats = _table(rows, alpha, q, hot, pooling, batch=batch)
    idx, off = G.generate_lookups(t, batch, 0)
    assert idx.dtype == np.int64 and off.dtype == np.int64
    assert off.shape == (batch + 1,) and off[0] == 0 and off[-1] == len(idx)
    assert np.all(np.diff(off) >= 0)
    assert idx.size == 0 or (idx.min() >= 0 and idx.max() < rows)
    assert t.rows == rows and t.pooling_factor == pytest.approx(len(idx) / batch, rel=1e-5)
    assert t.pooling_factor == pytest.approx(pooling, rel=0.1, abs=0.01)
    assert stats["n_lookups"] == len(idx) and stats["n_unique"] == len(np.unique(idx))


def test_skew_hot_row_and_scatter():
    t, _ = _table(rows=100_000, alpha=1.2, q=1.0, hot=0.25, pooling=8.0, batch=4096)
    idx, _ = G.generate_lookups(t, 4096, 0)
    counts = np.bincount(idx, minlength=t.rows)
    top = np.sort(counts)[::-1]
    assert top[0] / len(idx) > 0.25            # the default row plus its own Zipf share
    assert top[:100].sum() > 0.5 * len(idx)    # heavy head, far from uniform (100 / 1e5 rows)
    assert np.argmax(counts) != 0              # hot ranks are scattered, not rows 0, 1, 2...


def test_table_fields_come_from_the_measured_stream():
    t, stats = _table()
    idx, off = G.generate_lookups(t, 2048, 0)
    uniq, acc, n_u = reuse_histograms(idx)
    assert np.allclose(t.reuse_bins, uniq, atol=1e-6)
    assert stats["unique_counts"] == [round(x * n_u) for x in uniq]
    assert stats["access_counts"] == [round(x * len(idx)) for x in acc]
    assert sum(stats["unique_counts"]) == stats["n_unique"] == n_u
    assert sum(stats["access_counts"]) == stats["n_lookups"] == len(idx)
    assert t.index_seed == 7 and t.distribution_params["model"] == G.MODEL
    assert "synthetic" in t.source


def test_q_and_hot_default_to_a_plain_zipf_law():
    params = {"rows": 3000, "alpha": 1.2, "pooling": 2.0, "bag_k": 5.0}
    plain, _ = G.table_from_params("z", params, 8, 1024, 3)
    explicit, _ = G.table_from_params("z", {**params, "q": 0.0, "hot": 0.0}, 8, 1024, 3)
    assert plain == explicit


def test_missing_distribution_is_a_clear_error():
    plain = Table("plain_t", 1000, 8, 2.0, (1.0,) + (0.0,) * 16)
    with pytest.raises(ShardlabError) as e:
        G.generate_lookups(plain, 16)
    assert "plain_t" in str(e.value) and "\n" not in str(e.value)


def test_generate_tables_is_reproducible_and_labelled():
    tables, stats = G.generate_tables_with_stats("dlrm2021", 6, seed=3, dim=32, name_prefix="s")
    again = G.generate_tables("dlrm2021", 6, seed=3, dim=32, name_prefix="s")
    assert tables == again
    assert [t.name for t in tables] == [f"s{i}" for i in range(6)]
    assert all(t.dim == 32 and "dlrm2021" in t.source and t.index_seed is not None
               and t.distribution for t in tables)
    assert [s["name"] for s in stats] == [t.name for t in tables]
    assert G.generate_tables("dlrm2021", 6, seed=4) != G.generate_tables("dlrm2021", 6, seed=3)


@pytest.mark.parametrize("preset", sorted(G.PRESETS))
def test_draw_params_population(preset):
    p = G.PRESETS[preset]
    prm = G.draw_params(preset, 400, seed=1)
    pool = np.array([x["pooling"] for x in prm])
    rows = np.array([x["rows"] for x in prm])
    assert pool.mean() == pytest.approx(p.pooling_mean, rel=1e-4)
    assert (pool < 0.01).sum() >= 3 and pool.max() > 5 * p.pooling_mean   # near-zero and heavy
    assert rows.min() >= 100 and rows.max() <= 10 ** p.rows_log10_max + 1
    assert rows.max() / rows.min() > 1e4
    assert len({x["index_seed"] for x in prm}) == 400


def test_aggregate_pools_table_row_pairs():
    rng = np.random.default_rng(0)
    streams = [rng.integers(0, 50, 300), rng.integers(0, 5000, 100), np.array([], dtype=np.int64)]
    stats = []
    for k, idx in enumerate(streams):
        off = np.linspace(0, len(idx), 11).astype(np.int64)
        stats.append(G.lookup_stats(f"t{k}", idx, off))
    agg = G.aggregate_histograms(stats)
    pairs = np.concatenate([idx + 10**6 * k for k, idx in enumerate(streams)])
    uniq, acc, n_u = reuse_histograms(pairs)
    assert np.allclose(agg["unique_hist"], uniq) and np.allclose(agg["access_hist"], acc)
    assert agg["unique_fraction"] == pytest.approx(n_u / len(pairs))
    assert agg["avg_pooling"] == pytest.approx(len(pairs) / (3 * 10))


def test_l1_distance():
    assert G.l1_distance([0.5, 0.5], [1.0, 0.0]) == pytest.approx(1.0)
    assert G.l1_distance([0.2] * 5, [0.2] * 5) == 0.0
    with pytest.raises(ShardlabError):
        G.l1_distance([1.0], [0.5, 0.5])


def test_expected_model_agrees_with_sampling():
    t, stats = _table(rows=200_000, alpha=1.0, q=5.0, hot=0.02, pooling=20.0, batch=8192)
    d = t.distribution_params
    uniq, acc = CAL.expected_table_counts([t.rows], [d["alpha"]], [d["q"]], [d["hot"]],
                                        [stats["n_lookups"]])
    assert uniq.sum() == pytest.approx(stats["n_unique"], rel=0.02)
    su = np.array(stats["unique_counts"]) / stats["n_unique"]
    sa = np.array(stats["access_counts"]) / stats["n_lookups"]
    assert G.l1_distance(su, uniq[0] / uniq.sum()) < 0.03
    assert G.l1_distance(sa, acc[0] / acc.sum()) < 0.05


@pytest.mark.parametrize("preset", sorted(G.PRESETS))
def test_presets_are_calibrated_in_expectation(preset):
    agg = CAL.expected_aggregate(preset, 2048, seed=5)
    cmp = G.compare_to_target(agg, preset)
    assert cmp["l1_access"] <= 0.15 and cmp["l1_unique"] <= 0.15
    assert abs(cmp["unique_fraction_rel_err"]) < 0.2 and abs(cmp["pooling_rel_err"]) < 1e-3


def test_unknown_preset():
    with pytest.raises(ShardlabError, match="dlrm2021"):
        G.get_preset("dlrm1999")


@pytest.mark.parametrize("preset", sorted(G.PRESETS))
def test_copied_targets_match_published_stats(preset):
    files = {f["file"]: f for f in json.loads(PUBLISHED.read_text())["files"]}
    p = G.PRESETS[preset]
    src = [files[name] for name in p.target_files]
    assert all(f["batch_size"] == p.batch_size and f["num_tables"] == p.n_tables for f in src)
    mean = lambda key: np.mean([f[key] for f in src], axis=0)  # noqa: E731
    assert np.allclose(p.target_access_hist, mean("hist_accesses_by_reuse_factor"), atol=1e-9)
    assert np.allclose(p.target_unique_hist, mean("hist_unique_rows_by_reuse_factor"), atol=1e-9)
    assert p.target_unique_fraction == pytest.approx(mean("unique_fraction"), rel=1e-6)
    assert p.pooling_mean == pytest.approx(mean("avg_pooling_factor"), rel=1e-6)
    t = G.published_target(preset)
    assert len(t["access_hist"]) == len(t["unique_hist"]) == C.N_REUSE_BINS
