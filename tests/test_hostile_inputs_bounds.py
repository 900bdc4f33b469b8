"""More hostile inputs: values past every bound, files that are not files, records of the wrong
shape, options that would be ignored, and names that would garble a terminal. Each gets exit
status 2 and one line naming the input (or a correct, safely printed result)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shardlab import Task
from shardlab.cli import main
from shardlab.errors import LONGEST_SHOWN, ShardlabError, printable
from shardlab.io import read_json, save_plan, save_task
from shardlab.search import get_sharder, run_sharder
from tests.conftest import make_table


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bounds")
    task = Task("b", 2, 1.0, tuple(make_table(f"t{i}") for i in range(4)))
    save_task(task, d / "task.json")
    plan = run_sharder(get_sharder("random"), task).to_dict()
    save_plan(run_sharder(get_sharder("random"), task), d / "plan.json")
    (d / "plan_list.json").write_text(json.dumps({**plan, "method": ["a"]}))
    (d / "plan_null.json").write_text(json.dumps({**plan, "method": None}))
    big = task.to_dict()
    big["tables"][0]["rows"] = 1e25
    (d / "rows_huge.json").write_text(json.dumps(big))
    cap = task.to_dict()
    cap["mem_cap_gb"] = 1e20
    (d / "cap_huge.json").write_text(json.dumps(cap))
    (d / "numbers.json").write_text(json.dumps([1, 2, 3]))
    (d / "misspelt.json").write_text(json.dumps([{"name": "a", "rows": 100, "dim": 16, "pooling_facter": 3}]))
    (d / "no_dim.csv").write_text("name,rows,pooling_factor\na,100,2\n")
    (d / "odd_column.csv").write_text("name,rows,dim,colour\na,100,16,red\n")
    (d / "some_bins.csv").write_text("name,rows,dim,reuse_bin_0\na,100,16,1\n")
    (d / "adir").mkdir()
    os.mkfifo(d / "fifo")
    return {"dir": d}


#: (argv with {dir}, what the one line must say)
CASES = [
    (["tasks", "--ntables", "4", "--mem-gb", "1e308"], "option '--mem-gb' = 1e+308 must be a number in (0, 1e+06]"),
    (["shard", "{dir}/rows_huge.json", "--method", "random"], "field 'rows' = 10000000000000000905969664 must be <="),
    (["shard", "{dir}/cap_huge.json", "--method", "random"], "field 'mem_cap_gb' = 1e+20 must be <= 1e+06"),
    (["shard", "/dev/zero", "--method", "random"], "/dev/zero: not a regular file"),
    (["shard", "{dir}/fifo", "--method", "random"], "fifo: not a regular file"),
    (["shard", "{dir}/adir", "--method", "random"], "adir: not a regular file"),
    (["evaluate", "{dir}/task.json", "{dir}/plan_list.json"], "field 'method' = ['a'] must be a non-empty string"),
    (["evaluate", "{dir}/task.json", "{dir}/plan_null.json"], "field 'method' = None must be a non-empty string"),
    (["tasks", "--tables", "{dir}/numbers.json", "--assume-zipf", "1.05"], "table 0: must be a JSON object"),
    (["tasks", "--tables", "{dir}/misspelt.json", "--assume-zipf", "1.05"], "field 'pooling_facter' is not a table field"),
    (["tasks", "--tables", "{dir}/no_dim.csv", "--assume-zipf", "1.05"], "column 'dim' is missing"),
    (["tasks", "--tables", "{dir}/odd_column.csv", "--assume-zipf", "1.05"], "column 'colour' is not a table column"),
    (["tasks", "--tables", "{dir}/some_bins.csv"], "column 'reuse_bin_1' is missing"),
    (["tasks", "--ntables", "4", "--assume-zipf", "1.05"], "option '--assume-zipf' = 1.05 only applies with --tables"),
    (["tasks", "--tables", "{dir}/misspelt.json", "--split", "train"], "option '--split' = 'train' only applies to pool"),
    (["evaluate", "{dir}/task.json", "{dir}/plan.json", "--seed", "3"], "option '--seed' = 3 only applies with --measure"),
    (["shard", "{dir}/task.json", "--method", "random", "--out", ""], "option '--out' = '' is empty"),
    (["evaluate", "{dir}/task.json", "{dir}/plan.json", "--measure", "--journal", "{dir}/adir"], "adir is a directory"),
    (["evaluate", "{dir}/task.json", "{dir}/plan.json", "--measure", "--journal", "{dir}/fifo"], "fifo is a FIFO"),
    (["evaluate", "{dir}/task.json", "{dir}/plan.json", "--measure", "--journal", "/dev/full"], "character device"),
    (["measure", "comm", "--store", "{dir}/c.db", "--max-delay-ms", "1e12"], "option '--max-delay-ms' = 1000000000000.0"),
    (["train", "autoshard_policy", "--ngpu", "100000", "--out", "{dir}/x.pt", "--store", "{dir}/s.db"],
     "option '--ngpu' = 100000 must be an integer in [1, 16,384]"),
    (["train", "analytic", "--out", "{dir}/adir"], "adir is a directory"),
    (["train", "analytic", "--out", "{dir}/a.json", "--epochs", "5"], "option '--epochs' = 5 does not apply to analytic"),
    (["measure", "compute", "--store", "{dir}/c.db", "--pool", "broad", "--split", "test"],
     "option '--split' = 'test' does not apply to --pool broad"),
    (["measure", "compute", "--store", "{dir}/c.db", "--space", '{{"pooling": [1, 200]}}'],
     "option '--space' = '{\"pooling\": [1, 200]}' needs --pool broad"),
    (["measure", "compute", "--store", "{dir}/c.db", "--pool", "broad", "--space", '{{"poolng": [1, 200]}}'],
     "BroadSpace: no field 'poolng'"),
    (["measure", "compute", "--store", "{dir}/c.db", "--minutes", "0"], "option '--minutes' = 0.0 must be positive"),
]


@pytest.mark.parametrize("argv,says", CASES, ids=[" ".join(a[:3]) + f" #{i}" for i, (a, _) in enumerate(CASES)])
def test_one_line_naming_the_input(files, argv, says, capsys):
    argv = [a.format(**files) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("shardlab: error: ") and says in err, err
    assert not (files["dir"] / "c.db").exists() and not (files["dir"] / "s.db").exists()


def test_printable_escapes_controls_and_cuts_long_runs():
    assert printable("a\x1b[31mred\x07\nb\u202e") == "a\\x1b[31mred\\x07\\nb\\u202e"
    long = printable("name " + "n" * 20_000_000 + " end")
    assert long.startswith("name n") and long.endswith("...(20,000,000 characters) end")
    assert len(long) < LONGEST_SHOWN + 60
    assert printable("plain words, kept as they are") == "plain words, kept as they are"


def test_names_are_printed_safely(files, capsys):
    d = json.loads((files["dir"] / "task.json").read_text())
    # the name runs into the colon after it: 5,000,001 characters cut
    for name, shown in (("a\x1b[2Jb", "a\\x1b[2Jb"), ("n" * 5_000_000, "...(5,000,001 characters)")):
        d["name"] = name
        path = files["dir"] / "named.json"
        path.write_text(json.dumps(d))
        assert main(["shard", str(path), "--method", "random"]) == 0
        out = capsys.readouterr().out
        assert shown in out and "\x1b" not in out and len(out) < 1000


def test_read_json_refuses_what_is_not_a_file_without_opening_it(files):
    for path in ("/dev/zero", files["dir"] / "fifo", files["dir"] / "adir"):   # a FIFO would block if opened
        with pytest.raises(ShardlabError, match="not a regular file"):
            read_json(path)
    assert Path(files["dir"] / "fifo").exists()


@pytest.mark.parametrize("key,value", [("alpha", float("nan")), ("alpha", -1.0), ("hot", 2.0), ("pooling", float("inf")),
                                       ("bag_k", 0.0), ("q", "x")])
def test_generator_parameters_are_checked_before_lookups(key, value):
    from shardlab.data.generator import generate_lookups
    from shardlab.data.tasks import load_pool

    table = load_pool("dlrm-synth").tables[0]
    params = {**table.distribution_params, key: value}
    bad = Task.from_dict({"name": "g", "ngpu": 1, "mem_cap_gb": 4.0,
                          "tables": [{**table.to_dict(), "distribution": params}]}).tables[0]
    with pytest.raises(ShardlabError, match=f"field 'distribution.{key}'"):
        generate_lookups(bad, 64)
    assert generate_lookups(table, 64)[1].shape == (65,)


def test_notebook_integers_and_folders_are_strict(tmp_path):
    from shardlab.io import strict_bounded, strict_folder

    assert strict_bounded(3, "seed") == 3 and strict_bounded(4.0, "ngpu") == 4
    for bad in (-1, 1.5, True, "3", None):
        with pytest.raises(ShardlabError, match="parameter 'seed'"):
            strict_bounded(bad, "seed")
    with pytest.raises(ShardlabError, match=r"parameter 'verify' = 21 must be an integer in \[1, 20\] .*\(or 0: none\)"):
        strict_bounded(21, "verify", off=0)
    assert strict_bounded(0, "verify", off=0) == 0
    assert strict_folder("", "out_dir") == "" and strict_folder(str(tmp_path / "new"), "out_dir")
    (tmp_path / "file").write_text("x")
    for bad in ("/dev/null", str(tmp_path / "file"), 3):
        with pytest.raises(ShardlabError, match="parameter 'out_dir'"):
            strict_folder(bad, "out_dir")
    with pytest.raises(ShardlabError, match="parameter 'out_dir'"):
        strict_folder("", "out_dir", empty_ok=False)


def test_every_integer_notebook_parameter_is_checked():
    """Each notebook's integer parameters (``name: int = ...`` in its parameters cell), its
    folder parameters (``*_dir``) and its hardware profiles (``*profile``) pass through
    strict_bounded / strict_folder / get_profile before use."""
    import re

    for path in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        params = next("".join(c["source"]) for c in cells if "parameters" in (c.get("metadata", {}).get("tags") or []))
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        for name in re.findall(r"^(\w+): int = ", params, re.M):
            assert f"{name} = strict_bounded({name}, \"{name}\"" in code, (path.name, name)
        for name in re.findall(r"^(\w+_dir): str = ", params, re.M):
            assert f"{name} = strict_folder({name}, \"{name}\"" in code, (path.name, name)
        for name in re.findall(r"^(\w*profile): str = ", params, re.M):
            assert f"get_profile({name})" in code, (path.name, name)


def test_ranks_ignore_ctrl_c_and_a_dead_rank_is_one_line(monkeypatch, capsys):
    """A Ctrl-C reaches the parent only (ranks spawned with SIGINT ignored: no traceback from
    each); a rank killed outright makes the command line print one line, exit status 2."""
    import signal
    import time

    from shardlab.errors import CommBenchError
    from shardlab.measure.comm import CommBench

    # as at a terminal (a background job, as CI's, starts with SIGINT ignored, which would hide a fault)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with CommBench(2, 64, timeout_s=60) as bench:
            pids = [p.pid for p in bench._procs]
            for pid in pids:
                os.kill(pid, signal.SIGINT)
            time.sleep(0.5)
            assert all(p.is_alive() for p in bench._procs)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the parent's handler is back
    finally:
        signal.signal(signal.SIGINT, outer)

    def dies(args):
        raise CommBenchError("comm bench: rank 1 exited (code -9) during request", "Traceback ...")

    monkeypatch.setattr("shardlab.cli.run_verb", dies)
    assert main(["tasks", "--ntables", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "shardlab: error: comm bench: rank 1 exited (code -9) during request"


def test_column_wise_neuroshard_refuses_past_its_work_bound_at_once():
    import time

    from shardlab import constants as C

    ngpu = 128
    n = C.MAX_NEUROSHARD_WORK // ngpu + 1
    task = Task("wide", ngpu, 80.0, tuple(make_table(f"t{i}") for i in range(n)))
    start = time.perf_counter()
    with pytest.raises(ShardlabError, match=r"over column-wise neuroshard's bound of 256,000"):
        run_sharder(get_sharder("neuroshard"), task)
    assert time.perf_counter() - start < 60                      # refused before any search


@pytest.mark.parametrize("method,bound", [("torchrec", "MAX_TORCHREC_WORK"), ("torchrec_free", "MAX_TORCHREC_FREE_WORK")])
def test_torchrec_planner_refuses_past_its_work_bound_at_once(method, bound):
    from shardlab import constants as C

    ngpu, limit = 128, getattr(C, bound)
    task = Task("wide", ngpu, 80.0, tuple(make_table(f"t{i}") for i in range(limit // ngpu + 1)))
    with pytest.raises(ShardlabError, match=f"over the torchrec planner's bound of {limit:,}"):
        run_sharder(get_sharder(method), task)
