"""Ranking quality of a cost model against a measured comparison (shardlab/evaluate/ranking.py),
the compare command's ranking line, and the study driver studies/cost_models/ranking.py on a
slice of committed records (nothing is measured)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardlab import constants as C
from shardlab.data.hardware_profiles import profile_folder
from shardlab.errors import ShardlabError
from shardlab.evaluate.ranking import kendall_tau_b, pair_verdicts, ranking_quality, ranking_text
from shardlab.evaluate.evaluation import DeviceCost, Evaluation

ROOT = Path(__file__).resolve().parents[1]


def measured(costs: dict[str, float], source: str = "measured:cpu", rounds: int = 8, noise: float = 0.002,
             seed: int = 0, spread: float | str | None = "cpu") -> dict[str, Evaluation]:
    """Evaluations in paired rounds: each plan's cost (ms) times a drift shared by every plan of
    a round, plus a little noise of its own; ``spread``: the between-sitting log-sd they record
    ("cpu": the cpu profile's)."""
    spread = profile_folder("cpu").sitting_log_sd if spread == "cpu" else spread
    rng = np.random.default_rng(seed)
    drift = np.exp(rng.normal(0.0, 0.1, rounds))
    out = {}
    for name, ms in costs.items():
        r = ms * drift * np.exp(rng.normal(0.0, noise, rounds))
        out[name] = Evaluation("t", name, source, (DeviceCost(0, ms, 0.0, 0.0, 0.0, 0.0),), None, tuple(map(float, r)),
                               sitting_log_sd=spread)
    return out


COSTS = {"a": 10.0, "b": 12.0, "c": 15.0, "d": 20.0, "e": 30.0}


def test_perfect_ordering_gives_tau_one_and_every_decisive_pair_right():
    evs = measured(COSTS)
    q = ranking_quality({k: 0.5 * v + 1.0 for k, v in COSTS.items()}, evs)   # wrong scale, right order
    assert q["n_plans"] == 5 and q["pairs"] == 10
    assert q["kendall_tau"] == pytest.approx(1.0)
    assert q["decisive_pairs"] == 10 and q["decisive_right"] == 10 and q["decisive_share"] == 1.0
    assert q["margin"] == C.EQUIVALENCE_MARGIN
    assert q["plan_cost_error_median"] > 0.3                                  # the scale is off


def test_reversed_ordering_gives_minus_one_and_none_right():
    evs = measured(COSTS)
    q = ranking_quality({k: 100.0 - v for k, v in COSTS.items()}, evs)
    assert q["kendall_tau"] == pytest.approx(-1.0)
    assert q["decisive_pairs"] == 10 and q["decisive_right"] == 0 and q["decisive_share"] == 0.0


def test_equivalent_pairs_are_left_out_of_the_decisive_count():
    # a profile without a between-sitting spread; a2 within 1% of a in every round: equivalent
    evs = measured({"a": 10.0, "b": 15.0}, source="measured:test", spread=None)
    a = evs["a"]
    evs["a2"] = Evaluation("t", "a2", a.source, a.per_device, None,
                           tuple(x * (1.01 if i % 2 else 0.99) for i, x in enumerate(a.rounds_ms)))
    verdicts = pair_verdicts(evs)
    assert verdicts[("a", "a2")] == "equivalent" and verdicts[("a", "b")] == "faster"
    q = ranking_quality({"a": 10.0, "b": 15.0, "a2": 9.0}, evs, verdicts)     # the equivalent pair ordered "wrong"
    assert q["equivalent_pairs"] == 1 and q["decisive_pairs"] == 2
    assert q["decisive_right"] == 2 and q["decisive_share"] == 1.0
    assert q["kendall_tau"] < 1.0                                             # tau still sees the swap
    # the margin is the verdicts' one: at 0 the same pair is no longer equivalent
    assert pair_verdicts(evs, margin=0.0)[("a", "a2")] != "equivalent"


def test_decisive_pair_predicted_as_a_tie_counts_wrong_and_measured_ties_do_not_cap_tau():
    evs = measured(COSTS)
    q = ranking_quality({**COSTS, "b": COSTS["a"]}, evs)
    assert q["decisive_right"] == 9
    same = measured({"a": 10.0, "b": 20.0})
    evs = {**same, "a_again": same["a"]}                                      # an identical plan, measured once
    q = ranking_quality({"a": 1.0, "b": 2.0, "a_again": 1.0}, evs)
    assert q["kendall_tau"] == pytest.approx(1.0)
    assert q["decisive_pairs"] == 2 and q["decisive_share"] == 1.0


def test_bad_inputs_are_one_line_errors_naming_the_field():
    evs = measured(COSTS)
    with pytest.raises(ShardlabError, match="field 'predicted'.*different plans"):
        ranking_quality({"a": 1.0}, evs)
    with pytest.raises(ShardlabError, match="field 'predicted'.*'c'"):
        ranking_quality({**COSTS, "c": float("nan")}, evs)
    with pytest.raises(ShardlabError, match="margin"):
        ranking_quality(COSTS, evs, margin=-1)
    assert np.isnan(kendall_tau_b([1.0, 1.0], [1.0, 2.0]))


def test_ranking_text_and_the_compare_line_on_a_committed_measurement():
    evs = measured(COSTS)
    assert ranking_text(ranking_quality(COSTS, evs)) == (
        "Kendall tau 1.000 over 5 plans; decisive pairs ordered right 10/10 (100%)")
    from shardlab.cli.evaluate import ranking_line
    from shardlab.plan import Plan
    from shardlab.tables import Task
    record = json.loads((ROOT / "studies/sealed_test/results/sealed-20261128T002408Z.jsonl").read_text().splitlines()[8])
    task = Task.from_dict(record["task"])
    plans = {k: Plan.from_dict(v) for k, v in record["plans"].items()}
    evs = {k: Evaluation.from_dict(record["evaluations"][k]) for k in plans}
    args = argparse.Namespace(measure=True, profile=None, seed=None, margin=None)
    line = ranking_line(args, task, plans, evs)
    assert line.startswith(f"ranking by {profile_folder('cpu').search_model} (cpu) against these measurements: Kendall tau ")
    assert f"over {len(plans)} plans" in line
    assert ranking_line(argparse.Namespace(measure=False), task, plans, evs) is None


def test_study_driver_writes_the_report_on_a_slice_of_committed_records(tmp_path):
    cmd = [sys.executable, "studies/cost_models/ranking.py", "--sources", "cpu_heldout", "sealed_1",
           "--models", "analytic", "--max-tasks", "1", "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "ranking.json").read_text())
    assert {"made", "git", "command", "measured", "summary", "tasks", "skipped", "targets", "sources"} <= set(report)
    assert report["measured"] == "nothing"
    assert [t["source"] for t in report["tasks"]] == ["cpu_heldout", "sealed_1"]
    s = report["summary"]["analytic"]
    assert {"cpu_heldout", "sealed_1", "all"} == set(s)
    assert {"tasks", "plans", "kendall_tau_median", "decisive_pairs", "decisive_right", "decisive_share",
            "plan_cost_error_median"} <= set(s["all"])
    assert s["all"]["tasks"] == 2 and -1.0 <= s["all"]["kendall_tau_median"] <= 1.0
    md = (tmp_path / "ranking.md").read_text()
    assert "Nothing was measured" in md and "| analytic | cpu_heldout | 1 |" in md
    again = tmp_path / "again"
    subprocess.run(cmd[:-1] + [str(again)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    first, second = (json.loads((p / "ranking.json").read_text()) for p in (tmp_path, again))
    assert first["summary"] == second["summary"] and first["tasks"] == second["tasks"]   # deterministic


def test_the_measurement_split_in_halves_pairs_sittings_or_rounds_and_ranks_one_against_the_other():
    from dataclasses import replace

    sys.path.insert(0, str(ROOT))
    from studies.cost_models.ranking import self_row, split_halves

    evs = measured(COSTS, rounds=8)
    a, b, how = split_halves(evs)
    assert how == "rounds"
    for k, e in evs.items():             # even-numbered rounds against odd-numbered ones, medians
        assert a[k] == pytest.approx(np.median(e.rounds_ms[0::2])) and b[k] == pytest.approx(np.median(e.rounds_ms[1::2]))
    by_sitting = {k: replace(e, sittings_ms=(e.rounds_ms[:3], e.rounds_ms[3:5], e.rounds_ms[5:])) for k, e in evs.items()}
    a, b, how = split_halves(by_sitting)
    assert how == "sittings"             # sittings 0 and 2 against sitting 1
    for k, e in evs.items():
        assert a[k] == pytest.approx(np.median(e.rounds_ms[:3] + e.rounds_ms[5:]))
        assert b[k] == pytest.approx(np.median(e.rounds_ms[3:5]))
    assert split_halves(measured(COSTS, rounds=3)) is None          # a half of 1 round: no split
    row = self_row(evs, pair_verdicts(evs), 0)      # well-separated plans, little noise: it agrees with itself
    assert row["kendall_tau"] == pytest.approx(1.0) and row["decisive_right"] == row["decisive_pairs"] > 0
    assert row["plan_cost_error_median"] < 0.02
    noisy = measured({k: 10.0 for k in COSTS}, rounds=8, noise=0.2, seed=3)   # equal plans, noise alone
    assert self_row(noisy, pair_verdicts(noisy), 0)["kendall_tau"] < 0.8


def test_study_driver_recosts_the_search_model_with_the_calibration_a_plan_recorded(tmp_path):
    cmd = [sys.executable, "studies/cost_models/ranking.py", "--sources", "heldout_scale", "--models", "analytic",
           "--max-tasks", "6", "--calibrated", "analytic_broad80", "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "ranking.json").read_text())
    cal, same = "analytic_broad80 + task calibration", "analytic_broad80 on those tasks, uncalibrated"
    with_record = [t for t in report["tasks"] if cal in t["models"]]
    # the first run's five tasks predate task calibration; the sixth task's NeuroShard plan recorded one
    assert len(report["tasks"]) == 6 and len(with_record) == 1
    row, plain = with_record[0]["models"][cal], with_record[0]["models"][same]
    assert row["applied"] is True and row["n_plans"] == plain["n_plans"]
    assert row["plan_cost_error_median"] != pytest.approx(plain["plan_cost_error_median"], rel=1e-6)
    assert report["summary"][cal]["all"]["tasks"] == report["summary"][same]["all"]["tasks"] == 1
    bad = subprocess.run(cmd[:-4] + ["--calibrated", "no_such_model", "--out", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "field 'calibrated'" in bad.stderr and bad.stderr.count("\n") == 1
