"""Measuring with a time budget (shardlab/evaluate/sequential.py): sittings are added while a verdict
is inconclusive, decided plans drop out, each plan says why it stopped, and every look's interval
is a repeated confidence interval set by alpha spending on the budget's time scale. Driven here by simulated sittings (no timing, nothing load-dependent), and
once end to end on this machine's kernels."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.evaluate.sequential import Z_MOST, crossing_probability, level_of, next_boundary, run_sequential, spent
from shardlab.evaluate.evaluation import DeviceCost, Evaluation

RATIOS = {"ref": 1.0, "clear": 0.70, "same": 1.0, "close": 1.01}
#: Per-round noise of each plan's paired ratio (log-sd): "close" is too noisy to settle.
NOISE = {"ref": 0.0, "clear": 0.004, "same": 0.004, "close": 0.12}


def simulated(ratios=RATIOS, rounds=8, noise=NOISE, seed=0):
    """``sitting(s, names)`` with paired per-round ms (the reference's round cost shared, each plan
    at its true ratio times a little noise), the names each sitting measured, and ``evaluation``."""
    asked: list[list[str]] = []

    def sitting(s, names):
        asked.append(list(names))
        rng = np.random.default_rng([seed, s])
        base = 10.0 * (1 + 0.2 * rng.random(rounds))          # the machine drifts; pairs do not
        return {n: [np.array([[b * ratios[n] * np.exp(noise.get(n, 0.004) * rng.standard_normal()), 0, 0, 0]]) for b in base]
                for n in names}

    def evaluation(name, runs):
        mine = [r[name] for r in runs if name in r]
        costs = tuple(tuple(float(m.sum()) for m in s) for s in mine)
        return Evaluation("t", name, "measured:simulated", (DeviceCost(0, 1, 1, 0, 0, 0.1),), None,
                          tuple(x for s in costs for x in s), None, None, costs if len(costs) > 1 else None)

    return sitting, evaluation, asked


def ten_second_sittings(sitting):
    """``sitting`` on a simulated clock on which every sitting takes 10 s, and that clock."""
    now = [0.0]

    def timed(s, names):
        now[0] += 10.0
        return sitting(s, names)

    return timed, lambda: now[0]


def test_each_plan_stops_when_decided_and_drops_out_of_later_sittings():
    sitting, evaluation, asked = simulated()
    timed, clock = ten_second_sittings(sitting)
    out, done = run_sequential(timed, evaluation, list(RATIOS), "ref", budget_s=40, looks=4, seed=0,
                               margin=0.05, sitting_sd=0.0, chosen="named", clock=clock, started=0.0)
    c = {k: e.comparison for k, e in out.items()}
    # a 30% difference is not decided on sitting 1 (a look that spends nothing decides nothing), but on sitting 2
    assert c["clear"].verdict == "faster" and c["clear"].stopped == "decided after 2 of at most 4 sittings"
    assert c["same"].verdict == "equivalent" and c["same"].stopped.startswith("decided after")
    assert c["close"].verdict == "inconclusive" and c["close"].stopped.startswith("not decided in 4 sittings")
    assert "clear" in asked[1] and "clear" not in asked[2] and asked[2][0] == "ref" and "close" in asked[-1]
    assert len(done) == 4 and len(out["close"].sittings) == 4 and len(out["clear"].sittings) == 2
    # look 2 at half the budget spends alpha(0.5) (its z about 2.77), the last spends the rest of the 5%
    assert c["clear"].confidence == pytest.approx(level_of(next_boundary((Z_MOST,), spent(0.5))), abs=1e-9)
    assert 0.99 < c["clear"].confidence < 0.995 and c["close"].confidence == pytest.approx(level_of(2.043), abs=1e-3)
    lo, hi = c["clear"].ratio_ci95
    assert lo < 0.70 < hi                                   # the wider interval still holds the truth


def test_a_look_that_spends_nothing_decides_nothing():
    # a budget so long that its share stays ~0: no look spends until the last, however clear the difference
    sitting, evaluation, asked = simulated({"ref": 1.0, "clear": 0.5})
    timed, clock = ten_second_sittings(sitting)
    out, done = run_sequential(timed, evaluation, ["ref", "clear"], "ref", 1e12, 3, 0, 0.05, 0.0, "named",
                               clock=clock, started=0.0)
    assert len(done) == 3 and out["clear"].comparison.stopped == "decided after 3 of at most 3 sittings"


def test_it_stops_when_every_verdict_is_decisive_or_the_budget_is_spent():
    sitting, evaluation, asked = simulated({"ref": 1.0, "clear": 0.7})
    timed, clock = ten_second_sittings(sitting)
    out, done = run_sequential(timed, evaluation, ["ref", "clear"], "ref", 80, 8, 0, 0.05, 0.0, "named",
                               clock=clock, started=0.0)
    assert len(done) == 2 and out["clear"].comparison.verdict == "faster"
    ticks = iter(range(0, 1000, 10))                        # every clock reading 10 s later: a sitting takes 10 s
    sitting, evaluation, asked = simulated()
    out, done = run_sequential(sitting, evaluation, list(RATIOS), "ref", 25, 4, 0, 0.05, 0.0, "named",
                               clock=lambda: float(next(ticks)))
    assert len(done) == 1 and out["close"].comparison.stopped == "budget spent after 1 sittings (25 s)"


def _fixed_boundary(looks, shape):
    """A fixed-K boundary (equal z: Pocock; z ~ sqrt(K / k): O'Brien-Fleming) of total 5%, by bisection."""
    weights = [(looks / (k + 1)) ** 0.5 if shape == "obrien-fleming" else 1.0 for k in range(looks)]
    lo, hi = 1.5, 4.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if crossing_probability([mid * w for w in weights]) > 0.05 else (lo, mid)
    return hi


@pytest.mark.parametrize("looks, shape, published", [
    (2, "pocock", 2.178), (4, "pocock", 2.361), (5, "pocock", 2.413),
    (2, "obrien-fleming", 1.977), (4, "obrien-fleming", 2.024), (5, "obrien-fleming", 2.040)])
def test_the_looks_integration_reproduces_the_published_constants(looks, shape, published):
    # Jennison & Turnbull (2000), tables 2.1 and 2.3: two-sided, alpha 0.05, equal group sizes
    assert _fixed_boundary(looks, shape) == pytest.approx(published, abs=0.0015)
    assert crossing_probability([1.959964]) == pytest.approx(0.05, abs=1e-5)


def test_spending_on_the_time_scale_gives_each_look_its_share():
    for shape in ("obrien-fleming", "pocock"):
        values = [spent(t / 10, shape) for t in range(11)]
        assert values[0] == 0 and values[-1] == pytest.approx(0.05) and all(a < b for a, b in zip(values, values[1:]))
    assert spent(0.25) == pytest.approx(2 * (1 - 0.999955705), rel=1e-3)       # 2 - 2 Phi(1.96 / 0.5)
    zs, used = [], 0.0
    for k in range(1, 5):                                                     # four equally spaced looks
        spend = spent(k / 4) - used
        used += spend
        zs.append(next_boundary(tuple(zs), spend))
        assert crossing_probability(zs) == pytest.approx(used, abs=1e-6)      # each look spends its share
    assert zs[0] == pytest.approx(3.92, abs=1e-3) and all(a > b for a, b in zip(zs, zs[1:])) and 2.0 < zs[-1] < 2.06
    assert next_boundary((), 0.05) == pytest.approx(1.96, abs=1e-3)            # one look holding the whole budget
    assert next_boundary((2.0,), 0.0) == Z_MOST


def test_a_budget_of_one_sitting_is_one_plain_95_look_and_a_longer_one_narrows_at_the_end():
    def clocked(budget):
        sitting, evaluation, asked = simulated()
        timed, clock = ten_second_sittings(sitting)
        return run_sequential(timed, evaluation, list(RATIOS), "ref", budget, 8, 0, 0.05, 0.0, "named",
                              clock=clock, started=0.0)

    out, done = clocked(15)
    assert len(done) == 1 and out["close"].comparison.confidence == pytest.approx(0.95, abs=1e-4)
    assert out["clear"].comparison.verdict == "faster"          # the last look decides, even on one sitting
    assert out["close"].comparison.stopped == "budget spent after 1 sittings (15 s)"
    out, done = clocked(40)
    assert len(done) == 4 and out["close"].comparison.confidence == pytest.approx(level_of(2.043), abs=1e-3)
    # look 1 of 4 spends nothing and decides nothing (constants.SEQUENTIAL_MIN_SITTINGS); look 2 at half
    # the budget decides the clear difference at its boundary
    assert C.SEQUENTIAL_MIN_SITTINGS == 2
    assert out["clear"].comparison.stopped == "decided after 2 of at most 8 sittings"
    assert out["clear"].comparison.confidence == pytest.approx(level_of(next_boundary((Z_MOST,), spent(0.5))))


def test_bad_budgets_looks_and_spending_are_refused():
    sitting, evaluation, _ = simulated()
    for bad in (0, -1, float("nan"), float("inf"), "soon"):
        with pytest.raises(ShardlabError, match="field 'budget_s'"):
            run_sequential(sitting, evaluation, list(RATIOS), "ref", bad, 4, 0, 0.05, 0.0, "named")
    for bad in (0, 2.5, True, "4"):
        with pytest.raises(ShardlabError, match="field 'looks'"):
            run_sequential(sitting, evaluation, list(RATIOS), "ref", 60, bad, 0, 0.05, 0.0, "named")
    with pytest.raises(ShardlabError, match="field 'spending'"):
        run_sequential(sitting, evaluation, list(RATIOS), "ref", 60, 4, 0, 0.05, 0.0, "named", spending="bonferroni")


def test_a_budgeted_comparison_of_measured_plans_end_to_end(small_task):
    from shardlab.evaluate import MeasuredEvaluator
    from shardlab.measure.hardware import profile_with
    from shardlab.search import run_sharder, sharder_for

    plans = {m: run_sharder(sharder_for(m, "cpu"), small_task, 0) for m in ("size_greedy", "random")}
    ev = MeasuredEvaluator(profile_with("cpu", batch_size=256, repeats=2, warmup=1), rounds=3, warmup_rounds=0, reference="size_greedy",
                           lower_bound=False, progress=False, budget_s=600, looks=2)
    out = ev.evaluate(small_task, plans)
    c = out["random"].comparison
    took = len(out["random"].sittings)
    assert c.reference == "size_greedy" and 0.95 <= c.confidence < 1 and c.stopped
    assert 1 <= took <= 2 and out["random"].to_dict()["stopped"] == c.stopped
    assert out["random"].source.startswith("measured:cpu[batch_size=256,repeats=2,warmup=1]")  # never more repeats
    assert Evaluation.from_dict(out["random"].to_dict()).comparison == c
    from shardlab.report.uncertainty import comparison_text, level_text, uncertainty_note
    pct = level_text(c.confidence)
    assert (level_text(0.96178), level_text(1 - 4.57e-9), level_text(0.9875)) == ("96.18%", "99.999999543%", "98.75%")
    assert f"its {pct} interval (measured with a time budget" in uncertainty_note(out)
    assert f"({pct} interval) vs size_greedy" in comparison_text("random", out["random"]) and c.stopped in \
        comparison_text("random", out["random"])
    from shardlab.workflows.benchmark import measured_fields    # the benchmark keeps the sequential comparison
    vs = measured_fields(out)["random"]["measured_vs"]
    assert list(vs) == ["size_greedy"] and vs["size_greedy"]["sittings"] == took
    assert vs["size_greedy"]["stopped"] == c.stopped and vs["size_greedy"]["verdict"] == c.verdict


def test_a_budget_times_each_op_at_the_budget_settings_and_says_so():
    from shardlab import constants as C
    from shardlab.evaluate.measured import budget_profile
    from shardlab.measure.hardware import get_profile

    cpu = get_profile("cpu")
    prof = budget_profile("cpu")
    assert (prof.repeats, prof.warmup) == (C.BUDGET_OP_REPEATS, C.BUDGET_OP_WARMUP) < (cpu.repeats, cpu.warmup)
    assert prof.name.startswith("cpu[") and f"warmup={C.BUDGET_OP_WARMUP}" in prof.name
    assert ("repeats=" in prof.name) == (prof.repeats != cpu.repeats)     # the name lists what differs
    assert budget_profile(prof) == prof


@pytest.mark.parametrize("argv, words", [
    (["--measure", "--budget", "0"], "--budget must be a duration like 90s, 10m or 1h, got '0'"),
    (["--measure", "--budget", "soon"], "--budget must be a duration"),
    (["--measure", "--budget", "10m", "--sittings", "2"], "option '--sittings' = 2 does not go with --budget"),
    (["--budget", "10m"], "option '--budget' = 600.0 only applies with --measure"),
])
def test_the_command_line_budget_is_a_duration_and_refused_out_of_place(argv, words, tmp_path, small_task, capsys):
    from shardlab.cli import main
    from shardlab.cli.arguments import duration
    from shardlab.io import save_plan, save_task
    from shardlab.search import run_sharder, sharder_for

    assert (duration("90"), duration("90s"), duration("10m"), duration("1.5h")) == (90, 90, 600, 5400)
    save_task(small_task, tmp_path / "t.json")
    save_plan(run_sharder(sharder_for("size_greedy", "cpu"), small_task, 0), tmp_path / "p.json")
    try:                                   # argparse's own refusals exit; shardlab's return 2
        code = main(["compare", str(tmp_path / "t.json"), str(tmp_path / "p.json"), *argv])
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_a_notebooks_budget_is_read_by_the_same_rule():
    from shardlab.io import parse_duration

    assert parse_duration("2m", "parameter 'budget'") == 120
    with pytest.raises(ShardlabError, match=r"^parameter 'budget' = '-3m' must be a duration like 90s, 10m or 1h$"):
        parse_duration("-3m", "parameter 'budget'")
