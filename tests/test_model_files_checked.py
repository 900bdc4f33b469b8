"""A cost-model file is checked against its declared format before use: a manifest that is no
object, a part outside its folder, a class outside shardlab, a part of the wrong shape, a NaN
learned value or a calibration with an unknown or NaN field is one line naming the file and the
field -- never a traceback, never a model silently used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardlab.cli import main
from shardlab.costmodel.bundle import load_bundle
from shardlab.costmodel.model_checks import first_non_finite
from shardlab.errors import ShardlabError
from shardlab.io import save_plan, save_task
from shardlab.search import get_sharder, run_sharder
from shardlab.tables import Task
from tests.conftest import make_table


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    load_bundle("analytic").save(d / "an.json")
    manifest = json.loads((d / "an.json").read_text())
    compute = json.loads((d / "an.compute.json").read_text())

    def part(tag, change):
        c = json.loads(json.dumps(compute))
        change(c["model"])
        (d / f"{tag}.compute.json").write_text(json.dumps(c))
        m = json.loads(json.dumps(manifest))
        m["parts"]["compute"]["file"] = f"{tag}.compute.json"
        (d / f"m_{tag}.json").write_text(json.dumps(m))

    part("nan", lambda m: m["coef_fw"].__setitem__(1, float("nan")))
    part("short", lambda m: m.__setitem__("coef_fw", [1.0]))
    part("noprofile", lambda m: m.pop("profile"))

    def variant(tag, change):
        m = json.loads(json.dumps(manifest))
        change(m)
        (d / f"m_{tag}.json").write_text(json.dumps(m))

    variant("outside", lambda m: m["parts"]["compute"].__setitem__("file", "../an.compute.json"))
    variant("absolute", lambda m: m["parts"]["compute"].__setitem__("file", str(d / "an.compute.json")))
    variant("numpy", lambda m: m["parts"]["compute"].__setitem__("class", "numpy.ndarray"))
    variant("torch", lambda m: m["parts"]["comm"].__setitem__("class", "torch.nn.Linear"))
    variant("calib_unknown", lambda m: m.__setitem__("calibration", {"colour": 1}))
    variant("calib_nan", lambda m: m.__setitem__("calibration", {"log_margin": 0.1, "quantile": 0.9, "n": 3,
                                                                 "median_log_ratio": float("nan"), "data": "x"}))
    (d / "m_list.json").write_text(json.dumps([1]))
    (d / "m_format_only.json").write_text(json.dumps({"format": manifest["format"]}))
    return d


BAD = [
    ("m_nan", "learned value 'coef_fw_' is not finite"),
    ("m_short", "its compute model cannot cost a shard"),
    ("m_noprofile", "is not a valid AnalyticCompute file (KeyError"),
    ("m_outside", "must be a file name beside the manifest"),
    ("m_absolute", "must be a file name beside the manifest"),
    ("m_numpy", "must be a shardlab.costmodel class"),
    ("m_torch", "must be a shardlab.costmodel class"),
    ("m_calib_unknown", "field 'colour' is not a calibration field"),
    ("m_calib_nan", "'median_log_ratio' finite"),
    ("m_list", "must be a JSON object (a manifest), got list"),
    ("m_format_only", "field 'parts.compute' must name a 'class' and a 'file'"),
]


@pytest.mark.parametrize("name,says", BAD, ids=[b[0] for b in BAD])
def test_a_bad_model_file_is_refused_at_load(folder, name, says):
    with pytest.raises(ShardlabError, match=None) as e:
        load_bundle(folder / f"{name}.json")
    assert says in str(e.value) and name in str(e.value) and "\n" not in str(e.value)


def test_the_cli_says_it_in_one_line(folder, tmp_path, capsys):
    task = Task("m", 2, 1.0, tuple(make_table(f"t{i}") for i in range(4)))
    tp, pp = save_task(task, tmp_path / "t.json"), save_plan(run_sharder(get_sharder("random"), task), tmp_path / "p.json")
    assert main(["evaluate", str(tp), str(pp), "--model", str(folder / "m_nan.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not finite" in err
    assert main(["evaluate", str(tp), str(pp), "--model", str(folder / "an.json")]) == 0


def test_every_shipped_bundle_passes_the_checks():
    for name in ("analytic", "neuroshard", "autoshard", "dreamshard"):
        for profile in ("cpu", "h100"):
            bundle = load_bundle(name, profile)
            for part in (bundle.unguarded().compute, bundle.unguarded().comm):
                assert first_non_finite(part) is None


def test_first_non_finite_finds_nan_in_nested_learned_state():
    class Fake:
        def __init__(self):
            self.coef_ = {"a": [1.0, 2.0], "b": [float("inf")]}
            self.metrics_ = {"spearman": float("nan")}                # a record, not state
            self._private_ = float("nan")

    assert first_non_finite(Fake()) == "coef_.b[0]"


POLICY_BAD = [
    ("empty_state", lambda d: d.__setitem__("policy", {}), "field 'policy' does not fit the dreamshard network"),
    ("nan_weight", None, "holds a value that is not finite"),
    ("no_cost", lambda d: d.pop("cost"), "field 'cost' is missing"),
    ("extra", lambda d: d.__setitem__("colour", 1), "field 'colour' is not a policy field"),
    ("cost_class", lambda d: d["cost"].pop("class"), "holds a None, not a"),
    ("cost_fields", lambda d: d["cost"].pop("metrics"), "not a valid"),
    ("seed", lambda d: d.__setitem__("seed", "x"), "field 'seed' = 'x' must be an integer"),
]


@pytest.mark.parametrize("tag,change,says", POLICY_BAD, ids=[b[0] for b in POLICY_BAD])
def test_a_bad_policy_file_is_refused_at_load(tmp_path, tag, change, says):
    import torch

    from shardlab.search.dreamshard import DreamShardAgent

    shipped = Path(__file__).resolve().parents[1] / "datasets" / "cpu" / "models" / "dreamshard_policy.pt"
    d = torch.load(shipped, map_location="cpu", weights_only=False)
    if change is None:
        key = next(k for k, v in d["policy"].items() if v.is_floating_point())
        d["policy"][key] = torch.full_like(d["policy"][key], float("nan"))
    else:
        change(d)
    bad = tmp_path / f"{tag}.pt"
    torch.save(d, bad)
    with pytest.raises(ShardlabError) as e:
        DreamShardAgent.load(str(bad))
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert DreamShardAgent.load(str(shipped)).METHOD == "dreamshard"
