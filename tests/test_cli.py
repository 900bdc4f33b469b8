"""The `shardlab` command line: tasks and shard verbs, one-line summaries, JSON output,
one-line errors with a non-zero exit, sharder options from ``--set``, an example line in every
``--help``, and a ``--help`` that imports no torch."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardlab import Task
from shardlab.cli import build_parser, main
from shardlab.cli.arguments import setting
from shardlab.cli.plans import method_settings
from shardlab.errors import ShardlabError
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
    (tmp_path / "ok.json").write_text(json.dumps(Task("cli", 2, 1.0, (make_table("a"),)).to_dict()))
    assert main(["shard", str(tmp_path / "ok.json"), "--method", "no_such_method"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'no_such_method' is not a sharder" in err and "lookup_greedy" in err
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
    assert main(["evaluate", str(task_path), str(plan_path), "--json"]) == 0  # the h100 profile's analytic model
    est = json.loads(capsys.readouterr().out)
    assert est["source"].startswith("analytic:h100") and "+comm:analytic:h100-nvlink4+ib400[" in est["source"]
    assert est["cost_ms"] > 0 and est["lower_bound_ms"] > 0
    assert main(["evaluate", str(task_path), str(plan_path), "--profile", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"].startswith("analytic:cpu")
    assert main(["evaluate", str(task_path), str(plan_path), "--model", "no-such-model"]) == 2
    assert "cost model 'no-such-model'" in capsys.readouterr().err
    assert main(["evaluate", str(task_path), str(plan_path), "--measure", "--batch-size", "128",
                 "--repeats", "3", "--warmup", "1", "--out", str(ev_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("evaluate dim_greedy on ") and "measured:cpu[batch_size=128" in out
    ev = json.loads(ev_path.read_text())
    assert ev["source"].startswith("measured:") and len(ev["per_device"]) == 2 and ev["cost_ms"] > 0


def _verbs(parser, path=("shardlab",)):
    """(command path, parser) of every verb and sub-verb, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _verbs(sub, (*path, name))


def test_every_verb_help_ends_with_an_example():
    verbs = dict(_verbs(build_parser()))
    assert {("shardlab", "shard"), ("shardlab", "measure", "compute"), ("shardlab", "train", "autoshard_policy"),
            ("shardlab", "calibrate")} <= set(verbs)
    for path, parser in verbs.items():
        help_text = parser.format_help()
        tail = help_text[help_text.rindex("example:"):]                  # the example block ends the help
        assert re.search(r"^  " + re.escape(" ".join(path)) + r"( |$)", tail, re.M), (path, tail)
        assert not [line for line in tail.splitlines()[1:] if line and not line.startswith("  shardlab ")], tail
    assert "example:" in build_parser().format_help()


def test_help_imports_no_torch():
    code = ("import sys\nfrom shardlab.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "try:\n    main(['train', 'autoshard_policy', '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'shardlab' in m)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "example:" in out.stdout


def test_set_values_are_json_where_they_parse():
    assert setting("beam_width=5") == ("beam_width", 5) and setting("split_guard=false") == ("split_guard", False)
    assert setting("split_guard=False") == ("split_guard", False) and setting("x = 0.5") == ("x", 0.5)
    assert setting("caps=[4, 8]") == ("caps", [4, 8]) and setting("model=analytic") == ("model", "analytic")
    assert setting("profile=null") == ("profile", None) and setting("model=a=b") == ("model", "a=b")
    for bad in ("beam_width", "=3", "two words=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            setting(bad)


def test_set_configures_the_method(tmp_path, capsys):
    task = Task("cli-set", 2, 1.0, tuple(make_table(f"t{i}", rows=1000 * (i + 1)) for i in range(6)))
    path = str(save_task(task, tmp_path / "t.json"))
    assert main(["shard", path, "--method", "neuroshard", "--set", "model=analytic", "--json"]) == 0
    guarded = json.loads(capsys.readouterr().out)["metadata"]
    assert "analytic" in guarded["split_guard"]["judges"]               # model=analytic reached the sharder
    assert main(["shard", path, "--method", "neuroshard", "--set", "model=analytic", "--set", "split_guard=false",
                 "--json"]) == 0
    assert "split_guard" not in json.loads(capsys.readouterr().out).get("metadata", {})   # a bool, not "false"
    assert main(["shard", path, "--method", "lookup_greedy", "--set", "beam_width=5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "field 'beam_width'" in err and "'lookup_greedy' takes no options" in err
    assert main(["shard", path, "--method", "neuroshard", "--set", "model=analytic", "--model", "neuroshard"]) == 2
    assert "option '--model'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:                                # not key=value: argparse refuses it
        main(["shard", path, "--method", "neuroshard", "--set", "beam_width"])
    assert e.value.code == 2
    capsys.readouterr()


def test_set_with_several_methods_goes_to_each_method_that_takes_the_key():
    split = method_settings(["random", "neuroshard", "dreamshard"], {"model": "analytic", "beam_width": 5})
    assert split == {"random": {}, "neuroshard": {"model": "analytic", "beam_width": 5},
                     "dreamshard": {"model": "analytic"}}
    with pytest.raises(ShardlabError) as e:
        method_settings(["random", "dreamshard"], {"model": "analytic", "beam_width": 5})
    assert "field 'beam_width'" in str(e.value) and "\n" not in str(e.value) and "'dreamshard' takes" in str(e.value)


def test_the_formats_page_lists_every_verb():
    """docs/formats.md's table of verbs names each verb the parser has, and no other."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text()
    table = text.split("## The command line", 1)[1].split("The rules every verb keeps", 1)[0]
    listed = {line.split("`")[1].split()[0] for line in table.splitlines() if line.startswith("| `")}
    verbs = set(build_parser()._subparsers._group_actions[0].choices)
    assert listed == verbs


def test_the_campaign_verbs_take_the_defaults_of_the_functions_they_call():
    """Each default is declared once (shardlab.constants): the CLI's and the function's agree."""
    import inspect

    from shardlab.measure.campaign import run_comm_campaign, run_compute_campaign
    from shardlab.workflows.hardware_new import new_profile
    from shardlab.workflows.plan_campaign import run_plan_campaign

    def given(fn, name):
        return inspect.signature(fn).parameters[name].default

    def parsed(*argv):
        return vars(build_parser().parse_args(list(argv)))

    c = parsed("measure", "compute", "--store", "x.db")
    assert (c["max_tables"], c["mem_gb"]) == (given(run_compute_campaign, "max_tables"),
                                              given(run_compute_campaign, "mem_cap_gb"))
    assert parsed("measure", "comm", "--store", "x.db")["max_delay_ms"] == given(run_comm_campaign, "max_delay_ms")
    dist = parsed("dist", "measure-comm", "--store", "x.db", "--samples", "1")
    assert dist["max_delay_ms"] == given(run_comm_campaign, "max_delay_ms")
    p = parsed("measure", "plans", "--store", "x.db")
    assert ((p["min_tables"], p["max_tables"]), p["mem_gb"], p["ngpu"]) == (
        given(run_plan_campaign, "ntables"), given(run_plan_campaign, "mem_cap_gb"), given(run_plan_campaign, "ngpu"))
    h = parsed("hardware", "new", "mybox")
    assert (h["minutes"], h["mem_gb"]) == (given(new_profile, "minutes"), given(new_profile, "mem_cap_gb"))


def test_no_verb_states_a_numeric_default_of_its_own():
    """The command line's numeric defaults come from shardlab.constants (or are the universal 0
    and 1: seeds, workers, off); a literal such as ``default=100`` would be a second definition."""
    import ast

    root = Path(__file__).resolve().parents[1] / "shardlab" / "cli"
    own = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg in ("default", "default_rounds"):
                v = node.value
                if isinstance(v, ast.Constant) and isinstance(v.value, (int, float)) and not isinstance(v.value, bool) \
                        and v.value not in (0, 1):
                    own.append(f"{path.name}:{v.lineno} {node.arg}={v.value!r}")
    assert own == []
