"""Hostile and nonsensical inputs: each gets exit status 2 and one line naming the option or
field and its value -- never a traceback, never a silently odd result."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shardlab import ShardlabError, Task
from shardlab.cli import main
from shardlab.io import save_plan, save_task
from shardlab.io import strict_bool
from shardlab.search import get_sharder, run_sharder
from tests.conftest import make_table

CRITEO = str(Path(__file__).resolve().parents[1] / "datasets" / "criteo" / "criteo_kaggle_dac.json")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    task = Task("h", 2, 1.0, tuple(make_table(f"t{i}") for i in range(4)))
    tp = save_task(task, d / "task.json")
    pp = save_plan(run_sharder(get_sharder("random"), task), d / "plan.json")
    plan = json.loads(pp.read_text())
    (d / "plan_extra.json").write_text(json.dumps({**plan, "colour": "red"}))
    (d / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    manifest = {"format": "shardlab-costmodel-v1", "source": "model:x"}
    (d / "no_parts.json").write_text(json.dumps(manifest))
    (d / "garbage.pt").write_bytes(os.urandom(4096))
    part = {"class": "shardlab.costmodel.neural.NeuroShardCompute", "file": "garbage.pt"}
    (d / "garbage_model.json").write_text(json.dumps({**manifest, "parts": {"compute": part, "comm": part}}))
    unknown = {"class": "shardlab.costmodel.neural.NoSuchModel", "file": "garbage.pt"}
    (d / "unknown_class.json").write_text(json.dumps({**manifest, "parts": {"compute": unknown, "comm": unknown}}))
    return {"task": str(tp), "plan": str(pp), "dir": d}


#: (argv with {task}/{plan}/{dir} placeholders, what the one line must say)
CASES = [
    (["tasks", "--ntables", "4", "--seed", "-1"], "option '--seed' = -1 must be an integer >= 0"),
    (["shard", "{task}", "--method", "random", "--seed", "-1"], "option '--seed' = -1"),
    (["tasks", "--ngpu", "0"], "option '--ngpu' = 0"),
    (["tasks", "--mem-gb", "nan"], "option '--mem-gb' = nan"),
    (["shard", "{dir}/nested.json", "--method", "random"], "nested"),
    (["evaluate", "{task}", "{plan}", "--model", "{dir}/no_parts.json"], "field 'parts.compute'"),
    (["evaluate", "{task}", "{plan}", "--model", "{dir}/garbage_model.json"], "not a readable model file"),
    (["evaluate", "{task}", "{plan}", "--model", "{dir}/unknown_class.json"], "is no shardlab cost model class"),
    (["measure", "comm", "--store", "{dir}/c.db", "--max-delay-ms", "-5"], "option '--max-delay-ms' = -5.0"),
    (["measure", "compute", "--store", "{dir}/c.db", "--workers", "0"], "option '--workers' = 0"),
    (["measure", "comm", "--store", "{dir}/c.db", "--ngpu", "100", "--samples", "1"], "exceeds the 64 ranks"),
    (["evaluate", "{task}", "{plan}", "--batch-size", "128"], "option '--batch-size' = 128 only applies with --measure"),
    (["evaluate", "{task}", "{plan}", "--repeats", "3"], "option '--repeats' = 3 only applies with --measure"),
    (["compare", "{task}", "{plan}", "--rounds", "5"], "option '--rounds' = 5 only applies with --measure"),
    (["compare", "{task}", "{plan}", "--measure", "--rounds", "0"], "option '--rounds' = 0"),
    (["train", "neuroshard", "--out", "{dir}/m.json", "--epochs", "0"], "option '--epochs' = 0 must be an integer in [1, 1,000,000]"),
    (["train", "neuroshard", "--out", "{dir}/m.json", "--store", "{dir}/missing.db"], "no such sample store"),
    (["tasks", "--tables", CRITEO, "--assume-zipf", "nan"], "option '--assume-zipf' = nan"),
    (["tasks", "--tables", CRITEO, "--assume-zipf", "-1"], "option '--assume-zipf' = -1.0"),
    (["export-torchrec", "{task}", "{plan}", "--out", "{dir}/x.json", "--module", "a b;rm"], "option '--module'"),
    (["evaluate", "{task}", "{dir}/plan_extra.json"], "field 'colour'"),
    (["measure", "plans", "--store", "{dir}/p.db", "--min-tables", "9", "--max-tables", "3"], "option '--min-tables'"),
]


def _with_pooling(files, pooling: float) -> str:
    d = json.loads(Path(files["task"]).read_text())
    d["tables"][0]["pooling_factor"] = pooling
    out = files["dir"] / "pooling.json"
    out.write_text(json.dumps(d))
    return str(out)


CASES.append((["shard", "{dir}/pooling.json", "--method", "random"], "field 'pooling_factor' = 1000000000000.0 must be <= 100000"))


@pytest.mark.parametrize("argv,says", CASES, ids=[" ".join(a[:3]) + f" #{i}" for i, (a, _) in enumerate(CASES)])
def test_one_line_naming_the_input(files, argv, says, capsys):
    _with_pooling(files, 1e12)
    argv = [a.format(**files) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("shardlab: error: ") and says in err, err


def test_a_missing_store_is_not_created(files, capsys):
    missing = files["dir"] / "never.db"
    assert main(["train", "neuroshard", "--out", str(files["dir"] / "m.json"), "--store", str(missing)]) == 2
    assert not missing.exists()
    capsys.readouterr()


def test_notebook_booleans_are_strict():
    assert strict_bool(True, "measure") is True and strict_bool("False", "measure") is False
    for bad in ("no", "yes", "0", 1, None, ""):
        with pytest.raises(ShardlabError, match="parameter 'measure'"):
            strict_bool(bad, "measure")


def test_a_garbage_trace_file_is_one_line(tmp_path):
    from shardlab.data.dlrm_format import load_dlrm_file

    for raw in (os.urandom(2048), b"\x1f\x8b" + os.urandom(2048)):   # random bytes, a broken gzip
        (tmp_path / "g.pt.gz").write_bytes(raw)
        with pytest.raises(ShardlabError, match="g.pt.gz"):
            load_dlrm_file(tmp_path / "g.pt.gz")


def test_report_keeps_every_plan_and_its_best_ignores_argument_order(tmp_path, capsys):
    task = Task("ident", 2, 1.0, tuple(make_table(f"t{i}", rows=1000 * (i + 1)) for i in range(6)))
    tp = save_task(task, tmp_path / "task.json")
    a = save_plan(run_sharder(get_sharder("random"), task, seed=1), tmp_path / "a.json")
    b = save_plan(run_sharder(get_sharder("random"), task, seed=2), tmp_path / "b.json")
    outs = []
    for order in ([a, b], [b, a]):
        assert main(["report", *map(str, order), "--task", str(tp), "--model", "analytic",
                     "--html", str(tmp_path / "r.html"), "--json"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert sorted(outs[0]) == sorted(outs[1]) == ["random:a", "random:b"]     # both kept, named by file
    assert main(["report", str(a), str(b), "--task", str(tp), "--model", "analytic", "--html", str(tmp_path / "r.html")]) == 0
    first = capsys.readouterr().out
    assert main(["report", str(b), str(a), "--task", str(tp), "--model", "analytic", "--html", str(tmp_path / "r.html")]) == 0
    assert capsys.readouterr().out == first and "2 plans" in first


def test_task_names_never_become_paths(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep" / "er").mkdir(parents=True)
    for name in ("../../evil", "x" * 300):
        tp = tmp_path / "t.json"
        assert main(["tasks", "--ntables", "4", "--ngpu", "2", "--mem-gb", "1", "--name", name, "--out", str(tp)]) == 0
        pp = tmp_path / "p.json"
        assert main(["shard", str(tp), "--method", "random", "--out", str(pp)]) == 0
        assert main(["report", str(pp), "--task", str(tp), "--model", "analytic"]) == 0
        written = capsys.readouterr().out.strip().split(" -> ")[-1]
        path = Path(written).resolve()
        assert path.parent == (tmp_path / "reports").resolve() and len(path.name) <= 130, written
    assert not (tmp_path.parent / "evil.html").exists() and not (tmp_path.parent.parent / "evil.html").exists()
