"""The search benchmark (run by shardlab.workflows.benchmark; summarised and drawn by
shardlab.report.benchmark, benchmark_figures): one row per (task, method) with failing methods
recorded as skipped, summaries that match hand computation, win rates in [0, 1] that never
compare a method with itself, a standalone offline page, and the same simulated costs for the
same seed."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from shardlab.costmodel.bundle import load_bundle
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.io import names_list
from shardlab.constants import BASELINE_METHODS as BASELINES
from shardlab.constants import EQUIVALENCE_MARGIN
from shardlab.evaluate import VERDICTS, verdict
from shardlab.workflows.benchmark import SETTINGS, as_settings, benchmark_tasks, parse_setting, run_benchmark
from shardlab.report.benchmark import best_found, summarise, summary_rows, to_best
from shardlab.report.benchmark_figures import (benchmark_widget, ratio_figure, win_matrix, win_rate_figure,
                                              write_benchmark)
from shardlab.search import registry as base

METHODS = ["random", "size_greedy", "lookup_greedy", "neuroshard[columns=false]", "always_fails"]


class AlwaysFails:
    name = "always_fails"

    def shard(self, task, seed=0):
        raise InfeasibleError(f"task '{task.name}': nothing fits\nsecond line", "t0", 1.0)


@pytest.fixture(scope="module")
def model():
    return load_bundle("neuroshard")


@pytest.fixture(scope="module")
def bench(model):
    """Two small settings, two tasks each; a sharder that always raises and an unknown name."""
    mp = pytest.MonkeyPatch()
    mp.setitem(base._REGISTRY, "always_fails", base.Registration(AlwaysFails))
    try:
        tasks = benchmark_tasks(["2x6", "4x8-14"], 2, seed=3)
        rows = run_benchmark(tasks, METHODS + ["no_such_method"], model, progress=False)
    finally:
        mp.undo()
    return tasks, rows


def test_parse_setting():
    assert parse_setting("4x10-60") == (4, (10, 60)) and parse_setting("8x80") == (8, (80, 80))
    assert SETTINGS == {"4x10-60": (4, (10, 60)), "4x50": (4, (50, 50)), "8x80": (8, (80, 80))}
    for bad in ("4x", "x50", "4x60-10", "0x5", "four"):
        with pytest.raises(ShardlabError, match="setting"):
            parse_setting(bad)
    assert names_list('["4x50", "8x80"]') == names_list("4x50,8x80") == names_list(["4x50", "8x80"]) == ["4x50", "8x80"]
    assert as_settings("2x4") == {"2x4": (2, (4, 4))}
    with pytest.raises(ShardlabError, match="settings"):
        as_settings([])


def test_tasks_of_seed_0_are_the_benchmark_scripts():
    """studies/search_benchmark/run.py draws these tasks (the committed report used the first of each setting:
    58 tables at 4 x 10-60)."""
    tasks = benchmark_tasks(SETTINGS, 2, seed=0)
    assert [(s, len(t.tables), t.ngpu) for s, t in tasks] == [
        ("4x10-60", 58, 4), ("4x10-60", 41, 4), ("4x50", 50, 4), ("4x50", 50, 4), ("8x80", 80, 8), ("8x80", 80, 8)]
    assert tasks[1][1].name.endswith("seed1001") and tasks[1][1].batch_size == 4096
    other = benchmark_tasks(SETTINGS, 2, seed=1)
    assert [t.name for _, t in other] != [t.name for _, t in tasks]


def test_one_row_per_task_and_method_failures_skipped(bench):
    tasks, rows = bench
    methods = METHODS + ["no_such_method"]
    assert len(rows) == len(tasks) * len(methods)
    keys = [(r["setting"], r["task"], r["method"]) for r in rows]
    assert sorted(keys) == sorted((s, k, m) for s in ("2x6", "4x8-14") for k in range(2) for m in methods)
    for r in rows:
        if r["method"] in ("always_fails", "no_such_method"):
            assert set(r) == {"setting", "task", "method", "skipped"} and "\n" not in r["skipped"]
        else:
            assert "skipped" not in r and r["simulated_ms"] > 0
            assert r["simulated_bound_ms"] is None        # a learned judge proves no lower bound
            assert r["sim_source"].startswith("model:neuroshard") and r["search_s"] >= 0
            assert len(r["simulated_per_device"]) == (2 if r["setting"] == "2x6" else 4)
            assert r["simulated_ms"] == pytest.approx(max(
                d["fw_compute_ms"] + d["bw_compute_ms"] + d["fw_comm_ms"] + d["bw_comm_ms"]
                for d in r["simulated_per_device"]))
    assert any("nothing fits" in r.get("skipped", "") for r in rows)
    assert any("not a sharder" in r.get("skipped", "") for r in rows)


def test_summary_matches_hand_computation(bench):
    _, rows = bench
    sm = summarise(rows, METHODS, "simulated_ms")
    assert not any(m == "always_fails" for _, m in sm)          # skipped everywhere: no entry
    for setting in ("2x6", "4x8-14"):
        for m in METHODS[:-1]:
            mine = [r for r in rows if r["setting"] == setting and r["method"] == m]
            best = {k: min(r["simulated_ms"] for r in rows if "skipped" not in r and r["setting"] == setting
                           and r["task"] == k) for k in range(2)}
            ratios = [r["simulated_ms"] / best[r["task"]] for r in mine]
            s = sm[(setting, m)]
            assert s["cost_ms"] == pytest.approx(np.mean([r["simulated_ms"] for r in mine]))
            assert s["ratio_to_best"] == pytest.approx(np.mean(ratios)) and min(ratios) >= 1.0
            assert s["ratio_to_best"] == pytest.approx(np.mean([to_best(r, best_found(rows)) for r in mine]))
            assert math.isnan(s["ratio_to_bound"])                   # no bound under the learned judge
    table = summary_rows(rows, METHODS, "simulated_ms")
    fails = [t for t in table if t["method"] == "always_fails"]
    assert [(t["tasks"], t["skipped"], t["mean cost (ms)"]) for t in fails] == [(0, 2, None)] * 2
    assert all(t["mean cost / lower bound"] is None and t["mean cost / best found"] >= 1.0
               for t in table if t["method"] != "always_fails")


def _row(setting, task, method, cost, bound=10.0):
    return {"setting": setting, "task": task, "method": method, "search_s": 0.1, "simulated_ms": cost,
            "simulated_bound_ms": bound}


def test_win_rates_by_hand():
    """Strictly cheaper only; ties lose; skipped tasks are not compared; self excluded."""
    rows = [_row("s", 0, "a", 10.0), _row("s", 0, "random", 12.0),
            _row("s", 1, "a", 12.0), _row("s", 1, "random", 12.0),                      # tie: no win
            _row("s", 2, "a", 11.0), _row("s", 2, "random", 15.0),
            {"setting": "s", "task": 3, "method": "a", "skipped": "infeasible"}, _row("s", 3, "random", 99.0),
            _row("s", 3, "torchrec", 5.0, bound=None)]
    sm = summarise(rows, ["a", "random", "torchrec"], "simulated_ms", baselines=["random", "torchrec"])
    assert sm[("s", "a")]["wins"] == {"random": pytest.approx(2 / 3)}        # task 3 skipped by a
    assert sm[("s", "a")]["ratio_to_bound"] == pytest.approx(np.mean([1.0, 1.2, 1.1]))
    assert sm[("s", "a")]["ratio_to_best"] == pytest.approx(np.mean([1.0, 1.0, 1.0]))   # the cheapest each time
    assert sm[("s", "random")]["ratio_to_best"] == pytest.approx(np.mean([1.2, 1.0, 15 / 11, 99 / 5]))
    assert sm[("s", "random")]["wins"] == {"torchrec": 0.0}                   # only task 3 in common
    assert "random" not in sm[("s", "random")]["wins"]
    assert math.isnan(sm[("s", "torchrec")]["ratio_to_bound"])               # no bound at all
    assert sm[("s", "torchrec")]["wins"] == {"random": 1.0}


def test_win_rates_in_unit_interval_and_never_self(bench):
    _, rows = bench
    methods = METHODS[:-1]
    baselines = ["random", "size_greedy", "lookup_greedy"]
    sm = summarise(rows, methods, "simulated_ms", baselines)
    for (setting, m), s in sm.items():
        assert m not in s["wins"]
        assert set(s["wins"]) == set(baselines) - {m}
        assert all(0.0 <= v <= 1.0 for v in s["wins"].values())
        z = win_matrix(sm, setting, methods, baselines)
        for i, mm in enumerate(methods):
            for j, b in enumerate(baselines):
                assert (z[i][j] is None) == (mm == b)
    fig = win_rate_figure(rows, methods, "simulated_ms", BASELINES)
    assert len(fig.data) == 2 and list(fig.data[0].x) == ["random", "size_greedy", "lookup_greedy"]


def test_page_is_standalone_and_rows_round_trip(bench, tmp_path):
    _, rows = bench
    paths = write_benchmark(tmp_path / "out", rows, METHODS, provenance={"seed": 3})
    text = paths["html"].read_text()
    assert not re.search(r"<script[^>]+src=", text)
    assert "Plotly" in text and text.count("plotly-graph-div") >= 3
    assert "model:neuroshard" in text and "Skipped" in text and "nothing fits" in text
    data = json.loads(paths["json"].read_text())
    assert len(data["rows"]) == len(rows) and data["methods"] == METHODS
    assert [r["method"] for r in data["summary"]["simulated_ms"]][:len(METHODS)] == METHODS


def test_same_seed_same_simulated_costs(bench, model):
    tasks, rows = bench
    again = run_benchmark(benchmark_tasks(["2x6", "4x8-14"], 2, seed=3), METHODS[:-1], model, progress=False)
    first = {(r["setting"], r["task"], r["method"]): r for r in rows if "skipped" not in r}
    assert len(again) == len(first)
    for r in again:
        old = first[(r["setting"], r["task"], r["method"])]
        assert r["simulated_ms"] == old["simulated_ms"] and r["simulated_bound_ms"] == old["simulated_bound_ms"]
        assert r["simulated_per_device"] == old["simulated_per_device"]


def test_widget_redraws_the_chosen_setting_in_place(bench):
    _, rows = bench
    methods = METHODS[:-1]
    box = benchmark_widget(rows, methods)
    fig = box.figures["ratio"]
    before = fig
    for setting in ("4x8-14", "2x6"):
        box.controls["setting"].value = setting
        assert box.figures["ratio"] is before and fig.layout.annotations[0].text == setting
        for trace, m in zip(fig.data, methods):
            want = [to_best(r, best_found(rows)) for r in rows if r["setting"] == setting and r["method"] == m]
            assert want and all(w >= 1.0 for w in want)
            assert list(trace.y) == pytest.approx(want)


def test_measured_benchmark_shares_one_bound_per_task(model):
    """With measure=True every plan of a task is measured (real kernels, real gloo ranks) against
    one measured bound; skipped methods get no measured fields."""
    from shardlab.measure.hardware import profile_with

    fast = profile_with("cpu", batch_size=256, repeats=2, warmup=1)
    # seed 0: 0.09 GB of tables, the test 11 s alone here; seed 5's 1.3 GB took it 75 s, most of it allocating
    tasks = benchmark_tasks(["2x6"], 1, seed=0)
    lines = []
    rows = run_benchmark(tasks, ["random", "size_greedy", "no_such_method"], model, measure=True, progress=False,
                         measure_profile=fast, log=lines.append, rounds=3)
    measured = [r for r in rows if "measured_ms" in r]
    assert [r["method"] for r in measured] == ["random", "size_greedy"] and "measured_ms" not in rows[2]
    assert len({r["measured_bound_ms"] for r in measured}) == 1 and measured[0]["measured_bound_ms"] > 0
    assert all(r["source"].startswith(f"measured:{fast.name}") and r["measured_ms"] > 0 for r in measured)
    for r in measured:                     # 3 paired rounds: median, interval, a verdict against the other
        assert len(r["measured_rounds_ms"]) == 3 and r["measured_ms"] == pytest.approx(np.median(r["measured_rounds_ms"]))
        lo, hi = r["measured_ci95_ms"]
        assert lo <= r["measured_ms"] <= hi
    assert set(measured[0]["measured_vs"]) == {"size_greedy"} and set(measured[1]["measured_vs"]) == {"random"}
    paired = measured[0]["measured_vs"]["size_greedy"]        # whatever the machine's load: the rule applied
    assert paired["verdict"] in VERDICTS and paired["equivalence_margin"] == EQUIVALENCE_MARGIN
    assert paired["verdict"] == verdict(tuple(paired["ratio_ci95"]), EQUIVALENCE_MARGIN)
    assert len(lines) == 3 and "measured" in lines[0] and "no_such_method" in lines[2]


def _measured(setting, task, method, cost, verdicts, ci=(0.9, 1.1)):
    """A row measured in paired rounds: cost (ms) and its verdict against each baseline."""
    row = _row(setting, task, method, cost)
    row.update(measured_ms=cost, measured_bound_ms=10.0, source="measured:fake", measured_rounds_ms=[cost] * 3,
               measured_ci95_ms=[cost * ci[0], cost * ci[1]],
               measured_vs={b: {"ratio": 1.0, "ratio_ci95": [0.9, 1.1], "verdict": v} for b, v in verdicts.items()})
    return row


def test_measured_wins_count_only_significant_ones():
    """Only 'faster' is a win on measured costs: a lower median that is 'equivalent' or
    'inconclusive' (or an old record's 'within noise') is none (it is one when simulated); a task
    without a verdict (< 3 rounds) is not compared."""
    rows = [_measured("s", 0, "a", 9.0, {"random": "inconclusive"}), _measured("s", 0, "random", 10.0, {}),
            _measured("s", 1, "a", 8.0, {"random": "faster"}), _measured("s", 1, "random", 10.0, {}),
            _measured("s", 2, "a", 12.0, {"random": "slower"}), _measured("s", 2, "random", 10.0, {}),
            _measured("s", 3, "a", 7.0, {"random": None}), _measured("s", 3, "random", 10.0, {}),
            _measured("s", 4, "a", 9.9, {"random": "equivalent"}), _measured("s", 4, "random", 10.0, {}),
            _measured("s", 5, "a", 9.5, {"random": "within noise"}), _measured("s", 5, "random", 10.0, {})]
    measured = summarise(rows, ["a"], "measured_ms", baselines=["random"])[("s", "a")]
    assert measured["wins"] == {"random": pytest.approx(1 / 5)}                 # task 1 only; task 3 has no verdict
    assert measured["ci_half_width_pct"] == pytest.approx(10.0)
    assert summarise(rows, ["a"], "simulated_ms", baselines=["random"])[("s", "a")]["wins"] == {"random": 5 / 6}
    table = summary_rows(rows, ["a"], "measured_ms", baselines=["random"])[0]
    assert table["significant wins vs random"] == 0.2 and table["mean 95% CI half-width (%)"] == 10.0
    assert "wins vs random" in summary_rows(rows, ["a"], "simulated_ms", baselines=["random"])[0]


def test_measured_costs_come_from_the_evaluator(model, tmp_path):
    """run_benchmark costs measured plans through the Evaluator it is given (once per task, all
    plans together) and stores rounds, intervals and paired verdicts against each baseline;
    wins, the page and the markdown count significant wins only and say so."""
    from shardlab.evaluate import Evaluation, compare_to_reference
    from shardlab.report.benchmark_text import markdown_report
    from tests.rounds_fakes import FakeMeasuredEvaluator

    fake = FakeMeasuredEvaluator(rounds=5, seed=2)
    methods = ["random", "size_greedy", "lookup_greedy", "neuroshard[columns=false]"]
    tasks = benchmark_tasks(["2x6"], 2, seed=3)
    rows = run_benchmark(tasks, methods, model, progress=False, evaluator=fake, seed=2)
    assert fake.calls == len(tasks) and all(len(r["measured_rounds_ms"]) == 5 for r in rows)
    for k in range(2):
        mine = {r["method"]: r for r in rows if r["task"] == k}
        evs = {m: Evaluation("t", m, r["source"], (), None, tuple(r["measured_rounds_ms"]), None)
               for m, r in mine.items()}
        for b in ("random", "size_greedy", "lookup_greedy"):
            want = compare_to_reference(evs, reference=b, seed=2)
            for m, r in mine.items():
                assert (b in r["measured_vs"]) == (m != b)
                if m != b:
                    assert r["measured_vs"][b]["verdict"] == want[m].comparison.verdict
                    assert r["measured_vs"][b]["ratio_ci95"] == pytest.approx(want[m].comparison.ratio_ci95)
    sm = summarise(rows, methods, "measured_ms", ["random"])
    for m in ("size_greedy", "lookup_greedy", "neuroshard[columns=false]"):
        mine = [r for r in rows if r["method"] == m]
        assert sm[("2x6", m)]["wins"]["random"] == np.mean([r["measured_vs"]["random"]["verdict"] == "faster"
                                                           for r in mine])
    fig = ratio_figure(rows, methods, "measured_ms")
    points = [t for t in fig.data if t.type == "scatter" and t.name == "neuroshard[columns=false]"][0]
    mine = [r for r in rows if r["method"] == "neuroshard[columns=false]"]
    best = best_found(rows, "measured_ms")
    assert [y + u for y, u in zip(points.y, points.error_y.array)] == pytest.approx(
        [r["measured_ci95_ms"][1] / best[("2x6", r["task"])] for r in mine])
    assert [y - d for y, d in zip(points.y, points.error_y.arrayminus)] == pytest.approx(
        [r["measured_ci95_ms"][0] / best[("2x6", r["task"])] for r in mine])
    paths = write_benchmark(tmp_path, rows, methods, ("simulated_ms", "measured_ms"), ["random", "size_greedy"])
    text = paths["html"].read_text()
    assert "<h1>Search benchmark</h1>" in text
    assert "significant wins vs random" in text and "wholly below 1" in text and "within noise" not in text
    assert "&#x27;equivalent&#x27; and &#x27;inconclusive&#x27; are not wins" in text       # html-escaped
    assert "(no uncertainty)" in text and "median of 5 paired rounds with 95% CIs" in text
    report = {"date": "d", "environment": {"hardware": "h"}, "profile": {"batch_size": 4096}, "judge": "j",
              "rounds": 5, "summary": {k: {f"{s} {m}": v for (s, m), v in summarise(rows, methods, k).items()}
                                       for k in ("simulated_ms", "measured_ms")}, "neuroshard_search_seconds": {}}
    md = markdown_report(report, 2)
    assert "## simulated costs (no uncertainty)" in md and "## measured costs (median of 5 paired rounds" in md
    assert "| significant wins vs random |" in md and "| wins vs random |" in md


def test_a_measured_benchmark_with_a_budget_passes_what_a_task_leaves_to_the_tasks_after_it(model, monkeypatch):
    """budget_s is per task on average: each task's evaluator gets the run's budget less what the
    tasks before it measured for, over the tasks left."""
    import shardlab.workflows.benchmark as benchmark
    from tests.rounds_fakes import FakeMeasuredEvaluator

    budgets, took = [], iter([20.0, 100.0, 50.0])

    class Budgeted(FakeMeasuredEvaluator):
        def __init__(self, profile, rounds, seed, progress, budget_s=None):
            super().__init__(rounds=3, seed=seed)
            budgets.append(budget_s)

        def evaluate(self, task, plans):
            self.seconds_ = next(took)
            return super().evaluate(task, plans)

    monkeypatch.setattr(benchmark, "MeasuredEvaluator", Budgeted)
    tasks = benchmark_tasks(["2x6"], 3, seed=3)
    rows = run_benchmark(tasks, ["random", "size_greedy"], model, measure=True, progress=False, budget_s=60.0)
    assert budgets == [60.0, pytest.approx((180 - 20) / 2), pytest.approx(180 - 120)]
    assert all("measured_ms" in r for r in rows)
