"""Statistics of paired rounds (bootstrap intervals, paired ratios, verdicts), the Evaluation
JSON's optional paired-round fields, the reference plan, the one schedule and lower bound, and
the model-based Evaluator. No measuring here (tests/test_paired_rounds.py measures)."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab import Plan, ShardlabError
from shardlab.costmodel.base import simulate_many
from shardlab.data.tasks import generate_task
from shardlab.evaluate import (Comparison, DeviceCost, Evaluation, Evaluator, ModelEvaluator, MeasuredEvaluator,
                               bootstrap_median_ci, compare_to_reference, paired_ratios, resolve_reference,
                               round_orders, verdict)
from shardlab.schedule import forward_delays, lower_bound_ms
from shardlab.search import get_sharder, run_sharder


def _ev(method: str, rounds: list[float] | None, cost: float = 1.0) -> Evaluation:
    dev = (DeviceCost(0, cost, 0.0, 0.0, 0.0, 0.1),)
    return Evaluation("t", method, "measured:test", dev, None, tuple(rounds) if rounds else None,
                      bootstrap_median_ci(rounds) if rounds else None)


def test_bootstrap_interval_is_seeded_and_brackets_the_median():
    x = [10.0, 11.0, 9.5, 10.2, 10.8, 9.9, 10.4]
    a, b = bootstrap_median_ci(x, seed=3), bootstrap_median_ci(x, seed=3)
    assert a == b and a[0] <= np.median(x) <= a[1] and a[0] < a[1]
    assert bootstrap_median_ci(x[:2]) is None                   # too few rounds: no interval
    with pytest.raises(ShardlabError, match="values"):
        bootstrap_median_ci([1.0, float("nan"), 2.0])


def test_verdicts_follow_the_interval():
    assert verdict((0.80, 0.95)) == "faster" and verdict((1.02, 1.3)) == "slower"
    assert verdict((0.97, 1.01)) == "equivalent" and verdict((0.90, 1.01)) == "inconclusive"
    assert verdict(None) is None
    with pytest.raises(ShardlabError, match="rounds_ms"):
        paired_ratios([1.0, 2.0], [1.0])


def test_paired_ratios_see_through_drift_that_hides_the_difference_in_raw_times():
    # Both plans drift together by up to 60% between rounds (as on the shared VM); B is always
    # 10% slower. Raw medians overlap; paired ratios give a tight "slower".
    drift = np.array([1.0, 1.6, 1.2, 0.9, 1.5, 1.1, 1.3, 1.0])
    rng = np.random.default_rng(0)
    a = 10.0 * drift * rng.normal(1.0, 0.01, drift.size)
    b = 11.0 * drift * rng.normal(1.0, 0.01, drift.size)
    ca, cb = bootstrap_median_ci(a), bootstrap_median_ci(b)
    assert ca[1] > cb[0]                                         # the raw intervals overlap
    evs = compare_to_reference({"a": _ev("a", list(a)), "b": _ev("b", list(b))}, reference="a")
    c = evs["b"].comparison
    assert c.verdict == "slower" and c.ratio == pytest.approx(1.1, rel=0.03) and c.ratio_ci95[0] > 1.0
    assert evs["a"].comparison.ratio == 1.0 and evs["a"].comparison.verdict == "equivalent"


def test_false_alarms_and_power_on_synthetic_rounds():
    # Equal plans with 5% per-round noise, 10 rounds: "faster"/"slower" should be rare (the
    # interval is a 95% one; the percentile bootstrap of a median of 10 runs a little liberal).
    rng = np.random.default_rng(1)
    alarms = 0
    for _ in range(300):
        r = rng.lognormal(0.0, 0.05, 10)
        alarms += verdict(bootstrap_median_ci(r, seed=int(rng.integers(1 << 30)))) in ("faster", "slower")
    assert alarms / 300 < 0.12
    # A real 8% difference under the same noise is found nearly always.
    found = sum(verdict(bootstrap_median_ci(rng.lognormal(np.log(1.08), 0.05, 10))) == "slower"
                for _ in range(100))
    assert found >= 80


def test_reference_defaults_to_the_best_baseline():
    evs = {"neuroshard": _ev("neuroshard", None, 1.0), "random": _ev("random", None, 3.0),
           "dim_greedy": _ev("dim_greedy", None, 2.0)}
    assert resolve_reference(evs, None) == "dim_greedy"
    assert resolve_reference({"a": _ev("a", None)}, None) == "a"          # no baseline: the first plan
    with pytest.raises(ShardlabError, match="field 'reference'"):
        resolve_reference(evs, "nope")


def test_evaluation_json_round_trip_and_old_files():
    ev = compare_to_reference({"a": _ev("a", [1.0, 1.1, 0.9, 1.0]), "b": _ev("b", [2.0, 2.1, 2.2, 1.9])}, "a")["b"]
    d = ev.to_dict()
    assert d["rounds_ms"] == [2.0, 2.1, 2.2, 1.9] and d["cost_ms"] == pytest.approx(2.05)
    assert d["reference"] == "a" and d["verdict"] == "slower" and len(d["ratio_ci95"]) == 2
    assert d["equivalence_margin"] == 0.05
    back = Evaluation.from_dict(d)
    assert back.to_dict() == d
    old = {k: v for k, v in d.items() if k not in ("rounds_ms", "ci95_ms", "reference", "ratio_to_reference",
                                                   "ratio_ci95", "verdict", "equivalence_margin")}
    plain = Evaluation.from_dict(old)
    assert plain.rounds_ms is None and plain.comparison is None and plain.cost_ms == d["per_device"][0]["total_ms"]
    with pytest.raises(ShardlabError, match="field 'verdict'"):
        Evaluation.from_dict({**d, "verdict": "better"})
    with pytest.raises(ShardlabError, match="field 'per_device' is missing"):
        Evaluation.from_dict({k: v for k, v in d.items() if k != "per_device"})


def test_round_orders_are_shuffled_and_seeded():
    names = ["a", "b", "c", "d", "<lower bound>"]
    o1, o2 = round_orders(names, 6, seed=7), round_orders(names, 6, seed=7)
    assert o1 == o2 and all(sorted(o) == sorted(names) for o in o1)
    assert len({tuple(o) for o in o1}) > 1                       # not the same order every round
    assert round_orders(names, 6, seed=8) != o1


def test_one_schedule_for_measured_and_simulated_plans():
    assert list(forward_delays(np.array([3.0, 1.0, 2.5]))) == [2.0, 0.0, 1.5]
    assert lower_bound_ms(40.0, 4, [[1.0, 2.0], [0.5, 1.0], [2.0, 2.0], [1.0, 1.0]]) == pytest.approx(11.5)
    assert lower_bound_ms(40.0, 1, None) == 40.0

    class Comm:           # forward = 1 ms + waiting for the latest rank; backward 2 ms per rank
        def predict(self, dims, delays=None):
            d = np.zeros(np.shape(dims)) if delays is None else np.asarray(delays)
            return np.stack([1.0 + d.max(axis=-1, keepdims=True) - d, np.full(np.shape(dims), 2.0)], axis=-1)

    sim = simulate_many(np.array([[[3.0, 1.0], [1.0, 0.0]]]), np.array([[8, 8]]), Comm())[0]
    # ready = compute + bw = [6, 3]: the early device waits 3 ms inside its forward comm
    assert list(sim.fw_comm) == [1.0, 4.0] and list(sim.total) == [7.0, 7.0]


def test_model_evaluator_is_an_evaluator_with_one_bound_and_ratios():
    task = generate_task(ntables=12, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=5)
    plans = {m: run_sharder(get_sharder(m), task) for m in ("random", "lookup_greedy", "neuroshard[columns=false]")}
    ev = ModelEvaluator("analytic")
    assert isinstance(ev, Evaluator) and isinstance(MeasuredEvaluator(), Evaluator)
    out = ev.evaluate(task, plans)
    assert list(out) == list(plans) and len({e.lower_bound_ms for e in out.values()}) == 1
    ref = min(("random", "lookup_greedy"), key=lambda m: out[m].cost_ms)
    for m, e in out.items():
        assert e.source.startswith("analytic:") and e.comparison.reference == ref and e.verdict is None
        assert e.comparison.ratio == pytest.approx(e.cost_ms / out[ref].cost_ms)
    with pytest.raises(ShardlabError, match="field 'task'"):
        ev.evaluate(task, {"x": Plan("other", "x", 4, plans["random"].placements)})
    assert isinstance(Comparison("a", 1.0), Comparison)
