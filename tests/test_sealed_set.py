"""The sealed test sets (datasets/sealed, datasets/sealed_2, studies/sealed_test): every manifest
re-derives from its seed, byte for byte; the second set's tasks are all feasible and six of them
shard 40 to 300 tables on 8 GPUs; the sealed families are apart from the development set and from
everything training sees; the driver refuses a changed family file and writes its records on a
tiny synthetic manifest (never the sealed families, never the repository's results/). Nothing
here plans or measures a sealed task."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from shardlab import constants as C
from shardlab.data import model_families as mf
from shardlab.data.model_families import (FAMILY_SETS, SCALE_FAMILY_SETS, SEALED2_FAMILY_SETS, SEALED_FAMILY_SETS,
                                          family_path, family_set, family_tables)
from shardlab.errors import ShardlabError
from shardlab.io import write_json_atomic
from shardlab.evaluate.sequential import BUDGET_SHARING
from studies.sealed_test import draw, run
from tests.training_tables import key, keys, training_tables

ROOT = Path(__file__).resolve().parents[1]
SEALED = ROOT / "datasets" / "sealed"
SEALED2 = ROOT / "datasets" / "sealed_2"
BS = 256
ALL_SEALED = SEALED_FAMILY_SETS + SEALED2_FAMILY_SETS


# --- the manifests --------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(draw.SETS))
def test_manifest_rederives_byte_for_byte_from_the_seed(name, tmp_path):
    spec = draw.SETS[name]
    path = draw.manifest_path(name)
    assert path == ROOT / "datasets" / spec.folder / "manifest.json"
    drawn = draw.draw_manifest(spec)
    assert json.loads(path.read_text()) == json.loads(json.dumps(drawn)) and drawn["seed"] == spec.seed
    write_json_atomic(tmp_path / "m.json", drawn)                   # as draw.py --write writes it
    assert (tmp_path / "m.json").read_bytes() == path.read_bytes()
    other = draw.draw_manifest(dataclasses.replace(spec, seed=spec.seed + 1))
    assert [t["seed"] for t in other["tasks"]] != [t["seed"] for t in drawn["tasks"]]
    assert draw.main(["--set", name]) == 0


def test_sets_are_declared_once_and_the_newest_is_the_default():
    specs = list(draw.SETS.values())
    assert draw.NEWEST == "2" and draw.manifest_path() == SEALED2 / "manifest.json"
    assert len({s.seed for s in specs}) == len(specs) and len({s.folder for s in specs}) == len(specs)
    assert not set(specs[0].families) & set(specs[1].families)
    assert specs[0].families == SEALED_FAMILY_SETS and specs[1].families == SEALED2_FAMILY_SETS
    with pytest.raises(ShardlabError, match="field 'set'"):
        draw.sealed_set("9")


@pytest.mark.parametrize("name", list(draw.SETS))
def test_manifest_tasks_use_unused_seeds_and_record_the_families(name):
    spec = draw.SETS[name]
    m = draw.load_manifest(draw.manifest_path(name))
    assert [f["name"] for f in m["families"]] == list(spec.families)
    for fam in m["families"]:
        assert fam["file"] == f"datasets/{spec.folder}/{fam['name']}.json"
        assert fam["sha256"] == draw.family_sha256(fam["name"])
        assert hashlib.sha256((ROOT / fam["file"]).read_bytes()).hexdigest() == fam["sha256"]
    seeds = [t["seed"] for t in m["tasks"]]
    assert len(set(seeds)) == len(seeds) == spec.tasks_per_family * len(spec.families) + spec.union_tasks
    assert all(draw.SEED_LOW <= s < draw.SEED_HIGH for s in seeds) and draw.SEED_LOW > 10_000
    for t in m["tasks"]:
        assert (t["mem_cap_gb"], t["batch_size"]) == (draw.MEM_CAP_GB, draw.BATCH_SIZE)
        if t["family"] == draw.UNION:
            assert set(t) == set(draw.TASK_FIELDS) | {"families"} and t["families"] == list(spec.families)
            assert t["ngpu"] == spec.union_ngpu and spec.union_tables[0] <= t["ntables"] <= spec.union_tables[1]
            continue
        total = len(family_set(t["family"])["tables"])
        assert set(t) == set(draw.TASK_FIELDS) and t["ngpu"] in spec.ngpu_choices
        assert min(t["ngpu"] + 1, total) <= t["ntables"] <= total


def test_set_one_entry_builds_a_feasible_task():
    m = draw.load_manifest(draw.manifest_path("1"))
    task = draw.sealed_task(m, m["tasks"][0])
    assert len(task.tables) == m["tasks"][0]["ntables"] and task.ngpu == m["tasks"][0]["ngpu"]


def test_set_two_has_sixteen_feasible_tasks_six_of_them_many_tables_on_8_gpus():
    """Every task is built (tables and lookups, nothing planned or measured) and checked
    feasible at its 4 GB per GPU; union tasks hold every union table once before any copy."""
    m = draw.load_manifest(draw.manifest_path("2"))
    assert m["seed"] != draw.SETS["1"].seed and len(m["tasks"]) == 16
    union_size = sum(f["tables"] for f in m["families"])
    big = 0
    for entry in m["tasks"]:
        task = draw.sealed_task(m, entry)                            # raises InfeasibleError if it does not fit
        assert len(task.tables) == entry["ntables"] and task.ngpu == entry["ngpu"]
        assert task.mem_cap_gb == draw.MEM_CAP_GB and task.batch_size == draw.BATCH_SIZE
        big += entry["ngpu"] == 8 and 40 <= entry["ntables"] <= 300
        if entry["family"] == draw.UNION and entry["ntables"] > union_size:
            copies = [t for t in task.tables if "~c" in t.name]
            assert len(copies) == entry["ntables"] - union_size and task.name.endswith("-augmented")
            assert all(t.source.startswith("augmented: copy") and "sealed set" in t.source for t in copies)
        assert all(t.name.split("__")[0] in SEALED2_FAMILY_SETS for t in task.tables if entry["family"] == draw.UNION)
    assert big >= 6


def test_load_manifest_refuses_a_union_entry_over_unknown_families(tmp_path):
    m = json.loads(draw.manifest_path("2").read_text())
    bad = next(t for t in m["tasks"] if t["family"] == draw.UNION)
    bad["families"] = ["nope"]
    (tmp_path / "m.json").write_text(json.dumps(m))
    with pytest.raises(ShardlabError, match="field 'families'"):
        draw.load_manifest(tmp_path / "m.json")


# --- the families ---------------------------------------------------------------------------

@pytest.mark.parametrize("folder,sets", [(SEALED, SEALED_FAMILY_SETS), (SEALED2, SEALED2_FAMILY_SETS)])
def test_sealed_families_are_apart_from_the_development_set(folder, sets):
    assert not set(sets) & (set(FAMILY_SETS) | set(SCALE_FAMILY_SETS))
    assert sorted(p.stem for p in folder.glob("*.json") if p.stem != "manifest") == sorted(sets)
    earlier = {n for n in ALL_SEALED if n not in sets and ALL_SEALED.index(n) < ALL_SEALED.index(sets[0])}
    dev_families = {family_set(n)["family"] for n in FAMILY_SETS + tuple(earlier)} | {"criteo"}
    if folder == SEALED2:
        dev_families |= {family_set(n)["family"] for n in SCALE_FAMILY_SETS}
    dev_families = {f.lower() for f in dev_families}
    prov = (folder / "PROVENANCE.md").read_text()
    assert "The sealed-set rule" in prov
    for name in sets:
        data = family_set(name)
        assert family_path(name).parent == folder and data["name"] == name and f"`{name}`" in prov
        assert data["family"].lower() not in dev_families and "criteo" not in data["family"]
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
    dr = {t["name"]: t for t in family_set("dressipi_merlin_schema")["tables"]}
    assert (len(dr), dr["session_id"]["rows"], dr["item_id"]["rows"], dr["item_id"]["dim"]) == \
        (22, 920_832, 23_146, 448)
    assert (dr["f_56"]["rows"], dr["f_56"]["dim"], dr["day"]["dim"]) == (69, 20, 52)   # 17 and 51 rounded up
    assert "date" not in dr and "ROUNDED UP" in family_set("dressipi_merlin_schema")["notes"]
    bk = {t["name"]: t for t in family_set("booking_merlin_schema")["tables"]}
    assert (len(bk), bk["city_id"]["rows"], bk["city_id"]["dim"], bk["hotel_country"]["dim"]) == (8, 39_903, 512, 32)
    assert bk["city_id"]["pooling_factor"] == 5 and not bk["city_id"]["fixed_bags"] and bk["device_class"]["fixed_bags"]
    assert "ASSUMED" in family_set("booking_merlin_schema")["notes"]


@pytest.mark.parametrize("name", ALL_SEALED)
def test_no_sealed_table_is_a_development_or_training_table(name):
    """As tests/test_model_families.py checks the development families against training data:
    no sealed table has the (rows, dim, pooling) of a table of the shipped pools or of the
    measured datasets/cpu samples, nor their (rows, pooling) at any dim. Against the development
    families (heldout_models; for the second set also heldout_scale and the first sealed set,
    development data since that set was run) the same two checks cover tables over 64 rows, as
    tests/test_heldout_scale.py does: enumerations (platform, weekday, month, a handful of
    attribute values) have that few values in every dataset, and such a table is the same
    workload whichever dataset it came from; the first set keeps its stricter full-key check."""
    full, loose = keys(training_tables())
    assert len(full) > 800                                           # the pools really were read
    second = name in SEALED2_FAMILY_SETS
    dev = FAMILY_SETS + (SCALE_FAMILY_SETS + SEALED_FAMILY_SETS if second else ())
    dev_full, dev_loose = keys([t for n in dev for t in family_set(n)["tables"]])
    for t in family_set(name)["tables"]:
        k, lk = key(t["rows"], t["dim"], t["pooling_factor"]), key(t["rows"], 0, t["pooling_factor"])
        assert k not in full and lk not in loose, (name, t)
        assert (second and t["rows"] <= 64) or k not in dev_full, (name, t)
        assert t["rows"] <= 64 or lk not in dev_loose, (name, t)


@pytest.mark.parametrize("name", ALL_SEALED)
def test_sealed_tables_load_through_the_importer(name):
    tables = family_tables(name, batch_size=BS)
    assert [(t.name, t.rows, t.dim) for t in tables] == \
        [(r["name"], r["rows"], r["dim"]) for r in family_set(name)["tables"]]
    assert all("sealed set" in t.source and "assumed Zipf(1.05)" in t.source for t in tables)


def test_the_one_command_refuses_bad_arguments_before_anything_runs():
    res = subprocess.run(["bash", str(ROOT / "scripts" / "sealed_test.sh"), "--bogus"], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 2 and "usage: bash scripts/sealed_test.sh [--set NAME] [--profile NAME]" in res.stderr
    with pytest.raises(SystemExit):
        run.main(["--set", "9"])


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
    manifest = draw.draw_manifest(dataclasses.replace(draw.SETS["1"], seed=7, families=("tiny_synth",),
                                                      tasks_per_family=1))
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


def test_a_development_rerun_is_named_and_titled_apart_from_the_sealed_runs(tiny, tmp_path):
    jsonl, md = run.run(tiny, tmp_path, "cpu", methods=("random",), rounds=3, progress=False, prefix="set1")
    assert jsonl.name.startswith("set1-") and json.loads(jsonl.read_text().splitlines()[0])["run"] == jsonl.stem
    assert md.read_text().startswith("# Sealed set tasks again, as development data: run `set1-")
    from studies.set1_development import run as dev
    assert dev.SET == "1" and dev.RESULTS.name == "results" and dev.RESULTS.parent.name == "set1_development"


def test_the_driver_measures_each_task_within_a_budget_and_reports_what_each_verdict_took(tiny, tmp_path):
    name = draw.sealed_task(json.loads(tiny.read_text()), json.loads(tiny.read_text())["tasks"][0]).name
    jsonl, md = run.run(tiny, tmp_path, "cpu", methods=("random", "size_greedy"), rounds=3, progress=False,
                        prefix="set1", budget_s=8.0, references={name: "size_greedy"})
    lines = [json.loads(x) for x in jsonl.read_text().splitlines()]
    s = lines[0]["settings"]
    assert s["budget_s"] == 8.0 and s["sittings"] is None and s["looks"] == run.C.SEQUENTIAL_LOOKS
    assert s["reference"] == "named per task" and s["references"] == {name: "size_greedy"}
    rec = lines[1]
    assert rec["seconds"] > 0 and all(ev["source"].startswith("measured:cpu[") for ev in rec["evaluations"].values())
    ref = rec["evaluations"]["random"]["reference"]
    assert ref == "size_greedy" and rec["evaluations"]["random"]["reference_chosen"] == "named"
    other = rec["evaluations"][({"random", "size_greedy"} - {ref}).pop()]
    assert other["stopped"] and 0.95 - 1e-9 <= other.get("ratio_ci_confidence", 0.95) < 1
    text = md.read_text()
    assert "a time budget of 8 s per task on average" in text and "| verdict | plans | mean sittings |" in text
    assert rec["budget_s"] == 8.0 and s["sharing"] == BUDGET_SHARING     # the first task: its share
    assert f"| {rec['seconds']:.0f} (8) |" in text
    assert f"; {run.took(other)})" in text and run.took(other).endswith(f"{len(other['rounds_ms'])} rounds")
