"""The h100 models: cost-model bundles fitted to one H100's measured fused ops, with the cited
analytic GPU-cluster comm model; DreamShard's plans composed from measured ops (no plan was
measured there) and labelled so; every bundle judged on the measured whole-plan compute of
held-out tasks (``plan_compute:<G>``, never trained on); RL policies trained against them with
no measurement (the reward is the model's alone), and their provenance says so."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab.costmodel.base import simulate_from
from shardlab.costmodel.bundle import load_bundle, models_dir
from shardlab.costmodel.metrics import errors, held_out_sets
from shardlab.costmodel.topology_comm import TopologyComm
from shardlab.costmodel.train import compose_plans, load_records, load_samples, plan_compute_errors
from shardlab.data.lookups import device_tables
from shardlab.io import read_json
from shardlab.plan import Plan
from shardlab.measure.hardware import HOST_SYNC_TIMING, TIMING_WORDS
from shardlab.tables import Task

BUNDLES = ["analytic", "neuroshard", "autoshard", "dreamshard"]
POLICIES = {"dreamshard_policy": "dreamshard", "autoshard_policy": "autoshard"}
COMM = "analytic:h100-nvlink4+ib400["


@pytest.fixture(scope="module")
def plan_compute_rows():
    return load_samples("plan_compute", dataset="h100")


@pytest.fixture(scope="module")
def h100_compute():
    return load_records("compute", dataset="h100")


def test_plan_compute_records_are_their_own_kind_not_measured_plans(plan_compute_rows):
    assert load_samples("plan", dataset="h100") == []            # plan_compute_<G> files are not plan:<G>
    assert {r["key"].split(":")[1] for r in plan_compute_rows} == {"4", "8"}
    assert len(plan_compute_rows) == 140 and all("rounds_cost_ms" in r for r in plan_compute_rows)
    assert load_samples("plan_compute", dataset="cpu+cpu/broad", required=False) == []


@pytest.mark.parametrize("name", BUNDLES)
def test_every_h100_bundle_names_its_data_and_comm_and_is_judged_on_held_out_plans(name, plan_compute_rows):
    bundle = load_bundle(name, "h100")
    assert isinstance(bundle.comm, TopologyComm) and bundle.comm.batch_size == 65536
    assert bundle.provenance["data"] == "dataset:h100"
    assert bundle.provenance["data_provenance"][0]["device"] == "cuda"
    assert bundle.provenance["comm"].startswith("given, not fitted: " + COMM)
    assert bundle.comm_for(8)[1].startswith("+comm:" + COMM)
    assert f"train {name} --dataset h100 --comm topology" in bundle.provenance["command"]
    assert {"compute_total", "compute_total_unseen_tables"} <= set(bundle.heldout)
    assert not [k for k in bundle.heldout if k.startswith("comm")]           # no comm measured, none judged
    for g in (4, 8):
        judged = bundle.heldout[f"plan_compute_{g}"]
        assert judged["n"] == sum(r["ngpu"] == g for r in plan_compute_rows) and judged["tasks"] == 10
        assert 0 < judged["mape"] < 10 and -1 <= judged["spearman"] <= 1
    assert "plan_compute:4 (70 plans of 10 held-out tasks)" in bundle.provenance["heldout_plan_compute"]


@pytest.mark.parametrize("name", BUNDLES)
def test_h100_data_and_bundles_say_compute_was_timed_on_the_host_around_synchronize(name):
    rows = [r for kind in ("compute", "single") for r in load_samples(kind, dataset="h100")]
    rows += load_samples("plan_compute", dataset="h100")
    assert {r["provenance"]["compute_timing"] for r in rows} == {HOST_SYNC_TIMING}
    assert "torch.cuda.synchronize()" in TIMING_WORDS[HOST_SYNC_TIMING]
    bundle = load_bundle(name, "h100")
    for prov in (bundle.provenance, *([bundle.fallback().provenance] if bundle.valid_range else [])):
        assert "compute_timing" not in prov                  # the CPU that trained it timed nothing
        assert prov["data_compute_timing"] == HOST_SYNC_TIMING
        assert {p["compute_timing"] for p in prov["data_provenance"]} == {HOST_SYNC_TIMING}
    assert bundle.compute.provenance_ is bundle.provenance  # the manifest's, not the part file's copy


def test_a_shipped_bundles_stated_held_out_errors_are_what_it_gives_as_loaded(plan_compute_rows, h100_compute):
    bundle = load_bundle("neuroshard", "h100")                   # the user's way: valid-range guard on
    stated = bundle.heldout
    assert stated["computed_by"].startswith(".venv/bin/python studies/valid_range/heldout_errors.py: "
                                            "load_bundle('neuroshard', 'h100')")
    given = plan_compute_errors(bundle.compute, plan_compute_rows)
    test_ops = held_out_sets(h100_compute)["seen_tables"]
    pred = bundle.compute.predict([r.tables for r in test_ops]).sum(axis=1)
    given["compute_total"] = errors(pred, [r.fw_ms + r.bw_ms for r in test_ops])
    for key in ("compute_total", "plan_compute_4", "plan_compute_8"):
        for metric in ("mape", "spearman", "rmse_ms"):
            assert stated[key][metric] == pytest.approx(given[key][metric], abs=1e-6), (key, metric)
    plain = plan_compute_errors(bundle.unguarded().compute, plan_compute_rows)
    assert round(plain["plan_compute_4"]["mape"], 2) == 0.18 != round(stated["plan_compute_4"]["mape"], 2) == 0.27
    assert round(stated["plan_compute_8"]["mape"], 2) == 0.25


def test_the_recomputing_study_gives_the_shipped_manifest():
    from studies.valid_range.heldout_errors import recompute

    for name in ("neuroshard", "analytic"):
        shipped = read_json(models_dir("h100") / f"{name}.json")["heldout"]
        again = recompute(load_bundle(name, "h100"), name, "h100")
        assert set(again) == set(shipped) and again["computed_by"] == shipped["computed_by"]
        for key, stated in shipped.items():
            for field, value in stated.items() if isinstance(stated, dict) else [("", stated)]:
                got = again[key][field] if field else again[key]
                assert got == (pytest.approx(value, **_float_noise(stated, field)) if isinstance(value, float)
                               else value), (key, field)


def _float_noise(stated, field):
    """How far a recomputed held-out metric may lie from the stated one on another CPU: the
    models predict in float32 (relative rounding ~1e-7 a prediction, summed differently by
    another CPU's kernels), which moves an error metric by at most ~1e-5 of itself; and it
    may flip the order of one pair of near-tied predictions, which moves Kendall's tau by
    4 / (n (n - 1)) and Spearman's rho by less."""
    if field in ("kendall", "spearman") and isinstance(stated, dict) and stated.get("n", 0) > 1:
        return {"abs": 4.0 / (stated["n"] * (stated["n"] - 1)) + 1e-12}
    return {"rel": 1e-5}


def test_dreamshard_h100_labels_its_composed_plans_and_claims_no_measured_plan():
    bundle = load_bundle("dreamshard", "h100")
    plans = bundle.provenance["plans"]
    assert plans.startswith("composed from measured train-split fused ops, not measured plans")
    assert "comm " + COMM in plans and f"seed {bundle.provenance['seed']}" in plans
    assert "plans" not in bundle.heldout                                 # no measured plan to judge it on
    assert {"plans_composed", "plans_composed_unseen_tables"} <= set(bundle.heldout)
    counts = bundle.heldout["split"]["plans_composed"]
    assert counts["train"] > counts["val"] > 0 and counts["test"] > 0


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_h100_policies_were_trained_against_the_h100_models_without_measurements(policy):
    from shardlab.search import get_sharder, run_sharder
    from shardlab.data.tasks import generate_task
    from shardlab.plan import validate_plan

    sharder = get_sharder(POLICIES[policy], profile="h100")
    agent = sharder.agent()
    prov = agent.provenance_
    assert prov["cost_model"].startswith(f"model:{POLICIES[policy]}-")
    assert "@h100[batch_size=65536]" in prov["cost_model"]
    assert prov["cost_model_bundle"] == f"datasets/h100/models/{POLICIES[policy]}.json"
    assert prov["cost_model_provenance"]["data"] == "dataset:h100"
    assert prov["compute_samples"].startswith("dataset:h100 ")
    assert prov["config"]["profile"] == "h100"
    assert prov["config"]["measure_per_iteration" if policy == "dreamshard_policy" else "measure_plans"] == 0
    assert prov["reward"].startswith("model only")
    task = generate_task(ntables=12, ngpu=4, mem_cap_gb=16.0, batch_size=65536, seed=3)
    validate_plan(task, run_sharder(sharder, task, seed=0))


def test_composed_plans_are_seeded_measured_ops_on_disjoint_tables_with_the_given_comm(h100_compute):
    ops = held_out_sets(h100_compute)["val"]
    comm = TopologyComm()
    plans = compose_plans(ops, comm, 4, seed=5, label="val")
    assert len(plans) == len(ops)
    assert [p.cost_ms for p in plans] == [p.cost_ms for p in compose_plans(ops, comm, 4, seed=5, label="val")]
    assert [p.cost_ms for p in plans] != [p.cost_ms for p in compose_plans(ops, comm, 4, seed=6, label="val")]
    by_key = {r.key: r for r in ops}
    for p in plans:
        assert p.key.startswith("plan:4:composed:val:s5:") and p.provenance["comm"] == comm.source
        chosen = [by_key[k] for k in p.provenance["ops"]]               # every device: one measured op
        names = [t.name for r in chosen for t in r.tables]
        assert len(names) == len(set(names))                              # each table placed once
        assert p.devices == tuple(r.tables for r in chosen)
        assert p.fw_compute_ms == tuple(r.fw_ms for r in chosen) and p.bw_compute_ms == tuple(r.bw_ms for r in chosen)
        sim = simulate_from(np.array([[r.fw_ms, r.bw_ms] for r in chosen]),
                            [sum(t.dim for t in r.tables) for r in chosen], comm)
        assert p.cost_ms == pytest.approx(sim.cost_ms) and p.cost_ms > max(r.fw_ms + r.bw_ms for r in chosen)
    assert compose_plans(ops[:3], comm, 4) == []                           # fewer ops than devices: none


def test_plan_compute_is_judged_on_the_evaluators_device_tables(plan_compute_rows):
    from shardlab import evaluate

    assert evaluate.device_tables is device_tables                        # one function for both
    split = 0
    for r in plan_compute_rows:
        shards = device_tables(Task.from_dict(r["task"]), Plan.from_dict(r["plan"]))
        split += sum("[" in t.name for d in shards for t in d)
    assert split > 0                                                      # column blocks among them


def test_plan_compute_errors_are_the_slowest_devices_predicted_vs_measured(plan_compute_rows):
    bundle = load_bundle("analytic", "h100")
    out = plan_compute_errors(bundle.compute, plan_compute_rows)
    assert set(out) == {"plan_compute_4", "plan_compute_8"}
    rows = [r for r in plan_compute_rows if r["ngpu"] == 8]
    pred = []
    for r in rows:
        shards = device_tables(Task.from_dict(r["task"]), Plan.from_dict(r["plan"]))
        pred.append(max(float(bundle.compute.predict([s]).sum()) for s in shards if s))
    want = errors(pred, [np.median(r["rounds_cost_ms"]) for r in rows])
    assert out["plan_compute_8"]["mape"] == pytest.approx(want["mape"])
    assert out["plan_compute_8"]["spearman"] == pytest.approx(want["spearman"])
    assert bundle.heldout["plan_compute_8"]["mape"] == pytest.approx(want["mape"])   # the shipped one is this


def test_train_dreamshard_with_the_topology_comm_composes_plans_deterministically(tmp_path):
    from shardlab.cli import main

    outs = []
    for k in range(2):
        out = tmp_path / f"dream{k}.json"
        assert main(["train", "dreamshard", "--dataset", "h100", "--comm", "topology", "--epochs", "1",
                     "--pretrain-epochs", "1", "--out", str(out), "--no-progress"]) == 0
        outs.append(load_bundle(str(out)))
    a, b = outs
    assert a.provenance["plans"].startswith("composed from measured train-split fused ops")
    assert a.heldout["plans_composed"] == b.heldout["plans_composed"]
    assert a.heldout["plan_compute_4"] == b.heldout["plan_compute_4"]
    assert a.compute.plan_scale_ms_ == b.compute.plan_scale_ms_
    rows = load_samples("plan_compute", dataset="h100")        # stated as the bundle loads: guard on
    assert a.heldout["plan_compute_8"] == plan_compute_errors(a.compute, rows)["plan_compute_8"]
    assert "the bundle as trained, through shardlab.costmodel.train.heldout_of" in a.heldout["computed_by"]
    assert "compute_timing" not in a.provenance                              # the training host timed nothing
    assert a.provenance["data_compute_timing"] == HOST_SYNC_TIMING          # the data's timer, named as such


def test_train_dreamshard_without_plans_or_a_given_comm_is_one_line(h100_compute):
    from shardlab.costmodel.train import train_bundle
    from shardlab.errors import ShardlabError

    with pytest.raises(ShardlabError) as e:
        train_bundle("dreamshard", h100_compute, load_records("comm", dataset="cpu")[:50], epochs=1, progress=False)
    assert "needs measured plans" in str(e.value) and "--comm topology" in str(e.value) and "\n" not in str(e.value)


def test_a_policy_without_measurements_needs_no_store_and_says_its_reward_is_the_models(tmp_path, capsys):
    from shardlab.cli import main
    from shardlab.search.autoshard import AutoShardAgent

    assert main(["train", "autoshard_policy", "--out", str(tmp_path / "p.pt"), "--measure-plans", "3",
                 "--profile", "h100", "--dataset", "h100"]) == 2
    assert "field 'store' is required" in capsys.readouterr().err
    out = tmp_path / "a.pt"
    assert main(["train", "autoshard_policy", "--out", str(out), "--measure-plans", "0", "--updates", "2",
                 "--episodes", "2", "--n-tasks", "1", "--refit-every", "1", "--ntables", "5", "6",
                 "--profile", "h100", "--dataset", "h100", "--no-progress"]) == 0
    prov = AutoShardAgent.load(str(out)).provenance_
    assert prov["reward"].startswith("model only")
    assert prov["cost_model_bundle"] == "datasets/h100/models/autoshard.json"
    assert prov["cost_model_provenance"]["data_compute_timing"] == HOST_SYNC_TIMING   # the manifest's record
