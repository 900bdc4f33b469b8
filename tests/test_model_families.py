"""Held-out model families (datasets/heldout_models, shardlab.data.model_families): every set
loads and cites its source, tasks are seeded and validated, and no table of these sets is a
table of the training pools or of the measured CPU samples."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from shardlab import constants as C
from shardlab.data.importers import load_table_list
from shardlab.data.model_families import (FAMILY_SETS, capped_tables, family_path, family_set,
                                          family_tables, family_task)
from shardlab.data.tasks import list_pools, load_pool
from shardlab.errors import InfeasibleError, ShardlabError

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "datasets" / "heldout_models"
BS = 256  # small batch: the assumed-Zipf bins are measured on one batch per table


def _key(rows, dim, pooling):
    return int(rows), int(dim), round(float(pooling), 4)


def test_every_set_is_shipped_and_listed():
    on_disk = sorted(p.stem for p in HELDOUT.glob("*.json"))
    assert on_disk == sorted(FAMILY_SETS)
    assert len(FAMILY_SETS) >= 3
    prov = (HELDOUT / "PROVENANCE.md").read_text()
    assert "held out" in prov.lower()
    for name in FAMILY_SETS:
        assert f"`{name}`" in prov, name


@pytest.mark.parametrize("name", FAMILY_SETS)
def test_set_fields_and_sources(name):
    data = family_set(name)
    assert data["name"] == name and family_path(name).name == f"{name}.json"
    assert data["family"] and data["notes"]
    # cites a repository at a commit (owner/repo@40-hex path)
    assert "@" in data["source"] and any(len(w.split("@")[-1].split()[0]) >= 40
                                         for w in data["source"].split() if "@" in w)
    tables = data["tables"]
    assert len(tables) >= 5
    names = [t["name"] for t in tables]
    assert len(set(names)) == len(names)
    for t in tables:
        assert set(t) - {"fixed_bags"} == {"name", "rows", "dim", "pooling_factor"}, t
        assert t.get("fixed_bags", False) in (True, False)
        assert isinstance(t["rows"], int) and not isinstance(t["rows"], bool) and t["rows"] >= 1
        assert isinstance(t["dim"], int) and t["dim"] > 0 and t["dim"] % C.DIM_MULTIPLE == 0
        assert isinstance(t["pooling_factor"], (int, float)) and t["pooling_factor"] > 0
    for c in data["capped"]:
        assert c["name"] in names and c["rows"] == next(t["rows"] for t in tables if t["name"] == c["name"])


def test_sets_span_families_beyond_criteo_one_hot():
    fams = {family_set(n)["family"] for n in FAMILY_SETS}
    assert len(fams) == len(FAMILY_SETS)
    other = [n for n in FAMILY_SETS
             if "criteo" not in family_set(n)["family"]
             or any(t["pooling_factor"] != 1 for t in family_set(n)["tables"])]
    assert len(other) >= 3
    assert any(t["pooling_factor"] > 1 for n in FAMILY_SETS for t in family_set(n)["tables"])


def test_published_numbers_spot_checks():
    """A few numbers exactly as the cited configs give them."""
    ml = {t["name"]: t for t in family_set("mlperf_dlrm_dcnv2_multihot")["tables"]}
    assert sum(t["pooling_factor"] for t in ml.values()) == 214  # sum of --multi_hot_sizes
    assert (ml["C21"]["pooling_factor"], ml["C1"]["rows"], ml["C11"]["rows"]) == (100, 40_000_000, 3_067_956)
    assert {c["name"] for c in family_set("mlperf_dlrm_dcnv2_multihot")["capped"]} == \
        {"C1", "C10", "C20", "C21", "C22"}
    av = {t["name"]: t["rows"] for t in family_set("avazu_fec_dlrm")["tables"]}
    assert (av["device_ip"], av["device_id"], len(av)) == (6_729_486, 2_686_408, 21)
    tb = {t["name"]: t for t in family_set("taobao_tzrec_din")["tables"]}
    assert (tb["user_id"]["rows"], tb["price"]["rows"], tb["click_50_seq__brand"]["pooling_factor"]) == \
        (1_141_730, 99, 50)
    bst = {t["name"]: t for t in family_set("amazon_electronics_hugectr_bst")["tables"]}
    assert (bst["UserID"]["dim"], bst["GoodID_hist"]["pooling_factor"]) == (20, 10)
    assert "ROUNDED UP to 20" in family_set("amazon_electronics_hugectr_bst")["notes"]


@pytest.mark.parametrize("name", FAMILY_SETS)
def test_family_tables_through_importer(name):
    data = family_set(name)
    tables = family_tables(name, batch_size=BS)
    assert [(t.name, t.rows, t.dim, t.pooling_factor) for t in tables] == \
        [(r["name"], r["rows"], r["dim"], float(r["pooling_factor"])) for r in data["tables"]]
    for t in tables:
        assert abs(sum(t.reuse_bins) - 1) < 1e-3
        assert "assumed Zipf(1.05)" in t.source and name in t.source and "capped" not in t.source
    # the same file through the generic importer (the `shardlab tasks --tables` path)
    again = load_table_list(family_path(name), batch_size=BS, assume_zipf=1.05)
    assert [(t.rows, t.dim, t.pooling_factor, t.reuse_bins) for t in again] == \
        [(t.rows, t.dim, t.pooling_factor, t.reuse_bins) for t in tables]
    with pytest.raises(ShardlabError, match="reuse_bins' is missing"):
        load_table_list(family_path(name), batch_size=BS)


def test_unknown_set_is_one_line_error():
    with pytest.raises(ShardlabError, match="unknown held-out model family set 'criteo_nope'") as e:
        family_set("criteo_nope")
    assert "\n" not in str(e.value)
    with pytest.raises(ShardlabError, match="'nope'"):
        family_tables("nope", batch_size=BS)


def test_max_rows_caps_explicitly():
    name = "mlperf_dlrm_dcnv2_multihot"
    assert capped_tables(name, None) == []
    capped = capped_tables(name, 1_000_000)
    assert {c["name"] for c in capped} == {"C1", "C10", "C11", "C20", "C21", "C22"}
    tables = {t.name: t for t in family_tables(name, batch_size=BS, max_rows=1_000_000)}
    for c in capped:
        t = tables[c["name"]]
        assert t.rows == 1_000_000 and f"rows capped from {c['rows']} to 1000000" in t.source
    assert tables["C12"].rows == 405282 and "capped" not in tables["C12"].source
    with pytest.raises(ShardlabError, match="max_rows"):
        family_tables(name, batch_size=BS, max_rows=0)


def test_family_task_seeded_and_validated():
    a = family_task("taobao_tzrec_din", 4, 2.0, BS, ntables=7, seed=3)
    b = family_task("taobao_tzrec_din", 4, 2.0, BS, ntables=7, seed=3)
    assert a == b and len(a.tables) == 7 and a.batch_size == BS
    order = [t["name"] for t in family_set("taobao_tzrec_din")["tables"]]
    assert [t.name for t in a.tables] == sorted((t.name for t in a.tables), key=order.index)
    others = {tuple(t.name for t in family_task("taobao_tzrec_din", 4, 2.0, BS, ntables=7, seed=s).tables)
              for s in range(4, 10)}
    assert len(others | {tuple(t.name for t in a.tables)}) > 1
    full = family_task("amazon_electronics_hugectr_bst", 2, 1.0, BS)
    bst = family_set("amazon_electronics_hugectr_bst")["tables"]
    assert [t.name for t in full.tables] == [t["name"] for t in bst]
    with pytest.raises(InfeasibleError, match="table 'C1' does not fit"):
        family_task("mlperf_dlrm_dcnv2_multihot", 8, 4.0, BS)
    capped = family_task("mlperf_dlrm_dcnv2_multihot", 8, 4.0, BS, max_rows=4_000_000)
    assert max(t.rows for t in capped.tables) == 4_000_000 and "max4000000" in capped.name
    with pytest.raises(ShardlabError, match="'ntables' = 22"):
        family_task("avazu_fec_dlrm", 4, 4.0, BS, ntables=22)


def _training_keys():
    """(rows, dim, pooling) and (rows, pooling) of every table a training step can see: the
    shipped pools (all splits) and the tables of the measured CPU samples."""
    full, loose = set(), set()
    for pool in list_pools():
        for t in load_pool(pool).tables:
            full.add(_key(t.rows, t.dim, t.pooling_factor))
            loose.add(_key(t.rows, 0, t.pooling_factor))
    with gzip.open(ROOT / "datasets" / "cpu" / "compute.jsonl.gz", "rt") as f:
        for line in f:
            for t in json.loads(line)["tables"]:
                full.add(_key(t["rows"], t["dim"], t["pooling_factor"]))
                loose.add(_key(t["rows"], 0, t["pooling_factor"]))
    return full, loose


def test_heldout_tables_never_in_training_data():
    full, loose = _training_keys()
    assert len(full) > 800  # the pools really were read
    for name in FAMILY_SETS:
        for t in family_set(name)["tables"]:
            assert _key(t["rows"], t["dim"], t["pooling_factor"]) not in full, (name, t)
            # stricter: not even the same rows and pooling at another dim
            assert _key(t["rows"], 0, t["pooling_factor"]) not in loose, (name, t)


def test_fixed_bags_are_replayed_exactly():
    """One-hot tables get exactly one id per bag, MLPerf's multi-hot tables exactly their size,
    and Taobao's click sequences (assumed mean 50) variable lengths."""
    import numpy as np

    from shardlab.data.generator import generate_lookups

    mlperf = {t.name: t for t in family_tables("mlperf_dlrm_dcnv2_multihot", batch_size=256, max_rows=10_000)}
    for t in mlperf.values():
        lengths = np.diff(generate_lookups(t, 256)[1])
        assert (lengths == round(t.pooling_factor)).all() and "every bag exactly" in t.source
    taobao = family_tables("taobao_tzrec_din", batch_size=256, max_rows=10_000)
    seq = [t for t in taobao if t.pooling_factor == 50]
    assert seq and all(np.diff(generate_lookups(t, 256)[1]).std() > 0 for t in seq)
    assert all((np.diff(generate_lookups(t, 256)[1]) == 1).all() for t in taobao if t.pooling_factor == 1)
