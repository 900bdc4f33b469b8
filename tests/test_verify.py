"""Search that checks itself: NeuroShard's ranked candidate plans and ``--verify K``, which
measures them with the best heuristic plan in paired rounds and returns the measured best."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shardlab.cli import main
from shardlab.costmodel.bundle import load_bundle
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.constants import EQUIVALENCE_MARGIN
from shardlab.evaluate import ModelEvaluator, estimate_plan, verdict
from shardlab.workflows.verify import VerifiedSharder, best_heuristic
from shardlab.plan import Plan, validate_plan
from shardlab.search import get_sharder
from tests.rounds_fakes import as_measured


@pytest.fixture(scope="module")
def analytic():
    return load_bundle("analytic")


@pytest.fixture(scope="module")
def task():
    return generate_task(ntables=24, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=11)


def test_candidates_are_distinct_ranked_and_start_with_the_search_result(analytic, task):
    # unguarded, the ranking is the model's predicted cost (guarded ranking: test_split_guard.py)
    sharder = get_sharder("neuroshard", model=analytic, max_splits=3, split_guard=False)
    cands = sharder.candidates(task, 0, 4)
    assert 2 <= len(cands) <= 4
    sigs = {tuple(sorted((p.table, p.col_offset, p.cols, p.device) for p in c.placements)) for c in cands}
    assert len(sigs) == len(cands)
    for c in cands:
        validate_plan(task, c)
    costs = [estimate_plan(task, c, analytic, lower_bound=False).cost_ms for c in cands]
    assert costs == sorted(costs)
    assert cands[0].placements == sharder.shard(task, 0).placements


class ScaledEvaluator:
    """Measured-looking Evaluations: the analytic prediction times ``scale[name]`` per plan,
    in paired rounds (so a test can make the model's second choice the measured best)."""

    def __init__(self, scale):
        self.scale, self.seen = scale, []

    def evaluate(self, task, plans):
        self.seen.append(list(plans))
        return as_measured(ModelEvaluator("analytic").evaluate(task, plans), rounds=6, noise=0.01,
                           scale=self.scale, seed=3)


def test_the_measured_best_is_returned_with_its_verdicts(analytic, task):
    base = get_sharder("neuroshard", model=analytic, max_splits=3)
    fake = ScaledEvaluator({"model#1": 1.5})             # the model's choice measures 50% slower
    plan = VerifiedSharder(base, fake, k=3).shard(task, 0)
    v = plan.metadata["verification"]
    assert plan.method == "neuroshard+verify3" and v["chosen"] != "model#1"
    assert set(fake.seen[0]) == set(v["plans"]) and any(n.startswith("heuristic:") for n in v["plans"])
    costs = {n: e["cost_ms"] for n, e in v["plans"].items()}
    assert costs[v["chosen"]] == min(costs.values())     # clear-cut here: 1.5x at 1% noise
    ratios = {n: e["ratio_to_model_choice"] for n, e in v["plans"].items()}
    assert ratios["model#1"] == 1.0 and ratios[v["chosen"]] == min(ratios.values())   # the paired choice
    assert v["vs_model_choice"]["verdict"] == "faster" and v["vs_model_choice"]["ratio"] < 1
    assert v["vs_heuristic"]["verdict"] == verdict(tuple(v["vs_heuristic"]["ratio_ci95"]), EQUIVALENCE_MARGIN)
    assert v["vs_heuristic"]["equivalence_margin"] == v["vs_model_choice"]["equivalence_margin"] == EQUIVALENCE_MARGIN
    validate_plan(task, plan)
    again = VerifiedSharder(base, ScaledEvaluator({"model#1": 1.5}), k=3).shard(task, 0)
    assert again.placements == plan.placements and again.metadata == plan.metadata   # same measurements, same choice
    back = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert back.metadata == plan.metadata and back == replace(plan, metadata={})      # metadata is not identity


def test_a_slow_model_choice_and_fast_heuristic_gives_the_heuristic(analytic, task):
    base = get_sharder("neuroshard[columns=false]", model=analytic)
    heur = f"heuristic:{best_heuristic(task, analytic).method}"
    scale = {f"model#{i}": 2.0 for i in range(1, 4)}
    plan = VerifiedSharder(base, ScaledEvaluator(scale), k=3).shard(task, 0)
    assert plan.metadata["verification"]["chosen"] == heur


def test_verify_refuses_methods_without_candidates_and_bad_k(analytic):
    with pytest.raises(ShardlabError, match="verification applies to model-based sharders"):
        VerifiedSharder(get_sharder("lookup_greedy"), ScaledEvaluator({}), k=2)
    with pytest.raises(ShardlabError, match=r"field 'verify' = 0 must be an integer in \[1, 20\]"):
        VerifiedSharder(get_sharder("neuroshard", model=analytic), ScaledEvaluator({}), k=0)


def test_cli_verify_measures_and_records_the_choice(tmp_path, capsys, monkeypatch):
    small = generate_task(ntables=6, ngpu=2, mem_cap_gb=4.0, batch_size=256, seed=2)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(small.to_dict()))
    out = tmp_path / "p.json"
    assert main(["shard", str(path), "--method", "neuroshard[columns=false]", "--model", "analytic", "--verify", "2",
                 "--rounds", "3", "--profile", "cpu", "--out", str(out)]) == 0
    plan = Plan.from_dict(json.loads(out.read_text()))
    v = plan.metadata["verification"]
    assert plan.method == "neuroshard[columns=false]+verify2" and v["source"].startswith("measured:")
    assert all(e["rounds"] == 3 for e in v["plans"].values())
    assert "measured best of" in capsys.readouterr().out
    assert main(["shard", str(path), "--method", "random", "--rounds", "3"]) == 2       # --rounds needs --verify
    assert main(["shard", str(path), "--method", "random", "--verify", "2"]) == 2       # no candidates
    capsys.readouterr()
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)     # a machine without a GPU
    assert main(["shard", str(path), "--method", "neuroshard[columns=false]", "--verify", "2"]) == 2   # h100 by default
    assert "profile 'h100' measures on a CUDA GPU" in capsys.readouterr().err
