"""The sealed test set (datasets/sealed, studies/sealed_test): the manifest re-derives from its
seed, the sealed families are apart from the development set and from everything training sees,
and the driver refuses a changed family file and writes its records on a tiny synthetic manifest
(never the sealed families, never the repository's results/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardlab import constants as C
from shardlab.data import model_families as mf
from shardlab.data.model_families import FAMILY_SETS, SEALED_FAMILY_SETS, family_path, family_set, family_tables
from shardlab.errors import ShardlabError
from studies.sealed_test import draw, run
from tests.training_tables import key, keys, training_tables

ROOT = Path(__file__).resolve().parents[1]
SEALED = ROOT / "datasets" / "sealed"
BS = 256


# --- the manifest ---------------------------------------------------------------------------

def test_manifest_rederives_exactly_from_the_seed():
    stored = json.loads((SEALED / "manifest.json").read_text())
    drawn = json.loads(json.dumps(draw.draw_manifest()))
    assert stored == drawn
    assert draw.draw_manifest() == draw.draw_manifest()            # same seed, same manifest
    assert stored["seed"] == draw.SEALED_SEED
    other = draw.draw_manifest(seed=draw.SEALED_SEED + 1)
    assert [t["seed"] for t in other["tasks"]] != [t["seed"] for t in stored["tasks"]]


def test_manifest_tasks_use_unused_seeds_and_record_the_families():
    m = draw.load_manifest()
    assert [f["name"] for f in m["families"]] == list(SEALED_FAMILY_SETS)
    for fam in m["families"]:
        assert fam["sha256"] == draw.family_sha256(fam["name"]) and fam["file"] == f"datasets/sealed/{fam['name']}.json"
    seeds = [t["seed"] for t in m["tasks"]]
    assert len(set(seeds)) == len(seeds) == draw.TASKS_PER_FAMILY * len(SEALED_FAMILY_SETS)
    assert all(draw.SEED_LOW <= s < draw.SEED_HIGH for s in seeds) and draw.SEED_LOW > 10_000
    for t in m["tasks"]:
        total = len(family_set(t["family"])["tables"])
        assert set(t) == set(draw.TASK_FIELDS) and t["ngpu"] in draw.NGPU_CHOICES
        assert min(t["ngpu"] + 1, total) <= t["ntables"] <= total
        assert (t["mem_cap_gb"], t["batch_size"]) == (draw.MEM_CAP_GB, draw.BATCH_SIZE)
    task = draw.sealed_task(m, m["tasks"][0])                       # the entry builds a feasible task
    assert len(task.tables) == m["tasks"][0]["ntables"] and task.ngpu == m["tasks"][0]["ngpu"]


# --- the families ---------------------------------------------------------------------------

def test_sealed_families_are_apart_from_the_development_set():
    assert not set(SEALED_FAMILY_SETS) & set(FAMILY_SETS)
    assert sorted(p.stem for p in SEALED.glob("*.json") if p.stem != "manifest") == sorted(SEALED_FAMILY_SETS)
    assert not any((ROOT / "datasets" / "heldout_models" / f"{n}.json").exists() for n in SEALED_FAMILY_SETS)
    dev_families = {family_set(n)["family"] for n in FAMILY_SETS} | {"criteo"}
    prov = (SEALED / "PROVENANCE.md").read_text()
    assert "The sealed-set rule" in prov
    for name in SEALED_FAMILY_SETS:
        data = family_set(name)
        assert family_path(name).parent == SEALED and data["name"] == name and f"`{name}`" in prov
        assert data["family"] not in dev_families and "criteo" not in data["family"]
        assert any(len(w.split("@")[-1].split()[0]) >= 40 for w in data["source"].split() if "@" in w)
        names = [t["name"] for t in data["tables"]]
        assert len(names) >= 5 and len(set(names)) == len(names)
        for t in data["tables"]:
            assert set(t) - {"fixed_bags"} == {"name", "rows", "dim", "pooling_factor"}, t
            assert isinstance(t["rows"], int) and t["rows"] >= 1 and t["dim"] % C.DIM_MULTIPLE == 0
            assert t["pooling_factor"] > 0
        for c in data["capped"]:
            assert c["rows"] == next(t["rows"] for t in data["tables"] if t["name"] == c["name"])


def test_published_numbers_spot_checks():
    ob = {t["name"]: t for t in family_set("outbrain_nvidia_widedeep")["tables"]}
    assert (len(ob), ob["doc_event_id"]["rows"], ob["ad_id"]["rows"], ob["event_platform"]["dim"]) == \
        (13, 300_000, 250_000, 16)
    ali = {t["name"]: t for t in family_set("aliccp_tzrec_mmoe")["tables"]}
    assert (len(ali), ali["item_id"]["rows"], ali["user_uid"]["rows"], ali["item_cateid"]["dim"]) == \
        (23, 15_843_340, 1_474_415, 12)
    assert ali["user_shop"]["pooling_factor"] == 10 and "ASSUMED" in family_set("aliccp_tzrec_mmoe")["notes"]


def test_no_sealed_table_is_a_development_or_training_table():
    """As tests/test_model_families.py checks the development families against training data:
    no sealed table has the (rows, dim, pooling) of a table of the shipped pools, of the
    measured datasets/cpu samples or of a development family; nor the (rows, pooling) at any
    dim of a pool or sample table. Against the development families the any-dim check covers
    tables over 64 rows: enumerations (platform, gender, age band) have a handful of values in
    every dataset, and such a table is the same workload whichever dataset it came from."""
    full, loose = keys(training_tables())
    assert len(full) > 800                                           # the pools really were read
    dev_full, dev_loose = keys([t for n in FAMILY_SETS for t in family_set(n)["tables"]])
    for name in SEALED_FAMILY_SETS:
        for t in family_set(name)["tables"]:
            k, lk = key(t["rows"], t["dim"], t["pooling_factor"]), key(t["rows"], 0, t["pooling_factor"])
            assert k not in full and lk not in loose, (name, t)
            assert k not in dev_full, (name, t)
            assert t["rows"] <= 64 or lk not in dev_loose, (name, t)


@pytest.mark.parametrize("name", SEALED_FAMILY_SETS)
def test_sealed_tables_load_through_the_importer(name):
    tables = family_tables(name, batch_size=BS)
    assert [(t.name, t.rows, t.dim) for t in tables] == \
        [(r["name"], r["rows"], r["dim"]) for r in family_set(name)["tables"]]
    assert all("sealed set" in t.source and "assumed Zipf(1.05)" in t.source for t in tables)


# --- the driver -----------------------------------------------------------------------------

TINY = {"name": "tiny_synth", "family": "synthetic", "source": "made up for a test", "notes": "synthetic",
        "capped": [], "tables": [{"name": f"s{i}", "rows": 500 * (i + 1), "dim": 8 * (i + 1), "pooling_factor": 2,
                                  "fixed_bags": True} for i in range(4)]}


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A synthetic sealed family under tmp_path/sealed/ and a one-task manifest over it."""
    (tmp_path / "sealed").mkdir()
    (tmp_path / "sealed" / "tiny_synth.json").write_text(json.dumps(TINY))
    monkeypatch.setattr(mf, "SEALED_FAMILY_SETS", ("tiny_synth",))
    monkeypatch.setattr(mf, "datasets_dir", lambda: tmp_path)
    manifest = draw.draw_manifest(seed=7, families=("tiny_synth",), tasks_per_family=1)
    manifest["tasks"][0].update(ngpu=2, ntables=3, mem_cap_gb=1.0, batch_size=BS)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path


def test_driver_refuses_a_changed_family_file(tiny, tmp_path, capsys):
    changed = dict(TINY, tables=[dict(TINY["tables"][0], rows=501)] + TINY["tables"][1:])
    (tmp_path / "sealed" / "tiny_synth.json").write_text(json.dumps(changed))
    out = tmp_path / "results"
    assert run.main(["--manifest", str(tiny), "--out", str(out), "--profile", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "sealed family 'tiny_synth': field 'sha256'" in err and "changed after the draw" in err
    assert not out.exists()                                          # refused before anything ran
    with pytest.raises(ShardlabError, match="field 'family'"):
        bad = json.loads(tiny.read_text())
        bad["tasks"][0]["family"] = "nope"
        tiny.write_text(json.dumps(bad))
        draw.load_manifest(tiny)


def test_driver_writes_its_records_on_a_tiny_manifest(tiny, tmp_path):
    repo_results = sorted(p.name for p in run.RESULTS.iterdir())
    out = tmp_path / "results"
    jsonl, md = run.run(tiny, out, "cpu", methods=("random", "size_greedy"), rounds=3, progress=False)
    assert jsonl.parent == out and jsonl.name.startswith("sealed-") and md == jsonl.with_suffix(".md")
    lines = [json.loads(x) for x in jsonl.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["header", "task"]
    assert lines[0]["settings"]["rounds"] == 3 and lines[0]["profile"]["name"] == "cpu"
    rec = lines[1]
    assert rec["entry"]["seed"] == json.loads(tiny.read_text())["tasks"][0]["seed"] and not rec["skipped"]
    assert set(rec["evaluations"]) == {"random", "size_greedy"} and len(rec["task"]["tables"]) == 3
    for ev in rec["evaluations"].values():
        assert ev["reference"] in ("random", "size_greedy") and ev["source"].startswith("measured:cpu")
        assert len(ev["rounds_ms"]) >= 3
    ref = rec["evaluations"]["random"]["reference"]
    other = ({"random", "size_greedy"} - {ref}).pop()
    counts = run.counts([rec], ["random", "size_greedy"])
    assert counts[ref]["reference"] == 1 and sum(counts[other][v] for v in ("faster", "equivalent", "slower",
                                                                              "inconclusive")) == 1
    text = md.read_text()
    assert "| `random` |" in text and "| `size_greedy` |" in text and "1 of 1 tasks done" in text
    assert sorted(p.name for p in run.RESULTS.iterdir()) == repo_results  # the repository's results/ untouched
