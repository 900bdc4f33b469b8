"""The `shardlab` command line: tasks and shard verbs, one-line summaries, JSON output,
one-line errors with a non-zero exit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from shardlab import Task
from shardlab.cli import main
from shardlab.io import load_plan, load_task, save_task
from tests.conftest import make_table


def test_tasks_then_shard(tmp_path, capsys):
    task_path, plan_path = tmp_path / "task.json", tmp_path / "plan.json"
    assert main(["tasks", "--ntables", "12", "--ngpu", "4", "--mem-gb", "4", "--seed", "3",
                 "--out", str(task_path)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("task dlrm-synth-test-12x4-seed3: 12 tables, 4 GPUs") and "\n" not in line
    task = load_task(task_path)
    assert len(task.tables) == 12 and task.ngpu == 4
    assert main(["shard", str(task_path), "--method", "lookup_greedy", "--out", str(plan_path)]) == 0
    assert capsys.readouterr().out.startswith("plan lookup_greedy for dlrm-synth-test-12x4-seed3")
    plan = load_plan(plan_path)
    assert plan.method == "lookup_greedy" and len(plan.placements) == 12


def test_json_output(tmp_path, capsys):
    task = Task("cli", 2, 1.0, tuple(make_table(f"t{i}") for i in range(4)))
    path = save_task(task, tmp_path / "t.json")
    assert main(["shard", str(path), "--method", "random", "--seed", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["method"] == "random" and data["seed"] == 2 and len(data["placements"]) == 4


def test_bad_input_is_one_line_and_nonzero(tmp_path, capsys):
    bad = Task("cli", 2, 1.0, (make_table("a"),)).to_dict()
    bad["tables"][0]["dim"] = 30
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert main(["shard", str(tmp_path / "bad.json"), "--method", "random"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "shardlab: error: table 'a': field 'dim' = 30 must be a multiple of 4"
    assert main(["tasks", "--ntables", "100000"]) == 2
    assert "field 'ntables'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["shard", str(tmp_path / "bad.json"), "--method", "no_such_method"])
    assert e.value.code == 2  # not a sharder: argparse refuses it
    capsys.readouterr()
    (tmp_path / "ok.json").write_text(json.dumps(Task("cli", 2, 1.0, (make_table("a"),)).to_dict()))
    assert main(["shard", str(tmp_path / "ok.json"), "--method", "random", "--model", "analytic"]) == 2
    assert "field 'model' does not apply to method 'random'" in capsys.readouterr().err


def test_module_entry_point(tmp_path):
    out = subprocess.run([sys.executable, "-m", "shardlab", "tasks", "--ntables", "5", "--ngpu", "2",
                          "--pool", "no-such-pool"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "no-such-pool" in out.stderr


def test_tasks_from_a_table_list(tmp_path, capsys):
    from pathlib import Path

    criteo = Path(__file__).resolve().parents[1] / "datasets/criteo/criteo_kaggle_dac.json"
    assert main(["tasks", "--tables", str(criteo), "--ngpu", "2", "--dims", "16"]) == 2
    assert "field 'reuse_bins' is missing" in capsys.readouterr().err
    assert main(["tasks", "--tables", str(criteo), "--assume-zipf", "1.05", "--ngpu", "2",
                 "--dims", "16", "--batch-size", "4096", "--out", str(tmp_path / "k.json")]) == 0
    assert capsys.readouterr().out.startswith("task criteo_kaggle_dac-26x2-seed0: 26 tables")
    task = load_task(tmp_path / "k.json")
    assert "assumed Zipf(1.05)" in task.tables[0].source


def test_evaluate_measure(tmp_path, capsys):
    task_path, plan_path, ev_path = tmp_path / "t.json", tmp_path / "p.json", tmp_path / "e.json"
    assert main(["tasks", "--ntables", "4", "--ngpu", "2", "--mem-gb", "1", "--dims", "8,16",
                 "--out", str(task_path)]) == 0
    assert main(["shard", str(task_path), "--method", "dim_greedy", "--out", str(plan_path)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(task_path), str(plan_path), "--json"]) == 0  # the shipped analytic model
    est = json.loads(capsys.readouterr().out)
    assert est["source"].startswith("analytic:cpu") and est["cost_ms"] > 0 and est["lower_bound_ms"] > 0
    assert main(["evaluate", str(task_path), str(plan_path), "--model", "no-such-model"]) == 2
    assert "cost model 'no-such-model'" in capsys.readouterr().err
    assert main(["evaluate", str(task_path), str(plan_path), "--measure", "--batch-size", "128",
                 "--repeats", "3", "--warmup", "1", "--out", str(ev_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("evaluate dim_greedy on ") and "measured:cpu[batch_size=128" in out
    ev = json.loads(ev_path.read_text())
    assert ev["source"].startswith("measured:") and len(ev["per_device"]) == 2 and ev["cost_ms"] > 0
