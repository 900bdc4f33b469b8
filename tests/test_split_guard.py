"""Split calibration and NeuroShard's split guard: a column-wise plan is
returned only where every judge, charging split devices its calibrated factor, predicts it
faster than the table-wise plan."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from shardlab import constants as C
from shardlab.data.hardware_profiles import profile_folder
from shardlab.cli import main
from shardlab.costmodel.bundle import (MIN_SPLIT_SHARDS, CostModelBundle, SplitCalibration, calibrate_splits,
                                       is_column_slice, load_bundle, models_dir, write_calibration)
from shardlab.costmodel.train import calibrate_if_possible
from shardlab.measure.records import ComputeRecord
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.search import get_sharder
from shardlab.search.split_guard import Judge, guard_order
from shardlab.search.stages import State


class DimSquared:
    """A compute model that over-rewards splits: a shard costs sum(dim^2)/100 ms forward and as
    much backward, so halving a table halves its cost on each device. Incremental, as NeuroShard's
    search needs: a table's row is its dim^2, a shard's the sum of its tables' rows."""

    source = "test:dim-squared"
    target = "compute"
    embed_dim = 1

    def fit(self, samples, val_samples=None):
        return self

    def save(self, path):
        raise NotImplementedError("a test model is never saved")

    def embed(self, tables):
        return np.array([[float(t.dim ** 2)] for t in tables]).reshape(len(tables), 1)

    def predict_sums(self, sums, counts):
        return np.repeat(np.asarray(sums, dtype=float).reshape(-1, 1) / 100.0, 2, axis=1)

    def predict(self, shards):
        return np.array([[sum(t.dim ** 2 for t in s) / 100.0] * 2 for s in shards]).reshape(len(shards), 2)


def bundle_with(model, factor=None):
    comm = load_bundle("analytic").comm
    cal = {} if factor is None else SplitCalibration(math.log(factor), 0.75, 50, 0.0, "test").to_dict()
    return CostModelBundle(model, comm, calibration=cal)


def records(tables_and_ms):
    return [ComputeRecord(key=f"compute:cpu:test:train:s0:{i}", tables=tuple(ts), fw_ms=ms / 2, bw_ms=ms / 2,
                          total_ms=ms, profile={"name": "cpu"}) for i, (ts, ms) in enumerate(tables_and_ms)]


@pytest.fixture(scope="module")
def task():
    return generate_task(ntables=16, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=5, dims=(64, 128))


def test_calibration_is_the_quantile_of_measured_over_predicted_on_split_shards_only(task):
    t = task.tables[0]
    sliced = t.with_dim(t.dim // 2, name=f"{t.name}{C.COLUMN_SLICE_MARK}1/2]")
    assert is_column_slice(sliced) and not is_column_slice(t)
    model = DimSquared()
    pred = model.predict([[sliced]])[0].sum()
    ratios = np.linspace(1.0, 3.0, 21)
    recs = records([([sliced], pred * r) for r in ratios] + [([t], 1e6)] * 30)   # unsplit: ignored
    cal = calibrate_splits(model, recs, quantile=0.75, data="test")
    assert cal.n == 21
    assert cal.log_margin == pytest.approx(np.quantile(np.log(ratios), 0.75))
    assert cal.factor == pytest.approx(np.exp(cal.log_margin))
    assert SplitCalibration.from_dict(cal.to_dict()) == cal
    # a model that over-predicts splits is never made cheaper by its calibration
    low = calibrate_splits(model, records([([sliced], pred * 0.5)] * MIN_SPLIT_SHARDS), data="test")
    assert low.log_margin < 0 and low.factor == 1.0
    with pytest.raises(ShardlabError, match=f"needs >= {MIN_SPLIT_SHARDS}") as e:
        calibrate_splits(model, recs[:MIN_SPLIT_SHARDS - 1], data="test")
    assert "\n" not in str(e.value)
    # records of the train split by key are never used to calibrate at training time
    assert calibrate_if_possible(model, recs, "test") == {}


def test_bad_calibration_in_a_manifest_is_a_one_line_error_naming_the_field(tmp_path):
    for name in ("analytic.json", "analytic.compute.json", "analytic.comm.json"):
        shutil.copy(models_dir("cpu") / name, tmp_path / name)
    path = tmp_path / "analytic.json"
    write_calibration(path, {"log_margin": 0.1, "quantile": 0.75, "n": 30, "median_log_ratio": 0.0, "data": "x"})
    assert load_bundle(path).split_calibration().factor == pytest.approx(math.exp(0.1))
    write_calibration(path, {"log_margin": 0.1, "n": 30, "median_log_ratio": 0.0, "data": "x"})
    with pytest.raises(ShardlabError, match="missing field 'quantile'") as e:
        load_bundle(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_every_shipped_bundle_neuroshard_searches_with_is_calibrated():
    for name in (profile_folder("cpu").search_model, "neuroshard", *profile_folder("cpu").split_guard_judges):
        cal = load_bundle(name, "cpu").split_calibration()
        assert cal is not None and cal.n >= MIN_SPLIT_SHARDS and cal.quantile == C.SPLIT_GUARD_QUANTILE
        assert "validation and test splits" in cal.data


def test_an_over_rewarding_model_splits_unguarded_and_the_guard_overrules_it(task):
    search = bundle_with(DimSquared())
    # the search's own plans (the portfolio off): what the guard does to them is the question
    free = get_sharder("neuroshard", model=search, split_guard=False, max_splits=4, portfolio=()).shard(task)
    assert any(p.cols < task.table(p.table).dim for p in free.placements)
    assert free.metadata == {}
    # a judge that charges split devices 10x: no split survives, and the plan says why
    strict = bundle_with(DimSquared(), factor=10.0)
    plan = get_sharder("neuroshard", model=search, guard_models=(strict,), max_splits=4, portfolio=()).shard(task)
    assert all(p.cols == task.table(p.table).dim for p in plan.placements)
    g = plan.metadata["split_guard"]
    assert g["overruled"] and g["splits"] == 0 and g["judges"]["guard#1"]["factor"] == pytest.approx(10.0)
    tw = get_sharder("neuroshard[columns=false]", model=search, portfolio=()).shard(task)
    assert set(plan.placements) == set(tw.placements)


def test_splits_survive_where_every_judge_agrees_they_pay(task):
    search = bundle_with(DimSquared(), factor=1.05)
    plan = get_sharder("neuroshard", model=search, guard_models=(bundle_with(DimSquared()),), max_splits=4).shard(task)
    g = plan.metadata["split_guard"]
    assert g["splits"] > 0 and all(p.cols <= task.table(p.table).dim for p in plan.placements)
    assert all(r < 1 - C.SPLIT_TIE for r in g["guarded_ratios"].values())
    assert g["judges"]["search model"]["factor"] == pytest.approx(1.05)
    assert g["guarded_ratios"]["search model"] > g["predicted_ms"] / g["table_wise_ms"]


def test_a_split_within_the_tie_band_loses_to_the_table_wise_plan():
    task = generate_task(ntables=2, ngpu=1, mem_cap_gb=4.0, batch_size=4096, seed=2, dims=(64,))
    from shardlab.costmodel.base import Simulated
    from shardlab.search.blocks import split_block, whole_blocks

    whole = whole_blocks(task)
    split = split_block(whole, 0)

    def state(blocks, ms):
        return State(blocks, [0] * len(blocks), Simulated(np.array([ms / 2]), np.array([ms / 2]),
                                                           np.zeros(1), np.zeros(1)))

    judge = Judge("own", bundle_with(DimSquared()), own=True)
    near = [state(whole, 10.0), state(split, 10.0 * (1 - C.SPLIT_TIE / 2))]
    order, ratios, record = guard_order(task, near, [judge])
    assert order[0] == 0 and record["overruled"]
    clear = [state(whole, 10.0), state(split, 9.0)]
    order, ratios, record = guard_order(task, clear, [judge])
    assert order[0] == 1 and not record["overruled"] and ratios["own"][1] == pytest.approx(0.9)


def test_guarded_search_is_deterministic_and_candidates_start_with_its_plan(task):
    sharder = get_sharder("neuroshard", max_splits=3)
    a, b = sharder.shard(task, 0), sharder.shard(task, 0)
    assert a.placements == b.placements and a.metadata == b.metadata
    cands = sharder.candidates(task, 0, 3)
    assert cands[0].placements == a.placements
    assert json.loads(json.dumps(a.metadata))["split_guard"]["judges"]


def test_cli_calibrate_writes_the_manifest_and_reports_the_factor(tmp_path, capsys):
    for name in ("analytic.json", "analytic.compute.json", "analytic.comm.json"):
        shutil.copy(models_dir("cpu") / name, tmp_path / name)
    path = tmp_path / "analytic.json"
    before = json.loads(path.read_text())
    before.pop("calibration", None)
    path.write_text(json.dumps(before))
    assert load_bundle(path).split_calibration() is None
    assert main(["calibrate", str(path), "--quantile", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cal = load_bundle(path).split_calibration()
    assert cal is not None and cal.quantile == 0.5 and cal.n >= MIN_SPLIT_SHARDS
    assert out["calibration"]["log_margin"] == pytest.approx(cal.log_margin)
    assert main(["calibrate", str(path), "--quantile", "1.5"]) == 2
    assert "quantile" in capsys.readouterr().err
