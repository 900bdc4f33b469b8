"""Analytic hardware profiles: GPUs nobody here can measure (A100, B200, GB200 NVL72, MI300X), each
a folder of cited facts whose cost model ``shardlab hardware derive`` writes from a measured
profile's fit; every label says nothing was measured, and a broken fact is one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from shardlab.cli import main
from shardlab.costmodel.bundle import load_bundle, plain_model
from shardlab.data.hardware_profiles import FACTS, FILE, USER_DIR_ENV, known_profiles, read_profile_folder
from shardlab.data.tasks import datasets_dir
from shardlab.errors import ShardlabError
from shardlab.search.registry import run_sharder, sharder_for
from shardlab.workflows.hardware_derive import derive_profile

ANALYTIC = ("a100", "b200", "gb200-nvl72", "mi300x")


@pytest.mark.parametrize("name", ANALYTIC)
def test_each_analytic_profile_says_nothing_was_measured_and_cites_every_figure(name):
    prof = known_profiles()[name]
    assert prof.derived and not known_profiles()[prof.derive_from].derived
    assert "ANALYTIC" in prof.about and set(prof.facts) >= {"hbm_gb", "hbm_tbps", "gpus_per_domain", "intra_gbps"}
    assert all(prof.sources[f"facts.{k}"] for k in prof.facts)
    bundle = load_bundle(prof.search_model, name)
    assert bundle.source.startswith(f"analytic:{name}[") and "nothing measured on it" in bundle.source
    comm = bundle.comm_for(16)[1]
    assert comm.startswith(f"+comm:analytic:{name}[hosts of {prof.facts['gpus_per_domain']};")
    assert "(given)" not in comm                       # every bandwidth carries where it comes from
    assert bundle.provenance["kind"] == "derived" and bundle.provenance["data"].startswith("none")


def analytic_copy(tmp_path, like="b200", name="mygpu", **facts):
    """A user's analytic profile: ``like``'s hardware.json renamed, without models, facts changed."""
    folder = tmp_path / "profiles" / name
    folder.mkdir(parents=True)
    data = json.loads((datasets_dir() / like / FILE).read_text())
    data.update(name=name, search_model=None)
    data["facts"] = {**data["facts"], **facts}
    (folder / FILE).write_text(json.dumps(data))
    return folder


def test_derive_scales_the_fits_byte_terms_by_hbm_bandwidth_and_the_profile_plans(tmp_path, monkeypatch, small_task):
    folder = analytic_copy(tmp_path, hbm_tbps=6.7)
    monkeypatch.setenv(USER_DIR_ENV, str(folder.parent))
    assert main(["hardware", "derive", "mygpu"]) == 0
    assert read_profile_folder(folder).search_model == "analytic"
    base = plain_model(load_bundle("analytic", "h100").compute)
    mine = plain_model(load_bundle("analytic", "mygpu").compute)
    ratio = 3.35 / 6.7
    np.testing.assert_allclose(mine.coef_fw_, base.coef_fw_ * [1, 1, ratio])
    np.testing.assert_allclose(mine.coef_bw_, base.coef_bw_ * [1, 1, ratio, ratio])
    shard = [small_task.tables[:3]]
    assert (mine.predict(shard) < base.predict(shard)).all()   # the same op on faster memory
    plan = run_sharder(sharder_for("neuroshard", "mygpu"), small_task, 0)
    assert {p.table for p in plan.placements} == {t.name for t in small_task.tables}


@pytest.mark.parametrize("facts, words", [
    ({"hbm_tbps": float("nan")}, "field 'facts.hbm_tbps'"),
    ({"intra_gbps": 0}, "field 'facts.intra_gbps'"),
    ({"gpus_per_domain": 2.5}, "field 'facts.gpus_per_domain'"),
    ({"colour": "red"}, "field 'facts.colour' is unknown"),
])
def test_a_broken_fact_is_one_line_naming_it_and_writes_nothing(tmp_path, monkeypatch, facts, words):
    folder = analytic_copy(tmp_path, **facts)
    monkeypatch.setenv(USER_DIR_ENV, str(folder.parent))
    with pytest.raises(ShardlabError, match=words) as e:
        derive_profile("mygpu")
    assert "\n" not in str(e.value) and not (folder / "models").exists()


def test_a_fact_without_its_source_and_a_derivation_without_its_facts_are_refused(tmp_path, monkeypatch):
    folder = analytic_copy(tmp_path)
    data = json.loads((folder / FILE).read_text())
    del data["sources"]["facts.hbm_gb"]
    (folder / FILE).write_text(json.dumps(data))
    with pytest.raises(ShardlabError, match="field 'sources.facts.hbm_gb' is missing"):
        read_profile_folder(folder)
    data["sources"]["facts.hbm_gb"] = "a datasheet"
    del data["facts"]["hbm_tbps"]
    (folder / FILE).write_text(json.dumps(data))
    monkeypatch.setenv(USER_DIR_ENV, str(folder.parent))
    with pytest.raises(ShardlabError, match="field 'facts.hbm_tbps' is missing"):
        derive_profile("mygpu")
    assert not (folder / "models").exists()


def test_a_measured_profile_is_not_derived_and_every_fact_is_a_known_one():
    with pytest.raises(ShardlabError, match="field 'derive_from' is unset"):
        derive_profile("h100")
    for prof in known_profiles().values():
        assert set(prof.facts) <= set(FACTS)


def test_the_shipped_derivations_are_what_derive_writes(tmp_path, monkeypatch):
    for name in ANALYTIC:
        folder = tmp_path / "profiles" / f"{name}-again"
        shutil.copytree(datasets_dir() / name, folder, ignore=shutil.ignore_patterns("models"))
        data = json.loads((folder / FILE).read_text())
        (folder / FILE).write_text(json.dumps({**data, "name": folder.name, "search_model": None}))
    monkeypatch.setenv(USER_DIR_ENV, str(tmp_path / "profiles"))
    for name in ANALYTIC:
        derive_profile(f"{name}-again")
        again, shipped = load_bundle("analytic", f"{name}-again"), load_bundle("analytic", name)
        np.testing.assert_array_equal(plain_model(again.compute).coef_bw_, plain_model(shipped.compute).coef_bw_)
        assert again.comm.source.replace(f"{name}-again", name) == shipped.comm.source


def test_compare_hardware_plans_for_each_profile_and_says_what_each_rests_on(tmp_path, small_task, capsys):
    from shardlab.io import save_task
    from shardlab.plan import Plan, validate_plan

    save_task(small_task, tmp_path / "task.json")
    out = tmp_path / "cmp.json"
    assert main(["compare-hardware", str(tmp_path / "task.json"), "--profiles", "cpu,b200,mi300x",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "b200: analytic, derived from public figures and h100's fit: nothing measured on it" in text
    assert "cpu: analytic, fitted to measured dataset:cpu" in text
    rows = json.loads(out.read_text())
    assert [r["profile"] for r in rows] == ["cpu", "b200", "mi300x"]
    for r in rows:
        validate_plan(small_task, Plan.from_dict(r["plan"]))
        assert r["source"].startswith(f"analytic:{r['profile']}[") and r["cost_ms"] > 0
    b200, mi300x = rows[1], rows[2]
    assert "nothing measured" in b200["source"] and b200["compute_ms"] < mi300x["compute_ms"]   # 8 vs 5.3 TB/s


def test_compare_hardware_under_each_gpus_memory_and_its_refusals(tmp_path, monkeypatch, small_task):
    from dataclasses import replace as with_

    from shardlab.workflows.compare_hardware import compare_hardware

    tight = with_(small_task, mem_cap_gb=0.001)
    rows = compare_hardware(small_task, ["mi300x", "a100"], memory="profile")
    assert [r["mem_cap_gb"] for r in rows] == [pytest.approx(192 * 0.85), pytest.approx(80 * 0.85)]
    with pytest.raises(ShardlabError, match="hardware profile 'nope' is unknown"):
        compare_hardware(tight, ["b200", "nope"])
    folder = analytic_copy(tmp_path)                      # an analytic profile not derived yet: no model
    monkeypatch.setenv(USER_DIR_ENV, str(folder.parent))
    with pytest.raises(ShardlabError, match="hardware profile 'mygpu': field 'search_model' is null") as e:
        compare_hardware(small_task, ["b200", "mygpu"])
    assert "\n" not in str(e.value)
    with pytest.raises(ShardlabError, match="field 'profiles'"):
        compare_hardware(small_task, [])
