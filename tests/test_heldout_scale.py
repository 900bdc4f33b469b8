"""Held-out-at-scale families (datasets/heldout_scale, union_task, studies/heldout_scale): the sets
load and cite their sources, stay apart from training data and from the development and sealed
families, and union tasks of 100 to 500 tables are seeded, named and labelled (copies say so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardlab import constants as C
from shardlab.data.model_families import (FAMILY_SETS, SCALE_FAMILY_SETS, SEALED_FAMILY_SETS, family_path,
                                          family_set, family_tables, union_task)
from shardlab.errors import ShardlabError
from tests.training_tables import key, keys, training_tables

ROOT = Path(__file__).resolve().parents[1]
SCALE = ROOT / "datasets" / "heldout_scale"
BS = 256  # small batch: the assumed-Zipf bins are measured on one batch per table


def test_every_scale_set_is_shipped_listed_and_apart():
    assert sorted(p.stem for p in SCALE.glob("*.json")) == sorted(SCALE_FAMILY_SETS)
    assert not set(SCALE_FAMILY_SETS) & (set(FAMILY_SETS) | set(SEALED_FAMILY_SETS))
    prov = (SCALE / "PROVENANCE.md").read_text()
    assert "held out" in prov.lower() and "Considered and left out" in prov
    for name in SCALE_FAMILY_SETS:
        assert f"`{name}`" in prov, name
    families = [family_set(n)["family"].lower() for n in SCALE_FAMILY_SETS]
    others = {family_set(n)["family"].lower() for n in FAMILY_SETS + SEALED_FAMILY_SETS}
    assert len(set(families)) == len(families) and not set(families) & others
    assert sum(len(family_set(n)["tables"]) for n in SCALE_FAMILY_SETS) == 115


@pytest.mark.parametrize("name", SCALE_FAMILY_SETS)
def test_scale_set_fields_and_sources(name):
    data = family_set(name)
    assert data["name"] == name and family_path(name) == SCALE / f"{name}.json"
    # cites a repository at a commit (owner/repo@40-hex path)
    assert any(len(w.split("@")[-1].split()[0]) >= 40 for w in data["source"].split() if "@" in w)
    names = [t["name"] for t in data["tables"]]
    assert len(set(names)) == len(names) >= 3
    for t in data["tables"]:
        assert set(t) == {"name", "rows", "dim", "pooling_factor", "fixed_bags"}, t
        assert isinstance(t["rows"], int) and t["rows"] >= 1 and t["dim"] % C.DIM_MULTIPLE == 0
        assert t["pooling_factor"] >= 1 and t["fixed_bags"] in (True, False)
        assert not t["fixed_bags"] or t["pooling_factor"] == int(t["pooling_factor"])
    for c in data["capped"]:
        assert c["name"] in names and c["by"].startswith("source:")


def test_published_numbers_spot_checks():
    """A few numbers read again from the cited files (PROVENANCE.md quotes them)."""
    census = {t["name"]: t for t in family_set("census_hugectr_mmoe")["tables"]}
    assert [t["rows"] for t in family_set("census_hugectr_mmoe")["tables"]][:4] == [91, 73622, 17, 1425]
    assert census["state"]["rows"] == 51 and {t["dim"] for t in census.values()} == {16}
    tencent = {t["name"]: t for t in family_set("tencent_lookalike_paddlerec_metaheac")["tables"]}
    assert tencent["LBS"]["rows"] == 856 and tencent["kw1"]["rows"] == 263313       # max_idx + 1
    assert tencent["interest1"]["pooling_factor"] == 10 and not tencent["interest1"]["fixed_bags"]
    ipinyou = family_set("ipinyou_pnn")["tables"]
    assert sum(t["rows"] for t in ipinyou) == 937670 and "ASSUMED" in family_set("ipinyou_pnn")["notes"]
    frappe = family_set("frappe_bars")
    assert {t["dim"] for t in frappe["tables"]} == {12} and "round" in frappe["notes"].lower()


def test_no_scale_table_is_a_training_development_or_sealed_table():
    """As the sealed families are checked: no table has the (rows, dim, pooling) of a pool table,
    a measured datasets/cpu sample, a development or a sealed family's table; nor the (rows,
    pooling) at any dim of a pool or sample table. Against the other families both checks cover
    tables over 64 rows: enumerations (gender, race, weekday, region) have a handful of values in
    every dataset, and eleven one-hot Census enumerations of 3 to 10 rows at dim 16 are the same
    workload as a Taobao or Ali-CCP enumeration of that size."""
    full, loose = keys(training_tables())
    assert len(full) > 800                                           # the pools really were read
    other_full, other_loose = keys([t for n in FAMILY_SETS + SEALED_FAMILY_SETS for t in family_set(n)["tables"]])
    for name in SCALE_FAMILY_SETS:
        for t in family_set(name)["tables"]:
            k, lk = key(t["rows"], t["dim"], t["pooling_factor"]), key(t["rows"], 0, t["pooling_factor"])
            assert k not in full and lk not in loose, (name, t)
            assert t["rows"] <= 64 or (k not in other_full and lk not in other_loose), (name, t)


def test_scale_tables_load_through_the_importer():
    tables = family_tables("xianyu_search_easyrec_rtp", batch_size=BS)
    assert [(t.name, t.rows, t.pooling_factor) for t in tables] == \
        [(r["name"], r["rows"], r["pooling_factor"]) for r in family_set("xianyu_search_easyrec_rtp")["tables"]]
    assert all("held-out-at-scale set" in t.source and "assumed Zipf(1.05)" in t.source for t in tables)


def test_union_task_samples_the_union_seeded():
    union = [f"{n}__{t['name']}" for n in SCALE_FAMILY_SETS for t in family_set(n)["tables"]]
    a = union_task(SCALE_FAMILY_SETS, 8, 4.0, 100, batch_size=BS, seed=7)
    assert a == union_task(SCALE_FAMILY_SETS, 8, 4.0, 100, batch_size=BS, seed=7)
    names = [t.name for t in a.tables]
    assert len(set(names)) == 100 and set(names) <= set(union)
    assert names == sorted(names, key=union.index)                   # set and file order kept
    assert names != [t.name for t in union_task(SCALE_FAMILY_SETS, 8, 4.0, 100, batch_size=BS, seed=8).tables]
    assert a.name == "union7-100x8-seed7" and a.ngpu == 8 and not any("augmented" in t.source for t in a.tables)
    whole = union_task(SCALE_FAMILY_SETS, 8, 4.0, 115, batch_size=BS, seed=7)
    assert [t.name for t in whole.tables] == union


def test_union_task_beyond_the_union_adds_labelled_copies():
    task = union_task(SCALE_FAMILY_SETS, 8, 4.0, 300, batch_size=BS, seed=3)
    assert len(task.tables) == 300 and task.name.endswith("-augmented")
    names = [t.name for t in task.tables]
    assert len(set(names)) == 300
    originals = {t.name: t for t in task.tables[:115]}
    copies = task.tables[115:]
    assert all(t.source.startswith("augmented: copy ") and "~c" in t.name for t in copies)
    for c in copies:
        base = originals[c.name.split("~c")[0]]
        assert (c.rows, c.dim, c.pooling_factor) == (base.rows, base.dim, base.pooling_factor)
    assert not any(t.source.startswith("augmented") for t in originals.values())


def test_union_task_errors_name_the_field():
    with pytest.raises(ShardlabError, match="'ntables'"):
        union_task(SCALE_FAMILY_SETS, 8, 4.0, 0, batch_size=BS)
    with pytest.raises(ShardlabError, match="'names'"):
        union_task((), 8, 4.0, 10, batch_size=BS)
    with pytest.raises(ShardlabError, match="unknown held-out model family set 'nope'"):
        union_task(("nope",), 8, 4.0, 10, batch_size=BS)


def test_the_report_judges_every_option_variant_against_its_method_at_defaults():
    from studies.common.records import read_run
    from studies.heldout_scale.run import report, variant_pairs

    assert variant_pairs(["lookup_greedy", "dreamshard", "dreamshard[model=a.pt]", "autoshard[model=b.pt]",
                          "neuroshard", "neuroshard[greedy_rule=before]"]) == [
        ("dreamshard[model=a.pt]", "dreamshard"), ("neuroshard[greedy_rule=before]", "neuroshard")]
    # a stored run with the greedy-rule pair: the pair's row counts its verdicts, per task a column
    header, records = read_run(ROOT / "studies" / "heldout_scale" / "results" / "scale-20261128T101908Z.jsonl.gz")
    md = report(header, records)
    assert "| `neuroshard[greedy_rule=before]` vs `neuroshard` | 0 | 1 | 2 | 2 | 0 | - |" in md
    assert "| `neuroshard[greedy_rule=before]` / `neuroshard` [95%], verdict |" in md


def test_a_budgeted_runs_report_gives_what_each_verdict_took_and_judges_no_variant_pair():
    import copy

    from studies.common.records import read_run, took
    from studies.heldout_scale.run import report

    header, records = read_run(ROOT / "studies" / "heldout_scale" / "results" / "scale-20261128T101908Z.jsonl.gz")
    header = copy.deepcopy(header)
    header["settings"].update(budget_s=600.0, sittings=None)
    md = report(header, records)
    assert "a time budget of 600 s per task" in md and "vs `neuroshard` |" not in md
    ev = records[0]["evaluations"]["neuroshard"]
    assert f"({took(ev)})" in md and took(ev) == f"2 sittings, {len(ev['rounds_ms'])} rounds"
