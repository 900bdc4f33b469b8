"""Each numeric setting's range is declared once (shardlab.bounds) and every entry point reads it
there: a bound changed in that one table is what the command line, the notebooks' parameter
checks, the RL Args, the sharder options, the evaluators and the torchrun entry point refuse."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from shardlab import bounds
from shardlab.bounds import BOUNDS, Bound, check_bound
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError

ROOT = Path(__file__).resolve().parents[1]


def test_a_bound_admits_its_range_and_says_it():
    b = Bound(1, 1000, what="timed rounds per sitting")
    assert b.admits(1) and b.admits(1000) and b.admits(7.0)
    for bad in (0, 1001, 2.5, True, "3", None, float("nan"), float("inf")):
        assert not b.admits(bad), bad
    assert b.requirement == "must be an integer in [1, 1,000] (timed rounds per sitting)"
    gb = Bound(0, 1e6, integer=False, least_excluded=True)
    assert gb.admits(1e-9) and not gb.admits(0) and gb.requirement == "must be a number in (0, 1e+06]"
    assert Bound(0).requirement == "must be an integer >= 0"
    with pytest.raises(ShardlabError, match=r"^x: field 'rounds' = 0 must be an integer in \[1, 1,000\]"):
        check_bound("x", "rounds", 0)


@pytest.fixture
def rounds_at_most_7(monkeypatch):
    monkeypatch.setitem(BOUNDS, "rounds", Bound(1, 7))
    monkeypatch.setitem(BOUNDS, "beam_width", Bound(1, 2))
    monkeypatch.setitem(BOUNDS, "updates", Bound(1, 5))
    return "must be an integer in [1, 7]"


def test_one_changed_bound_is_refused_at_every_entry_point(rounds_at_most_7, tmp_path, capsys):
    from shardlab import Plan
    from shardlab.cli import main
    from shardlab.dist import evaluate as dist_evaluate
    from shardlab.dist import build_parser as dist_parser
    from shardlab.dist import main as dist_main
    from shardlab.evaluate import MeasuredEvaluator
    from shardlab.torchrec import TorchRecEvaluator
    from shardlab.io import save_plan, save_task, strict_bounded
    from shardlab.search import get_sharder
    from shardlab.workflows.rl_args import AutoShardArgs

    task = generate_task(ntables=4, ngpu=2, mem_cap_gb=2.0, batch_size=256, seed=3, dims=[16])
    plans = {"a": Plan.table_wise(task, [0, 0, 1, 1], "a"), "b": Plan.table_wise(task, [0, 0, 0, 1], "b")}
    save_task(task, tmp_path / "t.json")
    save_plan(plans["a"], tmp_path / "a.json")
    # the command line
    assert main(["compare", str(tmp_path / "t.json"), str(tmp_path / "a.json"), "--measure", "--rounds", "8"]) == 2
    assert f"option '--rounds' = 8 {rounds_at_most_7}" in capsys.readouterr().err
    # a notebook's parameter check
    with pytest.raises(ShardlabError, match=re.escape(f"parameter 'rounds' = 8 {rounds_at_most_7}")):
        strict_bounded(8, "rounds")
    assert strict_bounded(7, "rounds") == 7
    # the evaluators
    for ev in (MeasuredEvaluator("cpu", rounds=8, progress=False), TorchRecEvaluator("cpu", rounds=8)):
        with pytest.raises(ShardlabError, match=re.escape(f"field 'rounds' = 8 {rounds_at_most_7}")):
            ev.evaluate(task, plans)
    # the torchrun entry point (checked before it joins a group): its flags, as shardlab dist's, and its API
    dist_args = ["evaluate", str(tmp_path / "t.json"), str(tmp_path / "a.json"), "--measure", "--rounds", "8",
                 "--out", str(tmp_path / "o.json")]
    for run in (lambda: main(["dist", *dist_args]), lambda: dist_main(dist_args)):
        assert run() == 2
        assert re.escape(f"option '--rounds' = 8 {rounds_at_most_7}") in re.escape(capsys.readouterr().err)
    args = dist_parser().parse_args(dist_args)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("RANK", "0"), m.setenv("WORLD_SIZE", "2")
        with pytest.raises(ShardlabError, match=re.escape(f"field 'rounds' = 8 {rounds_at_most_7}")):
            dist_evaluate(args)
    # a sharder's option and the RL Args
    with pytest.raises(ShardlabError, match=re.escape("field 'beam_width' = 3 must be an integer in [1, 2]")):
        get_sharder("neuroshard[beam_width=3]")
    with pytest.raises(ShardlabError, match=re.escape("field 'updates' = 6 must be an integer in [1, 5]")):
        AutoShardArgs(updates=6)


def test_no_entry_point_states_a_bound_of_its_own():
    """The ranges BOUNDS holds are written nowhere else: no ``strict_int`` in the notebooks, no
    ``must be >= 1``-style literal for a bounded name in the checking code."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert "strict_int(" not in path.read_text(), path.name
    checked = ["shardlab/cli/checks.py", "shardlab/workflows/rl_args.py", "shardlab/search/neuroshard.py",
               "shardlab/evaluate/measured.py", "shardlab/torchrec/evaluator.py", "shardlab/dist.py",
               "shardlab/workflows/verify.py", "shardlab/io.py"]
    for rel in checked:
        tree = ast.parse((ROOT / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in BOUNDS:
                    assert not re.search(rf"'{name}' = .* must be|field '{name}'.*must be (>=|in \[)", node.value), \
                        (rel, name, node.value)
    assert bounds.BOUNDS is BOUNDS
