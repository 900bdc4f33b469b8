"""NeuroShard calibrated to the task: on by default where the profile can be measured here (the
cpu profile on this machine), the plan records what was measured and the fit, the search costs
with the corrected model; planning for a GPU on a machine without one says so."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from shardlab import constants as C
from shardlab.data.hardware_profiles import profile_folder
from shardlab.costmodel.bundle import load_bundle
from shardlab.costmodel.table_levels import LevelledCompute
from shardlab.costmodel.task_calibration import TaskCalibratedCompute
from shardlab.data.tasks import generate_task
from shardlab.evaluate.model import estimate_plan
from shardlab.search import get_sharder, run_sharder
from shardlab.search.neuroshard import NeuroShardSharder


def _task():
    # 0.25 GB devices: the measured ops stay small (at 4 GB the tables drawn are 9 GB of weights to allocate)
    return generate_task(ntables=8, ngpu=2, mem_cap_gb=0.25, batch_size=4096, seed=11)


def test_the_default_is_on_and_the_environment_turns_it_off():
    code = "from shardlab import constants as C; print(C.TASK_CALIBRATION)"
    env = {k: v for k, v in __import__("os").environ.items() if k != "SHARDLAB_TASK_CALIBRATION"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "SHARDLAB_TASK_CALIBRATION": "off"},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_unset_option_follows_the_default(monkeypatch):
    task = _task()
    monkeypatch.setattr(C, "TASK_CALIBRATION", False)
    assert "task_calibration" not in run_sharder(get_sharder("neuroshard", profile="h100"), task).metadata
    monkeypatch.setattr(C, "TASK_CALIBRATION", True)
    rec = run_sharder(get_sharder("neuroshard", profile="h100"), task).metadata["task_calibration"]
    assert rec["applied"] is False and "h100" in rec["reason"]


def test_a_cpu_search_measures_the_tasks_tables_and_searches_with_the_correction():
    task = _task()
    sharder = NeuroShardSharder(profile="cpu", columns=False, task_calibration=True)
    plan = run_sharder(sharder, task, seed=4)
    rec = plan.metadata["task_calibration"]
    assert rec["profile"] == "cpu" and rec["seconds"] > 0
    measured = {n for op in rec["ops"] if op["kind"] == "table" for n in op["tables"]}
    assert measured == {t.name for t in task.tables}
    assert any(op["kind"] == "group" for op in rec["ops"])
    assert set(rec["error"]) >= {"before", "heldout"}
    # the portfolio costed with the model the search used: corrected where applied, with the
    # form the fit chose (which one wins depends on what this machine measured)
    assert sharder._task_bundle is None          # the correction does not outlive the search
    base = sharder.bundle()                      # the profile's search model, uncorrected
    assert base.source == load_bundle(profile_folder("cpu").search_model, "cpu").source
    own = plan.metadata["portfolio"]["predicted_ms"]["lookup_greedy"]
    plain = estimate_plan(task, run_sharder(get_sharder("lookup_greedy"), task, 4), base, lower_bound=False).cost_ms
    source = plan.metadata["portfolio"]["source"]
    if rec["applied"]:
        label = {"power": TaskCalibratedCompute.label, "levels": LevelledCompute.label}[rec["fit"]["chosen"]]
        assert source == base.source + label and own != pytest.approx(plain, rel=1e-9)
    else:
        assert source == base.source and own == pytest.approx(plain, rel=1e-9)


def test_a_calibration_that_applies_changes_what_the_search_costs(monkeypatch):
    """With a measurement that says everything costs 3x the model's prediction, the fit applies
    and the portfolio's predicted costs are ~3x the plain model's."""
    import shardlab.search.neuroshard as ns
    from shardlab.costmodel import task_calibration as tc
    base = load_bundle("neuroshard_broad", "cpu")

    def fake(bundle, task, profile, seed):
        def measure(tables, hw):
            fw, bw = bundle.compute.predict([list(tables)])[0]
            return 3.0 * float(fw), 3.0 * float(bw)
        return tc.calibrate_to_task(bundle, task, profile, seed, measure=measure)

    monkeypatch.setattr(ns, "calibrate_to_task", fake)
    task = _task()
    plan = run_sharder(NeuroShardSharder(profile="cpu", columns=False, task_calibration=True), task)
    rec = plan.metadata["task_calibration"]
    assert rec["applied"] is True
    got = plan.metadata["portfolio"]["predicted_ms"]["size_greedy"]
    plain = estimate_plan(task, run_sharder(get_sharder("size_greedy"), task), base, lower_bound=False)
    comm = sum(d.fw_comm_ms + d.bw_comm_ms for d in plain.per_device) / len(plain.per_device)
    assert got > 2.0 * (plain.cost_ms - comm)
    assert np.isfinite(got)


def test_tables_with_only_the_task_json_fields_are_measured_on_fitted_lookups(small_task):
    from shardlab.costmodel.task_calibration import calibrate_to_task
    bundle = load_bundle("neuroshard_broad", "cpu")
    out, rec = calibrate_to_task(bundle, small_task, "cpu", seed=0, budget_s=20.0)
    measured = {n for op in rec["ops"] if op["kind"] == "table" for n in op["tables"]}
    assert measured == {t.name for t in small_task.tables}
    assert all(min(op["measured_ms"]) > 0 for op in rec["ops"]) and (out is not bundle) == rec["applied"]
