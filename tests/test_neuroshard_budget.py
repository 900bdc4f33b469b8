"""Column-wise NeuroShard with a time budget (``neuroshard[search_budget_s=...]``): the table-wise
pass always runs, a beam round only when its estimated time fits what is left, the plan says
what the budget did; a budget lifts the size bounds that otherwise refuse at once; a roomy
budget changes no plan."""

from __future__ import annotations

import pytest

from shardlab import constants as C
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.search.neuroshard import NeuroShardSharder
from shardlab.search.registry import run_sharder


@pytest.fixture(scope="module")
def task():
    return generate_task("dlrm-synth", 24, 4, seed=7)


def _layout(plan):
    return sorted((p.table, p.col_offset, p.cols, p.row_offset, p.device) for p in plan.placements)


def test_a_roomy_budget_changes_no_plan_and_says_what_it_did(task):
    plain = run_sharder(NeuroShardSharder(), task, 0)
    budgeted = run_sharder(NeuroShardSharder(search_budget_s=3600.0), task, 0)
    assert _layout(budgeted) == _layout(plain) and "search_budget" not in plain.metadata
    record = budgeted.metadata["search_budget"]
    assert record["budget_s"] == 3600.0 and not record["stopped_by_budget"]
    assert 1 <= record["beam_rounds"] <= record["most_beam_rounds"] == 10 and record["beam_seconds"] > 0


def test_a_budget_already_spent_runs_no_beam_round(task):
    plan = run_sharder(NeuroShardSharder(search_budget_s=1e-9, portfolio=()), task, 0)
    record = plan.metadata["search_budget"]
    assert record["stopped_by_budget"] and record["beam_rounds"] == 0
    # the best plan so far is the table-wise one: every table whole
    assert all(p.cols == t.dim for p in plan.placements for t in task.tables if t.name == p.table)
    assert plan.metadata["split_guard"]["splits"] == 0


def test_a_budget_lifts_the_size_bounds_that_refuse_at_once(task, monkeypatch):
    monkeypatch.setattr(C, "MAX_NEUROSHARD_WORK", 10)
    with pytest.raises(ShardlabError, match=r"give it a time budget \(shard --budget 60s, or search_budget_s=60\)"):
        run_sharder(NeuroShardSharder(), task, 0)
    plan = run_sharder(NeuroShardSharder(search_budget_s=1e-9), task, 0)     # whichever plan the portfolio picks
    assert plan.metadata["search_budget"]["beam_rounds"] == 0
    monkeypatch.setattr(C, "MAX_NEUROSHARD_GPUS", 2)
    with pytest.raises(ShardlabError, match="field 'ngpu' = 4 is over the column-wise neuroshard"):
        run_sharder(NeuroShardSharder(), task, 0)
    assert run_sharder(NeuroShardSharder(search_budget_s=1e-9), task, 0).ngpu == 4


@pytest.mark.parametrize("bad", [0, -1.0, True, "60", C.MOST_SEARCH_BUDGET_S * 2, float("nan")])
def test_bad_budgets_are_refused_naming_the_field(bad):
    with pytest.raises(ShardlabError, match="field 'search_budget_s'"):
        NeuroShardSharder(search_budget_s=bad)


def test_the_beam_clock_costs_a_round_in_pieces_that_fit_what_is_left(monkeypatch):
    import shardlab.search.beam_budget as bb
    now = [0.0]
    monkeypatch.setattr(bb.time, "perf_counter", lambda: now[0])
    clock = bb.BeamClock(10.0, 0.0)
    sizes = []
    for piece in clock.chunks(list(range(20))):
        sizes.append(len(piece))
        now[0] += 1.0 * len(piece)                # one second per state
    assert sizes == [1, 4, 2, 1, 1, 1] and clock.stopped and clock.evaluated_in_round == 10 and now[0] == 10.0
    free = bb.BeamClock(None, 0.0)
    assert [len(p) for p in free.chunks(list(range(20)))] == [20] and not free.stopped


def test_the_shard_verb_takes_a_search_budget_and_the_plan_says_what_it_did(task, tmp_path, capsys):
    from shardlab.cli import main
    from shardlab.io import load_plan, save_task

    save_task(task, str(tmp_path / "t.json"))
    out = tmp_path / "p.json"
    assert main(["shard", str(tmp_path / "t.json"), "--method", "neuroshard", "--profile", "cpu", "--budget", "10m",
                 "--out", str(out)]) == 0
    assert load_plan(str(out)).metadata["search_budget"]["budget_s"] == 600.0
    assert main(["shard", str(tmp_path / "t.json"), "--method", "size_greedy", "--budget", "1m"]) == 2
    assert "field 'budget' does not apply to method 'size_greedy'" in capsys.readouterr().err
    assert main(["shard", str(tmp_path / "t.json"), "--method", "neuroshard", "--budget", "1m",
                 "--set", "search_budget_s=5"]) == 2
    assert "disagrees with --set search_budget_s=5" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["shard", str(tmp_path / "t.json"), "--method", "neuroshard", "--budget", "soon"])
