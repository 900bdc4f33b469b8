"""Held-out model families measured and judged: tasks, a small real measurement, errors."""

import math

from shardlab.costmodel.bundle import load_bundle
from shardlab.experiments.heldout import KIND, heldout_errors, heldout_tasks, measure_heldout
from shardlab.profile.hardware import profile_with
from shardlab.profile.store import SampleStore


def test_tasks_take_all_then_fewer_tables_with_rows_capped():
    tasks = heldout_tasks("taobao_tzrec_din", 3, 4, 256, 4.0, 50_000)
    assert [len(t.tables) for t in tasks] == sorted((len(t.tables) for t in tasks), reverse=True)
    assert len(tasks[0].tables) == 19 and all(t.rows <= 50_000 for task in tasks for t in task.tables)
    assert any("rows capped" in t.source for t in tasks[0].tables)


def test_measure_resume_and_judge(tmp_path):
    store = str(tmp_path / "h.db")
    fast = profile_with("cpu", batch_size=128, repeats=2, warmup=1)
    kw = dict(sets=["amazon_electronics_hugectr_bst"], tasks_per_set=1, ngpu=2, profile=fast, rounds=3,
              max_rows=20_000, methods=["random", "lookup_greedy", "neuroshard_tw"], model="analytic",
              progress=False)
    assert measure_heldout(store, **kw) == 1
    assert measure_heldout(store, **kw) == 0
    with SampleStore(store) as s:
        samples = list(s.samples(KIND))
    ev = samples[0]["evaluations"]["random"]
    assert samples[0]["set"] == "amazon_electronics_hugectr_bst" and len(ev["rounds_ms"]) == 3
    assert ev["source"].startswith("measured:")
    out = heldout_errors(samples, load_bundle("analytic"))
    row = out["amazon_electronics_hugectr_bst"]
    assert row["plans"] == 3 and row["shards"] >= 3 and out["all"]["plans"] == 3
    assert math.isfinite(row["shard_compute"]["mape"]) and math.isfinite(row["plan_cost_error_median"])


def test_search_verdicts_count_wins_and_losses_against_every_baseline():
    from shardlab.evaluate import ModelEvaluator
    from shardlab.experiments.heldout import search_verdicts
    from shardlab.search import get_sharder, run_sharder
    from tests.rounds_fakes import as_measured

    task = heldout_tasks("avazu_fec_dlrm", 1, 4, 4096, 4.0, 200_000)[0]
    plans = {m: run_sharder(get_sharder(m, **({"model": "analytic"} if m.startswith("neuroshard") else {})), task, 0)
             for m in ("random", "lookup_greedy", "neuroshard_tw", "neuroshard")}
    predicted = ModelEvaluator("analytic").evaluate(task, plans)

    def sample(index, scale):
        evs = as_measured(predicted, rounds=6, noise=0.01, scale=scale, seed=index)
        return {"set": "avazu_fec_dlrm", "index": index, "task": task.to_dict(),
                "plans": {m: p.to_dict() for m, p in plans.items()},
                "evaluations": {m: e.to_dict() for m, e in evs.items()}}

    # task 0: neuroshard 0.6x every other plan; task 1: 1.5x (slower than both baselines)
    base = {m: 1.0 / predicted[m].cost_ms for m in plans}
    fast = sample(0, {**base, "neuroshard": 0.6 / predicted["neuroshard"].cost_ms})
    slow = sample(1, {**base, "neuroshard": 1.5 / predicted["neuroshard"].cost_ms})
    out = search_verdicts([fast, slow], ["neuroshard", "neuroshard_tw", "not_measured"])
    k = out["counts"]["neuroshard"]
    assert (k["tasks"], k["not_slower_than_every"], k["faster_than_best"], k["slower_than_best"]) == (2, 1, 1, 1)
    assert out["counts"]["not_measured"]["tasks"] == 0
    t0, t1 = (t["methods"]["neuroshard"] for t in out["tasks"])
    assert t0["vs_best"]["verdict"] == "faster" and t0["vs_tw"]["verdict"] == "faster" and t0["slower_than"] == []
    assert sorted(t1["slower_than"]) == ["lookup_greedy", "random"] and t1["vs_tw"]["ratio"] > 1.3
    assert out["counts"]["neuroshard_tw"]["faster_than_best"] == 0


def test_verified_methods_are_measured_beside_the_others(tmp_path):
    import pytest

    from shardlab.errors import ShardlabError

    store = str(tmp_path / "v.db")
    fast = profile_with("cpu", batch_size=128, repeats=2, warmup=1)
    kw = dict(sets=["amazon_electronics_hugectr_bst"], tasks_per_set=1, ngpu=2, profile=fast, rounds=3,
              max_rows=20_000, model="analytic", progress=False)
    with pytest.raises(ShardlabError, match="verify"):
        measure_heldout(store, methods=["random", "neuroshard+verifyx"], **kw)
    assert measure_heldout(store, methods=["lookup_greedy", "neuroshard_tw+verify1"], **kw) == 1
    with SampleStore(store) as s:
        sample = list(s.samples(KIND))[0]
    plan = sample["plans"]["neuroshard_tw+verify1"]
    assert plan["method"] == "neuroshard_tw+verify1" and plan["metadata"]["verification"]["k"] == 1
    assert len(sample["evaluations"]["neuroshard_tw+verify1"]["rounds_ms"]) == 3


def test_pooled_samples_keep_every_round_of_plans_measured_alike():
    from shardlab.experiments.heldout import pooled_samples

    def sample(rounds_a, rounds_b, plan_b_device=1):
        plan = {"task": "t", "method": "a", "ngpu": 2, "seed": 0,
                "placements": [{"table": "x", "col_offset": 0, "cols": 4, "row_offset": 0, "rows": 10, "device": 0}]}
        other = {**plan, "method": "b", "placements": [{**plan["placements"][0], "device": plan_b_device}]}
        ev = lambda m, r: {"task": "t", "method": m, "source": "measured:cpu", "cost_ms": 0.0, "per_device": [],
                           "rounds_ms": r}
        return {"set": "s", "index": 0, "task": {"name": "t"}, "plans": {"a": plan, "b": other},
                "evaluations": {"a": ev("a", rounds_a), "b": ev("b", rounds_b)}}

    one, two = sample([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]), sample([5.0, 6.0, 7.0], [10.0, 12.0, 14.0])
    pooled = pooled_samples([one], [two])
    assert len(pooled) == 1 and pooled[0]["provenance"]["campaign"]["pooled_campaigns"] == 2
    assert pooled[0]["evaluations"]["a"]["rounds_ms"] == [1.0, 2.0, 3.0, 5.0, 6.0, 7.0]
    assert pooled[0]["evaluations"]["b"]["cost_ms"] == 8.0
    moved = pooled_samples([one], [sample([5.0, 6.0, 7.0], [1.0, 1.0, 1.0], plan_b_device=0)])
    assert set(moved[0]["plans"]) == {"a"}                 # b's plan differs between campaigns: dropped
    assert pooled_samples([one], []) == []
