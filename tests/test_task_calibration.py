"""Task calibration (costmodel/task_calibration.py, profile/task_bench.py): the correction
recovers a known synthetic scale, stays incremental, is refused where the profile cannot be
measured, is not applied where it does not help, and a real small CPU calibration records its fit."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from shardlab import constants as C
from shardlab.data.hardware_profiles import profile_folder
from shardlab.costmodel.bundle import load_bundle
from shardlab.costmodel.task_calibration import (TaskCalibratedLinearHead, calibrate_to_task, corrected,
                                                 fit_correction, raw_predictions)
from shardlab.costmodel.valid_range import GuardedCompute
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.measure.task_bench import task_ops
from shardlab.search.blocks import ShardCoster
from shardlab.search.greedy_grid import HeadCoster

SCALE, EXPONENT = np.array([1.8, 0.6]), np.array([1.1, 0.9])


@pytest.fixture(scope="module")
def bundle():
    """A guarded neural bundle with a linear head: what the corrections must keep."""
    return load_bundle("neuroshard_broad", "cpu")


@pytest.fixture(scope="module")
def task():
    return generate_task(ntables=12, ngpu=3, mem_cap_gb=4.0, seed=5)


def synthetic(bundle, scale=SCALE, exponent=EXPONENT):
    """A fake measurement: the model's own raw ms, corrected by a known scale and exponent."""
    def measure(tables, profile):
        raw, after = raw_predictions(bundle.compute, [list(tables)])
        return tuple(after[0] * scale * raw[0] ** exponent)
    return measure


def test_recovers_a_known_synthetic_correction(bundle, task):
    out, rec = calibrate_to_task(bundle, task, "cpu", seed=1, measure=synthetic(bundle))
    assert rec["applied"] is True and "reason" not in rec
    for k, name in enumerate(("fw", "bw")):
        assert rec["fit"]["power"][name]["scale"] == pytest.approx(SCALE[k], rel=1e-3)
        assert rec["fit"]["power"][name]["exponent"] == pytest.approx(EXPONENT[k], rel=1e-3)
    assert rec["fit"]["chosen"] == "power"
    assert rec["error"]["heldout"]["all"] < 1e-3 < rec["error"]["before"]["all"]
    shards = [[task.tables[i] for i in idx] for idx in ([0, 1, 2], [3], [4, 5, 6, 7, 8])]
    want = np.array([synthetic(bundle)(s, None) for s in shards])
    assert np.allclose(out.compute.predict(shards), want, rtol=1e-6)
    assert out is not bundle and bundle.compute.source == rec["model"]       # the input is untouched
    assert out.source.endswith("+task-calibrated")
    json.dumps(rec)                                                           # JSON-ready


def test_fit_is_robust_to_one_noisy_op_and_to_zero_predictions():
    rng = np.random.default_rng(0)
    raw = np.exp(rng.uniform(-1, 3, size=(40, 2)))
    meas = 2.0 * raw ** 1.2
    meas[3] *= 5.0                        # one op timed in a noisy moment
    raw[7] = 0.0                          # a model predicting 0 ms: nothing to scale
    scale, exponent = fit_correction(raw, np.ones_like(raw), meas, np.ones(40))
    assert np.allclose(scale, 2.0, rtol=0.02) and np.allclose(exponent, 1.2, rtol=0.02)


def test_corrected_model_stays_incremental(bundle, task):
    model = corrected(bundle.compute, SCALE, EXPONENT)
    assert isinstance(model, GuardedCompute) and isinstance(model.model, TaskCalibratedLinearHead)
    coster, head = ShardCoster(model), HeadCoster(model)
    assert coster.incremental and head.linear_head
    shards = [list(task.tables[:4]), list(task.tables[4:9]), [task.tables[9]]]
    direct = model.predict(shards)
    emb = [model.embed(s) for s in shards]
    sums = np.stack([e.sum(axis=0) for e in emb])
    counts = np.array([len(s) for s in shards])
    # the shipped model's predict runs in float32, predict_sums in float64: equal to ~1e-7
    assert np.allclose(model.predict_sums(sums, counts), direct, rtol=1e-5)
    pre = np.stack([model.head_rows(e).sum(axis=0) for e in emb])
    assert np.allclose(model.predict_head(pre, counts), model.predict_sums(sums, counts), rtol=1e-9)
    assert not np.allclose(direct, bundle.compute.predict(shards), rtol=1e-2)   # it did correct
    assert np.all(model.predict_sums(np.zeros((1, sums.shape[1])), np.zeros(1)) == 0.0)
    with pytest.raises(ShardlabError, match="'save'"):
        model.model.save("never.pt")


def test_h100_on_a_cpu_host_is_not_applied_and_says_why(task):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: h100 can be measured here")
    b = load_bundle(profile_folder("h100").search_model, "h100")
    out, rec = calibrate_to_task(b, task, "h100", seed=0)
    assert out is b and rec["applied"] is False
    assert rec["reason"] == "profile 'h100' cannot be measured on this machine (no GPU)"
    assert "ops" not in rec and rec["seconds"] < 5


def test_not_applied_where_the_model_is_already_right(bundle, task):
    out, rec = calibrate_to_task(bundle, task, "cpu", seed=0,
                                 measure=synthetic(bundle, np.ones(2), np.ones(2)))
    assert out is bundle and rec["applied"] is False and "held-out" in rec["reason"]
    assert rec["fit"]["power"]["fw"]["scale"] == pytest.approx(1.0, rel=1e-6) and rec["fit"]["chosen"] is None


def test_budget_stops_measuring(bundle, task):
    out, rec = calibrate_to_task(bundle, task, "cpu", budget_s=1e-9, measure=synthetic(bundle))
    assert out is bundle and rec["applied"] is False and rec["stopped_by_budget"] is True
    assert "budget_s" in rec["reason"]
    with pytest.raises(ShardlabError, match="'budget_s'"):
        calibrate_to_task(bundle, task, "cpu", budget_s=0, measure=synthetic(bundle))


def test_groups_are_deterministic_per_seed_and_device_sized(task):
    ops, skipped = task_ops(task, "cpu", seed=4)
    again, _ = task_ops(task, "cpu", seed=4)
    other, _ = task_ops(task, "cpu", seed=5)
    assert ops == again and ops != other and skipped == []
    groups = [op.indices for op in ops if op.kind == "group"]
    singles = sorted(op.indices[0] for op in ops if op.kind == "table")
    assert singles == list(range(len(task.tables)))
    assert 1 <= len(groups) <= C.TASK_CALIBRATION_GROUPS
    mean = len(task.tables) / task.ngpu
    assert all(2 <= len(g) <= 1.5 * mean + 1 and list(g) == sorted(set(g)) for g in groups)
    assert ops[0].kind == "group"                   # groups interleaved with the singles


def test_real_cpu_calibration_of_six_tables_records_its_fit(bundle):
    task = generate_task(ntables=6, ngpu=2, mem_cap_gb=4.0, seed=2)
    out, rec = calibrate_to_task(bundle, task, "cpu", seed=0, budget_s=20.0)
    assert rec["seconds"] < 20 and rec["timing"]["compute_timing"] == "perf_counter"
    assert rec["timing"]["repeats"] == C.TASK_CALIBRATION_REPEATS and rec["stopped_by_budget"] is False
    kinds = [op["kind"] for op in rec["ops"]]
    assert kinds.count("table") == 6 and kinds.count("group") >= 1
    assert all(min(op["measured_ms"]) > 0 for op in rec["ops"])
    assert {"scale", "exponent"} <= set(rec["fit"]["power"]["fw"]) and rec["error"]["heldout"]["all"] is not None
    assert (out is not bundle) == rec["applied"]
    assert out.source.endswith(("+task-calibrated", "+task-levelled")) == rec["applied"]
    assert rec["model_hardware"] and rec["model_hardware"] == sorted(
        {p["hardware"] for p in bundle.provenance["data_provenance"]})        # where its data were measured
    assert rec["same_hardware"] == (rec["model_hardware"] == [rec["timing"]["hardware"]])
    json.dumps(rec)


def per_table(bundle, task, factors):
    """A fake measurement: the model's prediction of the op times the size-weighted mean of
    its tables' own factors (what the levelled model assumes), so levels fit it exactly."""
    by_name = {t.name: f for t, f in zip(task.tables, factors)}

    def measure(tables, profile):
        tables = list(tables)
        single = bundle.compute.predict([[t] for t in tables])
        f = np.array([by_name[t.name] for t in tables])
        level = (f[:, None] * single).sum(axis=0) / single.sum(axis=0)
        return tuple(bundle.compute.predict([tables])[0] * level)
    return measure


def test_levels_are_chosen_where_tables_differ_and_predict_groups_from_singles(bundle, task):
    factors = np.where(np.arange(len(task.tables)) % 2 == 0, 3.0, 0.5)
    out, rec = calibrate_to_task(bundle, task, "cpu", seed=1, measure=per_table(bundle, task, factors))
    assert rec["applied"] is True and rec["fit"]["chosen"] == "levels"
    assert rec["error"]["heldout"]["groups"] < 1e-6 < rec["error"]["heldout_by_form"]["power"]["groups"]
    assert out.source.endswith("+task-levelled")
    shard = [task.tables[0], task.tables[1], task.tables[4]]
    assert np.allclose(out.compute.predict([shard])[0], per_table(bundle, task, factors)(shard, None), rtol=1e-5)
    json.dumps(rec)


def test_levelled_model_stays_incremental_and_carries_slices(bundle, task):
    from shardlab.costmodel.table_levels import levelled, table_ratios
    single = bundle.compute.predict([[t] for t in task.tables])
    ratios = table_ratios(task.tables, single * 2.0, single)
    model = levelled(bundle.compute, ratios)
    coster, head = ShardCoster(model), HeadCoster(model)
    assert coster.incremental and head.linear_head
    shards = [list(task.tables[:4]), list(task.tables[4:9]), [task.tables[9].with_dim(4, name="slice")]]
    direct = model.predict(shards)
    assert np.allclose(direct, 2.0 * bundle.compute.predict(shards), rtol=1e-6)   # a slice keeps its table's level
    emb = [model.embed(s) for s in shards]
    sums, counts = np.stack([e.sum(axis=0) for e in emb]), np.array([len(s) for s in shards])
    assert np.allclose(model.predict_sums(sums, counts), direct, rtol=1e-5)
    pre = np.stack([model.head_rows(e).sum(axis=0) for e in emb])
    assert np.allclose(model.predict_head(pre, counts), model.predict_sums(sums, counts), rtol=1e-9)
    other = task.tables[0].with_dim(8, name="x")
    assert np.allclose(levelled(bundle.compute, {}).predict([[other]]), bundle.compute.predict([[other]]))


@pytest.mark.parametrize("form", ["power", "levels"])
def test_a_plans_record_replays_to_the_model_its_search_used(bundle, task, form):
    from shardlab.costmodel.task_calibration import replay_calibration
    factors = np.where(np.arange(len(task.tables)) % 2 == 0, 3.0, 0.5)
    measure = synthetic(bundle) if form == "power" else per_table(bundle, task, factors)
    out, rec = calibrate_to_task(bundle, task, "cpu", seed=1, measure=measure)
    assert rec["applied"] and rec["fit"]["chosen"] == form
    again, rec2 = replay_calibration(bundle, task, json.loads(json.dumps(rec)))
    assert rec2["applied"] and rec2["fit"]["chosen"] == form and again.source == out.source
    assert rec2["replayed_from"]["model"] == rec["model"] and len(rec2["ops"]) == len(rec["ops"])
    shards = [[task.tables[i] for i in idx] for idx in ([0, 1, 2], [3], [4, 5, 6, 7, 8], list(range(12)))]
    # the record keeps measured ms to 0.1 us, so the replayed fit differs from the original by rounding only
    assert np.allclose(again.compute.predict(shards), out.compute.predict(shards), rtol=2e-3)
    assert not np.allclose(bundle.compute.predict(shards), out.compute.predict(shards), rtol=0.05)


def test_a_record_that_cannot_be_replayed_says_why(bundle, task):
    from shardlab.costmodel.task_calibration import replay_calibration
    _, rec = calibrate_to_task(bundle, task, "cpu", seed=1, measure=synthetic(bundle))
    same, short = replay_calibration(bundle, task, {**rec, "ops": rec["ops"][:2]})
    assert same is bundle and short["applied"] is False and "needs 3" in short["reason"]
    bad = {**rec, "ops": [{**rec["ops"][0], "tables": ["no_such_table"]}, *rec["ops"][1:]]}
    with pytest.raises(ShardlabError, match="field 'ops' names table 'no_such_table'"):
        replay_calibration(bundle, task, bad)
    nothing, none = replay_calibration(bundle, task, {"applied": False, "reason": "h100 cannot be measured here"})
    assert nothing is bundle and none["applied"] is False and "0 measured op" in none["reason"]
