"""Hostile options and files, third round: every case is one line naming the input (exit status
2) and writes nothing -- method options out of range (a negative beam once searched forever),
a journal that is some other file, a campaign whose device or rank count is wrong, an unknown
hardware profile, empty names and list items, epochs and policy counts past their bounds, a
table distribution of no known model, a manifest whose provenance is not an object, and
argparse's own usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardlab import ShardlabError, Task
from shardlab.cli import main
from shardlab.io import save_plan, save_task
from shardlab.search import get_sharder, run_sharder
from shardlab.tables import Table
from tests.conftest import make_table

MODELS = Path(__file__).resolve().parents[1] / "datasets" / "cpu" / "models"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("options")
    task = Task("o", 2, 1.0, tuple(make_table(f"t{i}") for i in range(4)))
    tp = save_task(task, d / "task.json")
    pp = save_plan(run_sharder(get_sharder("size_greedy"), task), d / "plan.json")
    raw = json.loads(tp.read_text())
    raw["tables"][0]["distribution"] = {"model": "nope"}
    (d / "dist_model.json").write_text(json.dumps(raw))
    raw["tables"][0]["distribution"] = {}
    raw["tables"][0]["source"] = [1, 2]
    (d / "source_list.json").write_text(json.dumps(raw))
    (d / "twice.json").write_text(tp.read_text().replace('"ngpu": 2', '"ngpu": 2, "ngpu": 3', 1))
    manifest = json.loads((MODELS / "analytic.json").read_text())
    for part in manifest["parts"].values():
        part["file"] = str(MODELS / part["file"])      # absolute parts are refused anyway: keep the check first
    (d / "provenance_str.json").write_text(json.dumps({**manifest, "provenance": "none"}))
    return {"task": str(tp), "plan": str(pp), "dir": d}


#: (argv with {task}/{plan}/{dir} placeholders, what the one line must say)
CASES = [
    (["shard", "{task}", "--method", "neuroshard", "--set", "beam_width=-2"], "field 'beam_width' = -2"),
    (["shard", "{task}", "--method", "neuroshard[top_n=0]"], "field 'top_n' = 0"),
    (["shard", "{task}", "--method", "neuroshard", "--set", "max_splits=-1"], "field 'max_splits' = -1"),
    (["shard", "{task}", "--method", "neuroshard", "--set", "caps=[0.5]"], "field 'caps' = (0.5,)"),
    (["shard", "{task}", "--method", "neuroshard", "--set", "host_size=0"], "field 'host_size' = 0"),
    (["shard", "{task}", "--method", "torchrec", "--set", "fast_above=-1"], "field 'fast_above' = -1"),
    (["shard", "{task}", "--method", "torchrec", "--set", "compute_device=tpu"], "field 'compute_device' = 'tpu'"),
    (["shard", "{task}", "--method", "lookup_greedy", "--profile", "nope"], "hardware profile 'nope' is unknown"),
    (["evaluate", "{task}", "{plan}", "--analytic", "--profile", "nope"], "hardware profile 'nope' is unknown"),
    (["tasks", "--ntables", "4", "--dims", "4,,8"], "--dims must be comma-separated integers, got '4,,8'"),
    (["tasks", "--ntables", "4", "--name", ""], "option '--name' = '' is empty"),
    (["train", "dreamshard", "--out", "{dir}/m.json", "--pretrain-epochs", "-1"], "option '--pretrain-epochs' = -1"),
    (["train", "neuroshard", "--out", "{dir}/m.json", "--epochs", "10000000000000"], "option '--epochs' = 10000000000000"),
    (["train", "autoshard_policy", "--out", "{dir}/p.pt", "--episodes", "1000000000000"], "option '--episodes'"),
    (["train", "dreamshard_policy", "--out", "{dir}/p.pt", "--lr", "nan"], "dreamshard_policy: field 'lr' = nan"),
    (["train", "autoshard_policy", "--out", "{dir}/p.pt", "--n-tasks", "0"], "option '--n-tasks' = 0"),
    (["shard", "{dir}/dist_model.json", "--method", "size_greedy"], "field 'distribution.model' = 'nope'"),
    (["shard", "{dir}/source_list.json", "--method", "size_greedy"], "field 'source' = [1, 2]"),
    (["shard", "{dir}/twice.json", "--method", "size_greedy"], "field 'ngpu' appears twice"),
    (["evaluate", "{task}", "{plan}", "--model", "{dir}/provenance_str.json"], "field 'provenance' must be an object"),
    (["measure", "comm", "--store", "{dir}/comm.db", "--ngpu", "1", "--samples", "1"], "field 'world_size' = 1"),
    (["measure", "compute", "--store", "{dir}/s.db", "--samples", "100000000"], "option '--samples' = 100000000"),
    (["compare", "{task}", "{plan}", "--measure", "--batch-size", "100000000000"], "option '--batch-size' = 100000000000"),
    (["compare", "{task}", "{plan}", "--measure", "--repeats", "1000000000"], "option '--repeats' = 1000000000"),
    (["measure", "compute", "--store", "{dir}/s.db", "--warmup", "1000000000"], "option '--warmup' = 1000000000"),
    (["shard", "{task}"], "the following arguments are required: --method"),
    (["train", "nope"], "argument kind: invalid choice: 'nope'"),
]


@pytest.mark.parametrize("argv,says", CASES, ids=[" ".join(a[:3]) + f" #{i}" for i, (a, _) in enumerate(CASES)])
def test_one_line_and_nothing_written(files, capsys, argv, says):
    before = sorted(p.name for p in files["dir"].iterdir())
    argv = [a.format(**files) for a in argv]
    try:
        status = main(argv)
    except SystemExit as e:                    # argparse's own errors exit from inside parse_args
        status = e.code
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.count("\n") == 0 and says in err, err
    assert sorted(p.name for p in files["dir"].iterdir()) == before          # no store, model or plan made


def test_a_journal_that_is_some_other_file_is_refused_and_left_as_it_was(files, capsys):
    task_text = Path(files["task"]).read_text()
    argv = ["evaluate", files["task"], files["plan"], "--measure", "--rounds", "2", "--journal", files["task"]]
    assert main(argv) == 2
    assert "not a measurement journal" in capsys.readouterr().err
    assert Path(files["task"]).read_text() == task_text


def test_a_journal_an_earlier_run_wrote_is_taken(tmp_path):
    from shardlab.evaluate.journal import JOURNAL_FIELDS, check_journal

    journal = tmp_path / "j.jsonl"
    journal.write_text(json.dumps(dict(zip(JOURNAL_FIELDS, ("t", 0, 1, "p", [1.0])))) + "\n")
    check_journal(str(journal))
    check_journal(str(tmp_path / "new.jsonl"))
    (tmp_path / "empty.jsonl").write_text("")
    check_journal(str(tmp_path / "empty.jsonl"))


def test_a_gpu_campaign_without_a_gpu_creates_no_store(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    store = tmp_path / "s.db"
    assert main(["measure", "compute", "--store", str(store), "--samples", "1", "--profile", "h100"]) == 2
    assert "no GPU is visible" in capsys.readouterr().err and not store.exists()


def test_lookup_models_are_the_ones_the_lookups_dispatch_on():
    from shardlab import constants as C
    from shardlab.data.dlrm_format import TRACE_MODEL
    from shardlab.data.generator import MODEL
    from shardlab.data.origin import ROW_BLOCK_MODEL, ROW_BLOCK_MODEL_V1

    assert set(C.LOOKUP_MODELS) == {MODEL, TRACE_MODEL, ROW_BLOCK_MODEL, ROW_BLOCK_MODEL_V1}
    with pytest.raises(ShardlabError, match="distribution.model"):
        Table("x", 10, 4, 1.0, (1.0,) + (0.0,) * 16, distribution={"alpha": 1.0})


def test_running_out_of_memory_is_one_line(monkeypatch, capsys):
    def exhausts(args):
        raise MemoryError

    monkeypatch.setattr("shardlab.cli.run_verb", exhausts)
    assert main(["tasks", "--ntables", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shardlab: error: out of memory") and "\n" not in err
