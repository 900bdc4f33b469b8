"""Statistics of the shipped pools against the published DLRM locality stats
(shardlab.data.stats) and the figures drawn from them (shardlab.report.data_figures)."""

from __future__ import annotations

import json
import re

import numpy as np
import plotly.graph_objects as go
import pytest

from shardlab import constants as C
from shardlab.data import stats as S
from shardlab.data.presets import l1_distance, published_target
from shardlab.data.tasks import POOLS, load_pool
from shardlab.errors import ShardlabError
from shardlab.report import data_figures as F

POOL_NAMES = sorted(POOLS)


def _entry(name, year, access, unique, pooling=10.0, ufrac=0.1, batch=65536, tables=856):
    return {"file": name, "year": year, "batch_size": batch, "num_tables": tables,
            "avg_pooling_factor": pooling, "unique_fraction": ufrac,
            "hist_accesses_by_reuse_factor": access, "hist_unique_rows_by_reuse_factor": unique}


def _onehot(i):
    h = [0.0] * C.N_REUSE_BINS
    h[i] = 1.0
    return h


@pytest.mark.parametrize("name", POOL_NAMES)
def test_aggregate_histograms_are_distributions(name):
    pool = load_pool(name)
    for split, max_tables in (("all", 0), ("test", 0), ("train", 37)):
        idx = S.select_tables(pool, split, max_tables, seed=3)
        agg = S.pool_aggregate(pool, idx)
        assert agg["n_tables"] == len(idx)
        assert sum(agg["access_hist"]) == pytest.approx(1.0, abs=1e-9)
        assert sum(agg["unique_hist"]) == pytest.approx(1.0, abs=1e-9)
        assert 0 < agg["unique_fraction"] <= 1


@pytest.mark.parametrize("name", POOL_NAMES)
def test_aggregate_is_the_lookup_weighted_mean_of_the_tables(name):
    pool = load_pool(name)
    idx = S.select_tables(pool, "test", 60, seed=1)
    h = S.per_table_histograms(pool, idx)
    n = np.array([pool.stats[i]["n_lookups"] for i in idx], dtype=float)
    u = np.array([pool.stats[i]["n_unique"] for i in idx], dtype=float)
    agg = S.pool_aggregate(pool, idx)
    assert np.allclose(n @ h["access"] / n.sum(), agg["access_hist"], atol=1e-6)
    assert np.allclose(u @ h["unique"] / u.sum(), agg["unique_hist"], atol=1e-6)
    sums = h["access"].sum(axis=1)
    assert np.all((np.abs(sums - 1) < 1e-6) | (sums == 0))


def test_calibrated_pools_are_closer_to_their_own_target():
    refs = {name: S.published_reference(name) for name in POOL_NAMES}
    for name in POOL_NAMES:
        pool = load_pool(name)
        agg = S.pool_aggregate(pool, S.select_tables(pool))
        own = S.compare_histograms(agg, refs[name])
        flat = S.uniform_l1(refs[name])
        assert own["l1_access"] < flat["l1_access"] and own["l1_unique"] < flat["l1_unique"]
        for other in POOL_NAMES:
            if other != name:
                assert own["l1_access"] < l1_distance(agg["access_hist"], refs[other]["access_hist"])
        assert abs(own["pooling_rel_err"]) < 0.01


def test_a_random_subset_is_further_from_the_target_than_the_whole_pool():
    pool = load_pool("dlrm-synth")
    ref = S.published_reference("dlrm-synth")
    whole = S.compare_histograms(S.pool_aggregate(pool, S.select_tables(pool)), ref)
    small = S.compare_histograms(S.pool_aggregate(pool, S.select_tables(pool, "all", 20, 0)), ref)
    assert whole["l1_access"] < small["l1_access"]


def test_reference_falls_back_to_the_presets_copy(tmp_path):
    ref = S.published_reference("dlrm-synth-2022", path=tmp_path / "absent.json")
    target = published_target("dlrm2022")
    assert ref["access_hist"] == target["access_hist"] and ref["others"] == []
    assert "presets.py" in ref["source"] and "not found" in ref["source"]
    assert S.others_l1(ref).size == 0
    assert len(S.comparison_rows(S.pool_aggregate(load_pool("dlrm-synth-2022"), (0, 1, 2)), ref)) == 3


def test_reference_reads_the_published_file(tmp_path):
    target = published_target("dlrm2021")
    other = _entry("fbgemm_t856_bs65536_0.pt.gz", 2021, _onehot(0), _onehot(0), pooling=8.0)
    files = [_entry("fbgemm_t856_bs65536.pt.gz", 2021, target["access_hist"],
                    target["unique_hist"], target["avg_pooling"], target["unique_fraction"]),
             other, _entry("fbgemm_t788_bs131072_0.pt.gz", 2022, _onehot(3), _onehot(3))]
    path = tmp_path / "stats.json"
    path.write_text(json.dumps({"files": files}))
    ref = S.published_reference("dlrm-synth", path=path)
    assert ref["source"] == str(path) and ref["year"] == 2021 and ref["n_tables"] == 856
    assert ref["access_hist"] == pytest.approx(target["access_hist"])
    assert [o["file"] for o in ref["others"]] == [other["file"]]  # not itself, not 2022
    assert S.others_l1(ref) == pytest.approx([l1_distance(_onehot(0), target["access_hist"])])
    # 2022: the mean of its 16 target files; missing ones are named
    with pytest.raises(ShardlabError, match="fbgemm_t788_bs131072_1.pt.gz"):
        S.published_reference("dlrm-synth-2022", path=path)


def test_malformed_published_file_names_the_field(tmp_path):
    path = tmp_path / "bad.json"
    entry = _entry("x.pt.gz", 2021, _onehot(0), _onehot(0))
    del entry["unique_fraction"]
    path.write_text(json.dumps({"files": [entry]}))
    with pytest.raises(ShardlabError, match="field 'unique_fraction'"):
        S.load_published_files(path)
    path.write_text(json.dumps({"nothing": 1}))
    with pytest.raises(ShardlabError, match="field 'files'"):
        S.load_published_files(path)


PUBLISHED = S.published_stats_path()


@pytest.mark.parametrize("name", POOL_NAMES)
def test_published_file_agrees_with_the_presets_copy(name):
    ref = S.published_reference(name)
    target = published_target(POOLS[name][1])
    assert ref["source"] == str(PUBLISHED)
    assert np.allclose(ref["access_hist"], target["access_hist"], atol=1e-9)
    assert ref["avg_pooling"] == pytest.approx(target["avg_pooling"], rel=1e-6)
    assert ref["others"] and all(o["file"] not in ref["files"] or len(ref["files"]) > 1
                                 for o in ref["others"])


def test_split_filtering_and_subsets():
    pool = load_pool("dlrm-synth")
    train, test = S.select_tables(pool, "train"), S.select_tables(pool, "test")
    assert train == tuple(pool.train_idx) and test == tuple(pool.test_idx)
    assert not set(train) & set(test) and len(train) + len(test) == len(pool)
    assert S.select_tables(pool, "all") == tuple(range(len(pool)))
    sub = S.select_tables(pool, "test", 50, seed=4)
    assert len(sub) == 50 and set(sub) <= set(test) and list(sub) == sorted(sub)
    assert sub == S.select_tables(pool, "test", 50, seed=4)
    assert sub != S.select_tables(pool, "test", 50, seed=5)
    assert S.select_tables(pool, "test", 10_000) == test
    assert set(S.table_features(pool, sub)["split"]) == {"test"}
    rows = {r["split"]: r for r in S.split_summary_rows(pool, S.published_reference(pool.name))}
    assert rows["train"]["tables"] + rows["test"]["tables"] == rows["all"]["tables"] == len(pool)
    assert rows["train"]["total_gb"] + rows["test"]["total_gb"] == pytest.approx(
        rows["all"]["total_gb"], abs=0.02)


@pytest.mark.parametrize("call,field", [
    (lambda: S.load_selection("dlrm-synth-1999"), "pool"),
    (lambda: S.published_reference("criteo"), "pool"),
    (lambda: S.load_selection("dlrm-synth", split="validation"), "split"),
    (lambda: S.load_selection("dlrm-synth", max_tables=-1), "max_tables"),
    (lambda: S.per_table_l1(load_pool("dlrm-synth"), (0,), published_target("dlrm2021"), "rows"),
     "kind"),
    (lambda: S.criteo_tables("criteo_2tb"), "criteo dataset"),
])
def test_bad_inputs_give_one_line_naming_the_field(call, field):
    with pytest.raises(ShardlabError) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg and f"field '{field}'" in msg
    if field == "pool":
        assert all(name in msg for name in POOL_NAMES)


def test_table_features_units():
    pool = load_pool("dlrm-synth-2022")
    idx = S.select_tables(pool, "all", 80, seed=2)
    f = S.table_features(pool, idx)
    t = [pool.tables[i] for i in idx]
    assert np.allclose(f["size_gb"], [x.rows * x.dim * 4 / 2**30 for x in t])
    assert list(f["rows"]) == [x.rows for x in t] and f["name"] == [x.name for x in t]
    ok = ~np.isnan(f["reuse"])
    assert np.all(f["reuse"][ok] >= 1) and np.all((f["touched_frac"] > 0) & (f["touched_frac"] <= 1))
    l1 = S.per_table_l1(pool, idx, S.published_reference(pool.name))
    assert l1.shape == (len(idx),) and np.all((l1[~np.isnan(l1)] >= 0) & (l1[~np.isnan(l1)] <= 2))
    rows = {r["feature"]: r for r in S.feature_summary_rows(f)}
    assert rows["size_gb"]["max"] == pytest.approx(f["size_gb"].max(), rel=1e-3)
    assert rows["rows"]["min"] <= rows["rows"]["median"] <= rows["rows"]["max"]


def test_lookup_concentration_and_bin_differences():
    share = S.lookup_concentration([1, 5, 0, 4])
    assert share.tolist() == pytest.approx([0.5, 0.9, 1.0, 1.0])
    agg = {"access_hist": _onehot(0), "unique_hist": _onehot(1), "avg_pooling": 2.0,
           "unique_fraction": 0.2}
    ref = {"access_hist": _onehot(1), "unique_hist": _onehot(1), "avg_pooling": 1.0,
           "unique_fraction": 0.1}
    d = S.bin_differences(agg, ref)
    assert d["access"][0] == 1 and d["access"][1] == -1 and not d["unique"].any()
    cmp = S.compare_histograms(agg, ref)
    assert cmp == pytest.approx({"l1_access": 2.0, "l1_unique": 0.0, "pooling_rel_err": 1.0,
                                 "unique_fraction_rel_err": 1.0})


def test_criteo_tables_match_their_notes():
    for name in S.CRITEO_DATASETS:
        c = S.criteo_tables(name)
        notes = json.loads((S.datasets_dir() / "criteo" / f"{name}.json").read_text())["notes"]
        total = int(re.search(r"Sum of rows = (\d+)", notes).group(1))
        assert len(c["rows"]) == 26 and int(c["rows"].sum()) == total
        assert np.allclose(c["size_gb"], c["rows"] * c["dim"] * 4 / 2**30)
    rows = S.criteo_summary_rows()
    assert [r["dataset"] for r in rows] == list(S.CRITEO_DATASETS)


def test_summary_is_json_and_consistent():
    pool = load_pool("dlrm-synth")
    idx = S.select_tables(pool, "test", 30, seed=0)
    ref = S.published_reference("dlrm-synth")
    out = json.loads(json.dumps(S.exploration_summary(pool, idx, ref, "test")))
    assert out["tables"] == 30 and out["split"] == "test" and out["pool"] == "dlrm-synth"
    assert out["vs_published"]["l1_access"] == pytest.approx(
        l1_distance(out["aggregate"]["access_hist"], ref["access_hist"]))


def test_comparison_figure_plots_the_numbers():
    pool = load_pool("dlrm-synth")
    idx = S.select_tables(pool, "train")
    ref = S.published_reference("dlrm-synth")
    agg = S.pool_aggregate(pool, idx)
    fig = F.published_comparison_figure(agg, ref, "train")
    bars = [t for t in fig.data if isinstance(t, go.Bar) and t.name == "train"]
    assert [list(b.y) for b in bars] == [agg["access_hist"], agg["unique_hist"]]
    diffs = [t for t in fig.data if isinstance(t, go.Bar) and t.name is None]
    assert np.allclose(diffs[0].y, 100 * (np.array(agg["access_hist"]) - ref["access_hist"]))
    assert f"{S.compare_histograms(agg, ref)['l1_access']:.3f}" in fig.layout.annotations[0].text


def test_table_explorer_static_and_interactive():
    pool = load_pool("dlrm-synth")
    idx = S.select_tables(pool, "test", 12, seed=0)
    ref = S.published_reference("dlrm-synth")
    heaviest = max(idx, key=lambda i: pool.stats[i]["n_lookups"])
    static = F.table_explorer(pool, idx, ref, interactive=False)
    assert type(static) is go.Figure and pool.tables[heaviest].name in static.layout.title.text
    box = F.table_explorer(pool, idx, ref, interactive=True)
    other = min(idx, key=lambda i: pool.stats[i]["n_lookups"])
    box.controls["table"].value = other
    h = S.per_table_histograms(pool, [other])
    assert list(box.figure.data[0].y) == pytest.approx(h["access"][0].tolist())
    assert pool.tables[other].name in box.figure.layout.title.text
