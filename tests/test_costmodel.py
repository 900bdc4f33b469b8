"""Cost models on the shipped measured CPU dataset: protocol, fit quality, save/load, seeds."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab.costmodel.analytic import AnalyticComm, AnalyticCompute, nnls_relative
from shardlab.costmodel.base import CommModel, ComputeModel, simulate
from shardlab.costmodel.bundle import load_bundle, shipped_bundles
from shardlab.costmodel.metrics import errors, held_out_sets, kendall, split_of, split_samples
from shardlab.costmodel.neural import NeuroShardCompute
from shardlab.costmodel.neural_comm import NeuroShardComm
from shardlab.costmodel.train import load_records, train_bundle
from shardlab.errors import ShardlabError
from shardlab.tables import Table


@pytest.fixture(scope="module")
def compute_samples():
    return load_records("compute")


@pytest.fixture(scope="module")
def comm_samples():
    return load_records("comm")


def shards_of(samples):
    return [s.tables for s in samples]


def test_split_is_stable_and_roughly_80_10_10(compute_samples):
    assert split_of("compute:cpu:x:0") == split_of("compute:cpu:x:0")
    parts = split_samples(compute_samples)
    n = len(compute_samples)
    assert abs(len(parts["train"]) / n - 0.8) < 0.04 and abs(len(parts["test"]) / n - 0.1) < 0.03


def test_metrics_on_known_values():
    e = errors([1.0, 2.0, 4.0], [1.0, 2.0, 2.0])
    assert e["mape"] == pytest.approx(1 / 3) and e["mse"] == pytest.approx(4 / 3)
    assert kendall(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])) == -1.0


def test_nnls_keeps_coefficients_non_negative():
    rng = np.random.default_rng(0)
    x = np.c_[np.ones(50), rng.random(50), rng.random(50)]
    y = 2.0 + 3.0 * x[:, 1] - 0.5 * x[:, 2] + 0.01
    w = nnls_relative(x, y)
    assert (w >= 0).all() and w[2] == 0.0 and w[1] > 2.0


def test_analytic_fits_measured_data_and_beats_a_constant(compute_samples, comm_samples):
    parts = split_samples(compute_samples)
    model = AnalyticCompute().fit(parts["train"])
    assert isinstance(model, ComputeModel) and model.source.startswith("analytic:cpu")
    test = parts["test"]
    pred = model.predict(shards_of(test)).sum(axis=1)
    true = np.array([s.fw_ms + s.bw_ms for s in test])
    const = np.full_like(true, np.median(true))
    assert errors(pred, true)["mape"] < 0.5 * errors(const, true)["mape"]
    assert errors(pred, true)["spearman"] > 0.9
    comm = AnalyticComm().fit(split_samples(comm_samples)["train"])
    assert isinstance(comm, CommModel)
    # waiting: a rank that arrives 10 ms earlier waits about 10 ms longer in the forward all-to-all
    out = comm.predict([[256, 256, 256, 256]], [[0.0, 10.0, 10.0, 10.0]])[0]
    assert out.shape == (4, 2) and 7.0 < out[0, 0] - out[1, 0] < 13.0


def test_analytic_extrapolates_with_batch_and_device_count(compute_samples, comm_samples):
    model = AnalyticCompute().fit(compute_samples[:500])
    shard = shards_of(compute_samples[:1])
    small, large = model.predict(shard)[0].sum(), model.predict(shard, batch_size=65536)[0].sum()
    assert large > 4 * small
    comm = AnalyticComm().fit(comm_samples[:500])
    assert comm.predict([[64] * 16]).shape == (1, 16, 2)


def test_neural_compute_learns_unseen_tables_and_round_trips(tmp_path, compute_samples):
    sets = held_out_sets(compute_samples)
    model = NeuroShardCompute(epochs=100, seed=1).fit(sets["train"], sets["val"])
    assert isinstance(model, ComputeModel)
    test = sets["unseen_tables"]
    assert len(test) >= 500
    pred = model.predict(shards_of(test)).sum(axis=1)
    true = np.array([s.fw_ms + s.bw_ms for s in test])
    assert errors(pred, true)["spearman"] > 0.9 and errors(pred, true)["mape"] < 0.4
    assert model.history_[-1]["train_loss"] < model.history_[0]["train_loss"]
    path = tmp_path / "m.pt"
    model.save(str(path))
    again = NeuroShardCompute.load(str(path))
    np.testing.assert_array_equal(again.predict(shards_of(test[:20])), model.predict(shards_of(test[:20])))
    assert again.scaler_ == model.scaler_ and again.history_ == model.history_
    assert model.predict([[]])[0].tolist() == [0.0, 0.0]


def test_neural_compute_same_seed_same_model(compute_samples):
    a = NeuroShardCompute(epochs=3, seed=7).fit(compute_samples[:300], compute_samples[300:340])
    b = NeuroShardCompute(epochs=3, seed=7).fit(compute_samples[:300], compute_samples[300:340])
    c = NeuroShardCompute(epochs=3, seed=8).fit(compute_samples[:300], compute_samples[300:340])
    probe = shards_of(compute_samples[400:410])
    np.testing.assert_array_equal(a.predict(probe), b.predict(probe))
    assert not np.array_equal(a.predict(probe), c.predict(probe))


def test_pair_rank_loss_ranks_only_pairs_a_gap_apart():
    import torch

    from shardlab import constants as C
    from shardlab.costmodel.neural import pair_rank_loss

    target = torch.tensor([[0.0], [1.0], [2.0], [2.01]])            # the last two are closer than the gap
    right, wrong = target.clone(), -target.clone()
    assert float(pair_rank_loss(right, target)) < 0.01 < 5.0 < float(pair_rank_loss(wrong, target))
    level = torch.tensor([[0.0], [1.0]])
    assert float(pair_rank_loss(level + 7.0, level)) == pytest.approx(float(pair_rank_loss(level, level)))
    tied = torch.tensor([[1.0], [1.0 + C.RANK_LOSS_GAP / 2]], requires_grad=True)
    out = pair_rank_loss(tied, torch.tensor([[1.0], [1.0 + C.RANK_LOSS_GAP / 2]]))
    out.backward()                                                   # no pair: 0, still differentiable
    assert float(out.detach()) == 0.0 and tied.grad is not None


def test_rank_weight_is_configuration_and_changes_training(compute_samples):
    plain = NeuroShardCompute(epochs=3, seed=7).fit(compute_samples[:300], compute_samples[300:340])
    ranked = NeuroShardCompute(epochs=3, seed=7, rank_weight=0.05).fit(compute_samples[:300], compute_samples[300:340])
    probe = shards_of(compute_samples[400:410])
    assert ranked.config()["rank_weight"] == 0.05 and plain.config()["rank_weight"] == 0.0
    assert not np.array_equal(plain.predict(probe), ranked.predict(probe))
    with pytest.raises(ShardlabError, match="'rank_weight'"):
        NeuroShardCompute(rank_weight=-1.0)
    with pytest.raises(ShardlabError, match="'rank_weight'"):
        train_bundle("analytic", compute_samples[:50], [], rank_weight=0.1)


def test_neural_comm_per_device_count(tmp_path, comm_samples):
    parts = split_samples(comm_samples)
    model = NeuroShardComm(epochs=100, seed=0).fit(parts["train"], parts["val"])
    assert sorted(model.nets_) == sorted({s.world_size for s in comm_samples})
    g4 = [s for s in parts["test"] if s.world_size == 4]
    pred = model.predict([s.dim_sums for s in g4], [s.delays_ms for s in g4])
    fw_true = np.concatenate([s.fw_comm_ms for s in g4])
    assert errors(pred[:, :, 0].ravel(), fw_true)["spearman"] > 0.95
    with pytest.raises(ShardlabError, match="'ngpu' = 3"):
        model.predict([[4, 4, 4]])
    model.save(str(tmp_path / "c.pt"))
    np.testing.assert_array_equal(NeuroShardComm.load(str(tmp_path / "c.pt")).predict([[8, 8, 8, 8]]),
                                  model.predict([[8, 8, 8, 8]]))


def test_bundle_train_save_load_and_simulate(tmp_path, compute_samples, comm_samples):
    bundle = train_bundle("analytic", compute_samples, comm_samples, progress=False, data_label="dataset:cpu")
    assert bundle.heldout["compute_total"]["n"] > 100 and "comm8_fw" in bundle.heldout
    assert bundle.provenance["data_provenance"][0]["hardware"]
    assert "compute_timing" not in bundle.provenance and bundle.provenance["data_compute_timing"]
    bundle.save(tmp_path / "a.json")
    again = load_bundle(tmp_path / "a.json")
    shards = shards_of(compute_samples[:4])
    sim = simulate(shards, again.compute, again.comm)
    assert sim.cost_ms == pytest.approx(bundle.simulate(shards).cost_ms)
    assert sim.cost_ms == pytest.approx(float(sim.total.max()))
    with pytest.raises(ShardlabError, match="no such file or shipped model"):
        load_bundle("no-such-model")


def test_a_bundle_names_its_datas_timer_not_the_training_hosts():
    from shardlab.costmodel.train import data_compute_timing
    from shardlab.measure.hardware import HOST_SYNC_TIMING, TIMING_METHODS

    assert data_compute_timing([{"compute_timing": HOST_SYNC_TIMING}] * 2) == HOST_SYNC_TIMING
    mixed = [{"compute_timing": TIMING_METHODS["cuda"]}, {"hardware": "x"}, {"compute_timing": HOST_SYNC_TIMING}]
    assert data_compute_timing(mixed) == f"{TIMING_METHODS['cuda']}, not recorded, {HOST_SYNC_TIMING}"
    assert HOST_SYNC_TIMING not in TIMING_METHODS.values()                  # no profiler times this way now


def test_estimate_plan_labels_its_source_and_falls_back_for_untrained_device_counts():
    from shardlab.data.tasks import generate_task
    from shardlab.evaluate import estimate_plan
    from shardlab.search import get_sharder, run_sharder

    neural = load_bundle("neuroshard")
    for g, suffix in ((4, ""), (2, "+analytic-comm")):
        task = generate_task(ntables=10, ngpu=g, mem_cap_gb=4.0, batch_size=4096, seed=g)
        ev = estimate_plan(task, run_sharder(get_sharder("dim_greedy"), task), neural)
        assert ev.source == "model:neuroshard-compute@cpu[batch_size=4096]" + suffix
        assert ev.cost_ms == max(d.total_ms for d in ev.per_device)
        assert ev.lower_bound_ms is None                     # a learned model proves no bound
        bounded = estimate_plan(task, run_sharder(get_sharder("dim_greedy"), task), load_bundle("analytic"))
        assert 0 < bounded.lower_bound_ms <= bounded.cost_ms


# --- one estimator convention: config never changed by fit, NotFittedError, records, protocol


@pytest.fixture(scope="module")
def plan_samples():
    return load_records("plan")


def _fitted_models(compute_samples, comm_samples, plan_samples):
    """(unfitted model, its training samples, its validation samples) for every model class."""
    from shardlab.costmodel.dreamshard import DreamShardCost
    from shardlab.costmodel.neural import AutoShardCompute

    small = dict(epochs=2, seed=3, batch_size=64)
    return [(AnalyticCompute(), compute_samples[:200], None),
            (AnalyticCompute(batch_size=8192, weights_precision="fp16"), compute_samples[:200], None),
            (AnalyticComm(), comm_samples[:200], None),
            (AnalyticComm(batch_size=1024, bytes_per_value=2), comm_samples[:200], None),
            (NeuroShardCompute(**small), compute_samples[:120], compute_samples[120:140]),
            (AutoShardCompute(**small, hidden=16), compute_samples[:120], compute_samples[120:140]),
            (NeuroShardComm(**small), comm_samples[:120], comm_samples[120:160]),
            (DreamShardCost(**small), plan_samples[:12] + compute_samples[:40], None)]


def test_fit_never_changes_the_configuration_and_learned_state_ends_in_underscore(
        compute_samples, comm_samples, plan_samples):
    for model, train, val in _fitted_models(compute_samples, comm_samples, plan_samples):
        before = model.config()
        assert set(before) == set(type(model).param_names())        # derived from __init__, not a list
        assert model.fit(train, val) is model
        assert model.config() == before, type(model).__name__
        learned = [k for k in vars(model) if k not in before and not k.startswith("_")]
        assert learned and all(k.endswith("_") for k in learned), (type(model).__name__, learned)
        assert model.profile_["name"] == "cpu" and model.profile_["batch_size"] == 4096
        assert type(model)(**model.config()).config() == before    # config() rebuilds the model


def test_every_model_raises_one_not_fitted_error_before_fit(compute_samples, comm_samples, plan_samples):
    from shardlab.errors import NotFittedError

    shard = [compute_samples[0].tables]
    for model, _, _ in _fitted_models(compute_samples, comm_samples, plan_samples):
        name = type(model).__name__
        calls = [lambda: model.predict([[4, 4, 4, 4]])] if model.target == "comm" else \
            [lambda: model.predict(shard), lambda: model.embed(shard[0]),
             lambda: model.predict_sums(np.zeros((1, model.embed_dim)), np.ones(1))]
        if hasattr(model, "predict_plan"):
            calls.append(lambda: model.predict_plan(shard))
        if hasattr(model, "state"):
            calls.append(model.state)
        for call in calls:
            with pytest.raises(NotFittedError) as err:
                call()
            assert isinstance(err.value, ShardlabError)
            assert str(err.value).startswith(f"{name}: not fitted") and "\n" not in str(err.value)


def test_analytic_configuration_sets_what_predictions_assume(tmp_path, compute_samples):
    data = AnalyticCompute().fit(compute_samples[:300])
    at8k = AnalyticCompute(batch_size=8192).fit(compute_samples[:300])
    np.testing.assert_array_equal(at8k.coef_fw_, data.coef_fw_)            # fitted at the data's batch
    shard = shards_of(compute_samples[:3])
    np.testing.assert_array_equal(at8k.predict(shard), data.predict(shard, batch_size=8192))
    assert at8k.source == "analytic:cpu[batch_size=8192]" and data.source == "analytic:cpu[batch_size=4096]"
    at8k.save(str(tmp_path / "a.json"))
    again = AnalyticCompute.load(str(tmp_path / "a.json"))
    assert again.config() == at8k.config() and again.profile_ == at8k.profile_
    np.testing.assert_array_equal(again.predict(shard), at8k.predict(shard))


def test_fit_takes_records_or_rows_alike_and_refuses_another_kind(compute_samples, comm_samples):
    rows = [r.to_dict() for r in compute_samples[:200]]
    a, b = AnalyticCompute().fit(compute_samples[:200]), AnalyticCompute().fit(rows)
    np.testing.assert_array_equal(a.coef_fw_, b.coef_fw_)
    np.testing.assert_array_equal(a.coef_bw_, b.coef_bw_)
    with pytest.raises(ShardlabError, match=r"^NeuroShardCompute.fit: sample 'comm:\S+' is a CommRecord, not a compute"):
        NeuroShardCompute(epochs=1).fit(comm_samples[:5], comm_samples[5:8])


def test_records_round_trip_through_their_rows(compute_samples, comm_samples, plan_samples):
    from shardlab.measure.records import as_record

    for r in (compute_samples[0], comm_samples[0], plan_samples[0]):
        assert as_record(r.to_dict()) == r and as_record(r) is r
    plan = plan_samples[0]
    assert len(plan.devices) == len(plan.fw_compute_ms) and all(isinstance(t, Table) for t in plan.devices[0])
    with pytest.raises(ShardlabError, match="^compute sample 'k': field 'fw_ms' is missing$"):
        as_record({"key": "k", "tables": []})


def test_dreamshard_fit_takes_one_list_and_validates_on_plans_and_compute(compute_samples, plan_samples):
    """One signature: plans and compute records in ``samples``; rows parse to the same fit;
    validation compute records add their loss to the plans'; without plans they are refused."""
    from shardlab.costmodel.dreamshard import DreamShardCost

    plans, compute = plan_samples[:16], compute_samples[:40]
    mixed = DreamShardCost(epochs=2, seed=5).fit(plans + compute)
    rows = DreamShardCost(epochs=2, seed=5).fit([p.to_dict() for p in plans] + compute)
    probe = shards_of(compute_samples[50:55])
    np.testing.assert_array_equal(mixed.predict(probe), rows.predict(probe))
    assert mixed.history_ == rows.history_
    assert mixed.scale_ms_ == pytest.approx(np.median([r.fw_ms + r.bw_ms for r in compute]))
    plan_only = DreamShardCost(epochs=2, seed=5).fit(plans[:12] + compute, plans[12:])
    both = DreamShardCost(epochs=2, seed=5).fit(plans[:12] + compute, plans[12:] + compute_samples[60:80])
    assert plan_only.plan_scale_ms_ == pytest.approx(np.median([p.cost_ms for p in plans[:12]]))
    for a, b in zip(plan_only.history_, both.history_):
        assert a["train_loss"] == b["train_loss"] and b["val_loss"] > a["val_loss"]
    with pytest.raises(ShardlabError, match="^DreamShardCost.fit: field 'val_samples' holds 40 compute records "
                                            "and no measured plan"):
        DreamShardCost(epochs=2, seed=5).fit(plans, compute)


def test_incremental_compute_models_satisfy_the_protocol(compute_samples, comm_samples):
    from shardlab.costmodel.base import IncrementalComputeModel

    analytic = AnalyticCompute().fit(compute_samples[:200])
    neural = NeuroShardCompute(epochs=2, seed=0).fit(compute_samples[:100], compute_samples[100:120])
    assert not isinstance(AnalyticComm().fit(comm_samples[:50]), IncrementalComputeModel)
    shard = compute_samples[300].tables
    for model in (analytic, neural):
        assert isinstance(model, IncrementalComputeModel)
        rows = model.embed(shard)
        assert rows.shape == (len(shard), model.embed_dim)
        np.testing.assert_allclose(model.predict_sums(rows.sum(axis=0)[None], np.array([len(shard)])),
                                   model.predict([shard]), rtol=1e-5)


def test_dreamshard_fine_tuned_continues_from_the_weights_and_leaves_the_model(compute_samples, plan_samples):
    """DreamShard's per-iteration cost update: a copy trained further; the original unchanged."""
    from shardlab.costmodel.dreamshard import DreamShardCost

    data = plan_samples[:16] + compute_samples[:40]
    cost = DreamShardCost(epochs=3, seed=1).fit(data)
    probe = shards_of(compute_samples[50:55])
    before = cost.predict(probe)
    same = cost.fine_tuned(data, epochs=0)
    np.testing.assert_array_equal(same.predict(probe), before)
    more = cost.fine_tuned(data, epochs=3, seed=2)
    assert not np.array_equal(more.predict(probe), before)
    np.testing.assert_array_equal(cost.predict(probe), before)
    assert len(more.history_) == len(cost.history_) + 3 and more.scale_ms_ == cost.scale_ms_
    assert more.config()["epochs"] == 3 and cost.config()["epochs"] == 3


def test_dreamshard_pretraining_fits_the_compute_heads_first(compute_samples, plan_samples):
    from shardlab.costmodel.dreamshard import DreamShardCost

    data = plan_samples[:16] + compute_samples[:40]
    plain = DreamShardCost(epochs=2, seed=1).fit(data)
    pre = DreamShardCost(epochs=2, seed=1, pretrain_epochs=3).fit(data)
    assert len(pre.history_) == len(plain.history_) + 3
    assert DreamShardCost.from_state(pre.state()).pretrain_epochs == 3


def test_shipped_bundles_lists_only_loadable_bundle_manifests():
    names = shipped_bundles("cpu")
    assert {"analytic", "neuroshard", "neuroshard_broad", "dreamshard", "autoshard"} <= set(names)
    assert "analytic_rowwise_comm" not in names           # a stand-alone row-wise comm model, no bundle
    assert not any("." in n for n in names)                # no part files
    for n in names:
        assert load_bundle(n, "cpu").source
