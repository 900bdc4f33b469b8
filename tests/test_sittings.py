"""Sittings as a level of the statistics, and the reference never chosen on the rounds it is
judged on. Statistics on synthetic rounds (no machine load can flip them); the measured checks
assert only structure (what was journalled, which rounds went where, how the reference was
chosen), never a verdict."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardlab import Plan
from shardlab import constants as C
from shardlab.data.hardware_profiles import profile_folder
from shardlab.cli import main
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.evaluate import MeasuredEvaluator, compare_to_reference
from shardlab.evaluate.stats import hierarchical_median_ci, paired_ratio_ci, with_sitting_spread
from shardlab.evaluate.evaluation import DeviceCost, Evaluation
from shardlab.evaluate.reference import NAMED, choose_reference
from shardlab.io import save_plan, save_task
from shardlab.measure.hardware import profile_with, sitting_spread
from shardlab.search import get_sharder, run_sharder

#: 2 timed runs per op after 1 warm-up, batch 512: structure only, nothing is judged.
PROFILE = profile_with("cpu", batch_size=512, repeats=2, warmup=1)


def _ev(method: str, sittings, source: str = "measured:cpu", spread: float | None = None) -> Evaluation:
    rounds = tuple(x for s in sittings for x in s)
    dev = (DeviceCost(0, float(np.median(rounds)), 0.0, 0.0, 0.0, 0.1),)
    return Evaluation("t", method, source, dev, None, rounds, None, None,
                      tuple(tuple(s) for s in sittings) if len(sittings) > 1 else None, sitting_log_sd=spread)


def test_one_sitting_and_no_spread_is_the_plain_bootstrap():
    x = np.random.default_rng(1).lognormal(0, 0.1, 8)
    assert hierarchical_median_ci([x], seed=3) == hierarchical_median_ci([x], seed=3, resample_sittings=False)
    assert paired_ratio_ci([x], [np.ones(8)], seed=3) == hierarchical_median_ci([x], seed=3)


def test_known_spread_widens_one_sitting_by_at_least_its_share():
    x = np.random.default_rng(2).lognormal(0, 0.02, 8)
    centre, plain = paired_ratio_ci([x], [np.ones(8)], seed=0)
    _, wide = paired_ratio_ci([x], [np.ones(8)], seed=0, sitting_sd=0.025)
    assert wide[0] <= plain[0] and wide[1] >= plain[1]
    assert np.log(centre / wide[0]) >= 1.959 * 0.025 and np.log(wide[1] / centre) >= 1.959 * 0.025
    # more sittings need less of the prior: the extra term shrinks as 1 / sqrt(S)
    one = with_sitting_spread(1.0, (1.0, 1.0), (1.0, 1.0), 0.05, 1)
    four = with_sitting_spread(1.0, (1.0, 1.0), (1.0, 1.0), 0.05, 4)
    assert np.isclose(np.log(one[1]), 2 * np.log(four[1]))
    with pytest.raises(ShardlabError, match="field 'sitting_sd'"):
        paired_ratio_ci([x], [np.ones(8)], sitting_sd=-1)


def test_sittings_that_disagree_widen_the_interval_beyond_pooled_rounds():
    rng = np.random.default_rng(4)
    ref = [np.full(8, 10.0)] * 4
    plan = [10.0 * rng.lognormal(shift, 0.01, 8) for shift in (-0.06, -0.02, 0.03, 0.07)]
    _, flat = paired_ratio_ci([np.concatenate(plan)], [np.concatenate(ref)])
    _, by_sitting = paired_ratio_ci(plan, ref)
    assert by_sitting[1] - by_sitting[0] > 1.5 * (flat[1] - flat[0])
    evs = compare_to_reference({"a": _ev("lookup_greedy", ref), "b": _ev("neuroshard", plan)}, "a", sitting_sd=0)
    assert evs["b"].comparison.ratio_ci95 == by_sitting and evs["b"].comparison.chosen == NAMED


def test_the_spread_is_the_profiles_and_travels_with_the_evaluation():
    cpu = profile_folder("cpu").sitting_log_sd
    assert cpu > 0 and sitting_spread("cpu") == cpu and sitting_spread(profile_with("cpu", batch_size=1024)) == cpu
    assert sitting_spread("a-profile-not-shipped") == 0.0
    x = np.random.default_rng(5).lognormal(0, 0.02, 8) * 10
    want = paired_ratio_ci([x], [np.full(8, 10.0)], sitting_sd=cpu)[1]
    # the reference's recorded spread is what the comparison adds, whatever its source says
    evs = {"a": _ev("lookup_greedy", [np.full(8, 10.0)], "measured:elsewhere", cpu), "b": _ev("neuroshard", [x])}
    assert compare_to_reference(evs, "a")["b"].comparison.ratio_ci95 == want
    bare = {"a": _ev("lookup_greedy", [np.full(8, 10.0)]), "b": _ev("neuroshard", [x])}
    assert compare_to_reference(bare, "a")["b"].comparison.ratio_ci95 == paired_ratio_ci([x], [np.full(8, 10.0)])[1]
    # it survives the JSON; a file written before the field gets its named shipped profile's
    assert Evaluation.from_dict(evs["a"].to_dict()).sitting_log_sd == cpu
    old = {k: v for k, v in _ev("x", [[1.0, 2.0, 3.0]]).to_dict().items() if k != "sitting_log_sd"}
    old["source"] = "measured:cpu[batch_size=1024,repeats=5] (lookups fitted for 3/30 tables)"
    assert Evaluation.from_dict(old).sitting_log_sd == cpu
    assert Evaluation.from_dict(dict(old, source="model:neuroshard")).sitting_log_sd is None
    assert Evaluation.from_dict(dict(old, source="measured:torchrec-cpu")).sitting_log_sd is None
    with pytest.raises(ShardlabError, match="field 'sitting_log_sd'"):
        Evaluation.from_dict(dict(old, sitting_log_sd="wide"))


def test_a_measured_evaluation_records_its_profiles_spread(tmp_path):
    task = generate_task(ntables=4, ngpu=2, mem_cap_gb=2.0, batch_size=256, seed=3, dims=[16])
    plans = {"a": Plan.table_wise(task, [0, 0, 1, 1], "a"), "b": Plan.table_wise(task, [0, 0, 0, 1], "b")}
    for sd, want in ((None, profile_folder("cpu").sitting_log_sd), (0.07, 0.07)):
        evs = MeasuredEvaluator(PROFILE, rounds=3, warmup_rounds=0, progress=False, reference="a", sitting_sd=sd,
                                fresh_process=False).evaluate(task, plans)
        assert {e.sitting_log_sd for e in evs.values()} == {want}


def test_sittings_survive_the_json_and_a_bad_grouping_is_one_line():
    ev = _ev("neuroshard", [[1.0, 2.0, 3.0], [4.0, 5.0]])
    d = ev.to_dict()
    assert d["sittings_ms"] == [[1.0, 2.0, 3.0], [4.0, 5.0]] and d["rounds_ms"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert Evaluation.from_dict(d) == ev and Evaluation.from_dict(d).sittings == ((1.0, 2.0, 3.0), (4.0, 5.0))
    assert "sittings_ms" not in _ev("neuroshard", [[1.0, 2.0, 3.0]]).to_dict()
    with pytest.raises(ShardlabError, match="field 'sittings_ms' must group exactly the rounds"):
        Evaluation.from_dict({**d, "sittings_ms": [[1.0, 2.0], [4.0, 5.0]]})


def test_choose_reference_says_how():
    evs = {"n": _ev("neuroshard", [[1.0] * 3]), "g": _ev("lookup_greedy", [[2.0] * 3]), "d": _ev("dim_greedy", [[3.0] * 3])}
    assert choose_reference(evs, None) == ("g", "cheapest baseline by these same costs")
    assert choose_reference(evs, "d") == ("d", NAMED)
    assert choose_reference({"n": evs["n"]}, None)[1].startswith("the first plan")


@pytest.fixture(scope="module")
def small():
    task = generate_task(ntables=6, ngpu=2, mem_cap_gb=2.0, batch_size=512, seed=5, dims=[16, 32])
    plans = {"lookup_greedy": run_sharder(get_sharder("lookup_greedy"), task),
             "size_greedy": run_sharder(get_sharder("size_greedy"), task),
             "all_on_0": Plan.table_wise(task, [0] * len(task.tables), "all_on_0")}
    return task, plans


def test_sittings_are_journalled_with_their_own_lookups_and_a_selection_sitting(small, tmp_path, monkeypatch):
    task, plans = small
    from shardlab.evaluate import plan_round
    batches = []
    real = plan_round.measure_interleaved
    monkeypatch.setattr(plan_round, "measure_interleaved",
                        lambda shards, profile, ops, first_batch, *a: batches.append(first_batch) or real(
                            shards, profile, ops, first_batch, *a))
    journal = tmp_path / "j.jsonl"
    ev = MeasuredEvaluator(PROFILE, rounds=3, sittings=2, warmup_rounds=0, lower_bound=False, progress=False,
                           fresh_process=False,                    # in process: the patched function sees it
                           journal=str(journal), seed=1)
    evs = ev.evaluate(task, plans)
    lines = [json.loads(x) for x in journal.read_text().splitlines()]
    kinds = [x["sitting"] for x in lines]
    assert kinds.count("selection") == C.SELECTION_ROUNDS * 2             # the two baselines only
    assert kinds.count(0) == kinds.count(1) == 3 * 3 and kinds[0] == "selection"
    assert set(ev.selection_) == {"lookup_greedy", "size_greedy"}
    c = evs["all_on_0"].comparison
    assert c.reference in ("lookup_greedy", "size_greedy")
    assert c.reference == min(ev.selection_, key=lambda k: np.median(ev.selection_[k]))
    assert c.chosen == f"best baseline in a separate selection sitting of {C.SELECTION_ROUNDS} rounds"
    e = evs["all_on_0"]
    assert len(e.sittings) == 2 and all(len(s) == 3 for s in e.sittings) and len(e.rounds_ms) == 6
    ib = PROFILE.input_batches
    assert {0, ib, 2 * ib} == set(batches)                               # each sitting, and the selection, its own
    assert json.loads(json.dumps(e.to_dict()))["reference_chosen"] == c.chosen


def test_a_named_reference_needs_no_selection_and_torchrun_takes_one_sitting(small, tmp_path):
    task, plans = small
    journal = tmp_path / "j.jsonl"
    evs = MeasuredEvaluator(PROFILE, rounds=3, warmup_rounds=0, lower_bound=False, progress=False,
                            journal=str(journal), reference="size_greedy").evaluate(task, plans)
    assert all(json.loads(x)["sitting"] == 0 for x in journal.read_text().splitlines())
    assert evs["all_on_0"].comparison.chosen == NAMED and evs["all_on_0"].sittings_ms is None
    for bad in (0, True):
        with pytest.raises(ShardlabError, match="field 'sittings'"):
            MeasuredEvaluator(PROFILE, sittings=bad).evaluate(task, plans)

    class Group:
        rank, world_size = 0, 2
    with pytest.raises(ShardlabError, match="must be 1 under torchrun"):
        MeasuredEvaluator(PROFILE, sittings=2, group=Group()).evaluate(task, plans)


def test_compare_verb_takes_sittings(small, tmp_path, capsys):
    task, plans = small
    tp = save_task(task, tmp_path / "task.json")
    a, b = save_plan(plans["lookup_greedy"], tmp_path / "a.json"), save_plan(plans["all_on_0"], tmp_path / "b.json")
    assert main(["compare", str(tp), str(a), str(b), "--sittings", "2"]) == 2
    assert "option '--sittings' = 2 only applies with --measure" in capsys.readouterr().err
    args = ["compare", str(tp), str(a), str(b), "--measure", "--rounds", "3", "--sittings", "2", "--batch-size", "512",
            "--repeats", "2", "--warmup", "1", "--no-bound", "--no-progress", "--reference", "lookup_greedy"]
    assert main(args + ["--out", str(tmp_path / "o.json")]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "2 sittings x 3 paired rounds" in head and "reference lookup_greedy: named" in head
    saved = json.loads((tmp_path / "o.json").read_text())
    assert all(len(d["sittings_ms"]) == 2 for d in saved)
    assert main(args[:-2] + ["--sittings", "0"]) == 2
