"""Held-out model families measured and judged: tasks, a small real measurement, errors."""

import math

import pytest

from shardlab.costmodel.bundle import load_bundle
from shardlab.errors import ShardlabError
from shardlab.evaluate import ModelEvaluator
from shardlab.measure.hardware import profile_with
from shardlab.measure.store import SampleStore
from shardlab.search import get_sharder, run_sharder
from studies.common.heldout import (KIND, heldout_errors, heldout_tasks, heldout_verdicts, measure_heldout,
                                    pooled_samples, search_verdicts)
from studies.common.methods import TABLE_WISE, respelled, spec_of, split_methods
from tests.rounds_fakes import as_measured


def test_tasks_take_all_then_fewer_tables_with_rows_capped():
    tasks = heldout_tasks("taobao_tzrec_din", 3, 4, 256, 4.0, 50_000)
    assert [len(t.tables) for t in tasks] == sorted((len(t.tables) for t in tasks), reverse=True)
    assert len(tasks[0].tables) == 19 and all(t.rows <= 50_000 for task in tasks for t in task.tables)
    assert any("rows capped" in t.source for t in tasks[0].tables)


def test_measure_resume_and_judge(tmp_path):
    store = str(tmp_path / "h.db")
    fast = profile_with("cpu", batch_size=128, repeats=2, warmup=1)
    kw = dict(sets=["amazon_electronics_hugectr_bst"], tasks_per_set=1, ngpu=2, profile=fast, rounds=3,
              max_rows=20_000, methods=["random", "lookup_greedy", TABLE_WISE], model="analytic",
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
    task = heldout_tasks("avazu_fec_dlrm", 1, 4, 4096, 4.0, 200_000)[0]
    plans = {m: run_sharder(get_sharder(m, **({"model": "analytic"} if m.startswith("neuroshard") else {})), task, 0)
             for m in ("random", "lookup_greedy", TABLE_WISE, "neuroshard")}
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
    out = search_verdicts([fast, slow], ["neuroshard", TABLE_WISE, "not_measured"])
    k = out["counts"]["neuroshard"]
    assert (k["tasks"], k["faster_or_equivalent_to_every"], k["faster_than_best"],
            k["slower_than_best"]) == (2, 1, 1, 1)
    assert out["counts"]["not_measured"]["tasks"] == 0
    t0, t1 = (t["methods"]["neuroshard"] for t in out["tasks"])
    assert t0["vs_best"]["verdict"] == "faster" and t0["vs_tw"]["verdict"] == "faster" and t0["slower_than"] == []
    assert sorted(t1["slower_than"]) == ["lookup_greedy", "random"] and t1["vs_tw"]["ratio"] > 1.3
    assert out["counts"][TABLE_WISE]["faster_than_best"] == 0


def test_verified_methods_are_measured_beside_the_others(tmp_path):
    store = str(tmp_path / "v.db")
    fast = profile_with("cpu", batch_size=128, repeats=2, warmup=1)
    kw = dict(sets=["amazon_electronics_hugectr_bst"], tasks_per_set=1, ngpu=2, profile=fast, rounds=3,
              max_rows=20_000, model="analytic", progress=False)
    with pytest.raises(ShardlabError, match="verify"):
        measure_heldout(store, methods=["random", "neuroshard+verifyx"], **kw)
    verified = f"{TABLE_WISE}+verify1"
    assert measure_heldout(store, methods=["lookup_greedy", verified], **kw) == 1
    with SampleStore(store) as s:
        sample = list(s.samples(KIND))[0]
    plan = sample["plans"][verified]
    assert plan["method"] == verified and plan["metadata"]["verification"]["k"] == 1
    assert len(sample["evaluations"][verified]["rounds_ms"]) == 3


def test_pooled_samples_keep_every_round_of_plans_measured_alike():
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


def test_records_under_the_old_variant_names_are_judged_as_their_specs():
    """A record keeps the name a variant was measured under; the studies read it as the spec."""
    assert spec_of("neuroshard_tw") == TABLE_WISE and spec_of("neuroshard_tw+verify3") == TABLE_WISE + "+verify3"
    assert spec_of("neuroshard_rwcomm") == "neuroshard[rowwise_comm=shipped]" and spec_of("random") == "random"
    assert respelled({"neuroshard_pool": 1, "neuroshard": 2}) == {"neuroshard[model=neuroshard]": 1, "neuroshard": 2}
    assert split_methods("random, neuroshard[model=analytic,columns=false],,x") == [
        "random", "neuroshard[model=analytic,columns=false]", "x"]
    task = heldout_tasks("avazu_fec_dlrm", 1, 4, 4096, 4.0, 200_000)[0]
    plans = {m: run_sharder(get_sharder(m, **({"model": "analytic"} if m.startswith("neuroshard") else {})), task, 0)
             for m in ("random", TABLE_WISE, "neuroshard")}
    evs = as_measured(ModelEvaluator("analytic").evaluate(task, plans), rounds=6, noise=0.01, seed=0)
    old = {TABLE_WISE: "neuroshard_tw"}
    sample = {"set": "avazu_fec_dlrm", "index": 0, "task": task.to_dict(),
              "plans": {old.get(m, m): p.to_dict() for m, p in plans.items()},
              "evaluations": {old.get(m, m): e.to_dict() for m, e in evs.items()}}
    row = heldout_verdicts([sample])["tasks"][0]
    assert row["cw_vs_tw"] is not None and TABLE_WISE in row["vs_best_baseline"]
    counts = search_verdicts([sample], ["neuroshard_tw", "neuroshard"])["counts"]
    assert counts[TABLE_WISE]["tasks"] == 1 and counts["neuroshard"]["tasks"] == 1
