"""Cost models' valid range: a fitted model answers only inside the range of its training data, and
an analytic fallback, scaled to an upper envelope, costs the rest (``costmodel/valid_range.py``).

Properties: the guard is the model inside the range (capped) and the scaled fallback outside, on
every prediction path search uses; a plan's predicted cost is finite and positive for tasks up to
10,000 tables x 1,024 GPUs under every shipped bundle, and never falls when a device the fallback
costs gets another table; plans and Evaluations say what the fallback costed."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab import constants as C
from shardlab.costmodel.bundle import load_bundle
from shardlab.costmodel.valid_range import (CommRange, ComputeRange, GuardedComm, GuardedCompute, GuardedLinearHeadCompute,
                                            range_report)
from shardlab.data.tasks import generate_task, pool_tables
from shardlab.evaluate import estimate_plan
from shardlab.search.greedy_grid import HeadCoster
from shardlab.search.neuroshard import NeuroShardSharder
from shardlab.tables import Table, Task

BINS = (1.0,) + (0.0,) * (C.N_REUSE_BINS - 1)
POOL = pool_tables(C.DEFAULT_POOL, "all")
#: (profile, shipped bundle): every bundle a sharder or evaluator loads by default, fitted or analytic.
BUNDLES = [("cpu", "neuroshard_broad"), ("cpu", "neuroshard"), ("cpu", "autoshard"), ("cpu", "dreamshard"),
           ("cpu", "analytic"), ("h100", "neuroshard"), ("h100", "autoshard"), ("h100", "dreamshard"),
           ("h100", "analytic")]


def _tables(n: int, seed: int = 0, max_rows: int | None = None) -> list[Table]:
    """``n`` distinct pool tables (of at most ``max_rows`` rows), each at a seed dim (copies
    renamed where the pool runs out)."""
    rng = np.random.default_rng(seed)
    pool = [t for t in POOL if max_rows is None or t.rows <= max_rows]
    return [pool[i % len(pool)].with_dim(int(rng.choice(C.SEED_DIMS)), name=f"{pool[i % len(pool)].name}#{i}")
            for i in rng.permutation(n)]


@pytest.fixture(scope="module")
def broad():
    return load_bundle("neuroshard_broad", "cpu")


def test_compute_range_is_the_training_shards_and_flags_tables_outside():
    a, b, c = (Table("a", 1000, 16, 2.0, BINS), Table("b", 5000, 32, 1.0, BINS), Table("c", 100, 8, 4.0, BINS))
    valid = ComputeRange.of([[a, b], [c]])
    assert (valid.max_tables, valid.max_dim_sum, valid.max_lookup_dims) == (2, 48, 64.0)
    assert (valid.max_weights, valid.min_dim, valid.max_dim, valid.max_rows) == (176000, 8, 32, 5000)
    rows = valid.rows([a, b, c])
    assert valid.inside(rows[:2].sum(axis=0)).tolist() == [True]
    assert valid.inside(rows.sum(axis=0)).tolist() == [False]                     # three tables
    wide = Table("w", 10, 64, 1.0, BINS)                                          # a dim no training table had
    assert valid.inside(valid.rows([wide]).sum(axis=0)).tolist() == [False]
    assert ComputeRange.from_dict(valid.to_dict()) == valid


def test_shipped_fitted_bundles_are_guarded_and_analytic_ones_are_not():
    for profile, name in BUNDLES:
        bundle = load_bundle(name, profile)
        assert isinstance(bundle.compute, GuardedCompute) == (name != "analytic"), (profile, name)
        assert not isinstance(bundle.fallback().compute, GuardedCompute) if name != "analytic" else True
    assert isinstance(load_bundle("neuroshard_broad", "cpu").comm, GuardedComm)
    assert isinstance(load_bundle("neuroshard_broad", "cpu").compute, GuardedLinearHeadCompute)


def test_guarded_compute_is_the_model_inside_and_the_scaled_fallback_outside(broad):
    g, model, fallback = broad.compute, broad.compute.model, broad.compute.fallback
    ratio = np.array(g.valid.ratio)
    small = [_tables(5, s, max_rows=10**6) for s in range(20)]  # 5 tables of <= 1M rows: inside
    big = [_tables(40, s) for s in range(5)]                     # 40 tables: more than any training shard
    assert g.inside(small).all() and not g.inside(big).any()
    assert (g.predict(small) == model.predict(small)).all()
    np.testing.assert_allclose(g.predict(big), ratio * fallback.predict(big))
    assert (ratio > 1).all()                                     # the fallback under-predicts this CPU's ops


def test_every_prediction_path_of_the_guard_agrees(broad):
    """predict, embed + predict_sums and head_rows + predict_head (what search sums per device)
    give the same ms, inside the range and outside (predict runs the network in float32, the
    summed paths in float64: they agree to float32's precision, the two summed paths exactly)."""
    g = broad.compute
    shards = [_tables(n, s, max_rows=10**6) for s, n in enumerate((1, 4, 9, 15, 16, 30))]
    want = g.predict(shards)
    assert g.inside(shards).tolist() == [True] * 4 + [False] * 2
    sums = np.stack([g.embed(s).sum(axis=0) for s in shards])
    counts = np.array([len(s) for s in shards])
    by_sums = g.predict_sums(sums, counts)
    np.testing.assert_allclose(by_sums, want, rtol=1e-6)
    np.testing.assert_allclose(by_sums[4:], want[4:], rtol=1e-12)           # outside: the fallback, float64 both ways
    head = HeadCoster(g)
    assert head.linear_head
    np.testing.assert_allclose(head.predict(np.stack([head.rows(g.embed(s)).sum(axis=0) for s in shards]), counts),
                               by_sums, rtol=1e-9)


def test_guarded_comm_inside_outside_and_past_the_trained_leads(broad):
    comm = broad.comm
    top = comm.valid.per_g[8]
    ratio = np.array(top["ratio"])
    inside = np.full((1, 8), 200.0)
    outside = np.full((1, 8), top["max_rank_dim"] + 500.0)
    np.testing.assert_allclose(comm.predict(inside), comm.model.predict(inside))
    np.testing.assert_allclose(comm.predict(outside), ratio * comm.fallback.predict(outside))
    late = np.zeros((1, 8))
    late[0, 0] = 3 * top["max_lead_ms"]                       # every other rank waits 3x the longest trained wait
    clipped = late.copy()
    clipped[0, 0] = top["max_lead_ms"]
    extra = 2 * top["max_lead_ms"]
    wait = np.where(np.arange(8) > 0, late[0, 0], 0.0)
    want = comm.model.predict(inside, clipped)[0, :, 0] + np.where(np.arange(8) > 0, extra, 0.0)
    np.testing.assert_allclose(comm.predict(inside, late)[0, :, 0], want)
    np.testing.assert_allclose(comm.predict(outside, late)[0, :, 0],   # the envelope scales the transfer only
                               ratio[0] * comm.fallback.predict(outside)[0, :, 0] + wait)
    with pytest.raises(Exception, match="ngpu"):               # an untrained G stays the model's error
        comm.predict(np.full((1, 5), 10.0))
    assert CommRange.from_dict(comm.valid.to_dict()) == comm.valid


SIZES = [(200, 4), (1000, 8), (2000, 128), (10_000, 1024)]


@pytest.mark.parametrize("profile,name", BUNDLES)
def test_plan_cost_is_finite_positive_and_monotone_where_the_fallback_costs(profile, name):
    """At every size up to 10,000 x 1,024: a random plan's predicted cost is finite and positive;
    adding a table to a device never lowers it wherever the fallback (or an analytic model)
    costs that device before and after and the all-to-alls -- which, at these sizes, is most
    additions. (A learned model inside its range is as monotone as it learned to be:
    ``studies/valid_range`` measures how often it is not.)"""
    bundle = load_bundle(name, profile)
    rng = np.random.default_rng(7)
    checked = tried = 0
    for n, g in SIZES:
        tables = _tables(n + 8, seed=n)
        spare = tables[n:]
        shards: list[list[Table]] = [[] for _ in range(g)]
        for t, d in zip(tables[:n], rng.integers(0, g, n)):
            shards[int(d)].append(t)
        before = bundle.simulate(shards)
        assert np.isfinite(before.total).all() and before.cost_ms > 0, (n, g)
        comm = bundle.comm_for(g)[0]
        for t in spare:
            k = int(rng.integers(g))
            grown = [list(s) for s in shards]
            grown[k].append(t)
            after = bundle.simulate(grown)
            assert np.isfinite(after.total).all() and after.cost_ms > 0, (n, g)
            tried += 1
            fallback_compute = not isinstance(bundle.compute, GuardedCompute) or not bundle.compute.inside(
                [shards[k], grown[k]]).any()
            fallback_comm = not isinstance(comm, GuardedComm) or g not in comm.valid.per_g or not comm.valid.inside(
                np.array([[sum(x.dim for x in s) for s in grown]]))[0]
            if fallback_compute and fallback_comm:
                checked += 1
                assert after.cost_ms >= before.cost_ms * (1 - 1e-12), (n, g, k)
    assert checked >= tried // 2, (checked, tried)


def test_plans_and_evaluations_say_what_the_fallback_costed(broad):
    roomy = generate_task(ntables=20, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=3)
    plan = NeuroShardSharder(model=broad, columns=False).shard(roomy)
    assert "valid_range" not in plan.metadata
    assert "outside valid range" not in estimate_plan(roomy, plan, broad, lower_bound=False).source
    big = Task("big", 4, 64.0, tuple(_tables(300)), 4096)
    plan = NeuroShardSharder(model=broad, columns=False).shard(big)
    report = plan.metadata["valid_range"]
    assert report["compute_devices"] == 4 and report["ngpu"] == 4 and report["comm"] is True
    assert report["compute_fallback"].startswith("analytic:cpu") and " x (" in report["compute_fallback"]
    source = estimate_plan(big, plan, broad, lower_bound=False).source
    assert "+outside valid range: compute of 4 of 4 devices by analytic:cpu" in source
    assert "all-to-alls by analytic:cpu" in source
    shards = [[t for t in big.tables if t.name in {p.table for p in plan.placements if p.device == d}] for d in range(4)]
    assert range_report(broad.compute, broad.comm_for(4)[0], shards) == report
    np.testing.assert_allclose(estimate_plan(big, plan, broad, lower_bound=False).cost_ms,
                               plan.metadata.get("split_guard", {}).get("predicted_ms",
                                                                       broad.simulate(shards).cost_ms))
