"""``python -m shardlab.dist`` under torchrun: shardlab's own measurement and the comm
campaign between torchrun-started ranks (two "nodes" on 127.0.0.1, gloo), and a rank that dies."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from shardlab.data.tasks import generate_task
from shardlab.evaluate import verdict
from shardlab.evaluate.measured import MeasuredEvaluator
from shardlab.io import save_plan, save_task
from shardlab.measure.hardware import profile_with
from shardlab.measure.store import SampleStore
from shardlab.search import get_sharder, run_sharder


def _task_and_plans(tmp_path):
    task = generate_task(ntables=6, ngpu=2, mem_cap_gb=1.0, batch_size=64, seed=5, dims=(8, 16))
    plans = {m: run_sharder(get_sharder(m), task) for m in ("size_greedy", "dim_greedy")}
    save_task(task, tmp_path / "t.json")
    for m, p in plans.items():
        save_plan(p, tmp_path / f"{m}.json")
    return task, plans


def test_measure_under_two_torchrun_nodes_has_the_spawned_evaluations_shape_and_labels(tmp_path, torchrun, free_port):
    task, plans = _task_and_plans(tmp_path)
    out = tmp_path / "eval.json"
    args = ["evaluate", tmp_path / "t.json", tmp_path / "size_greedy.json", tmp_path / "dim_greedy.json", "--measure",
            "--rounds", "3", "--warmup-rounds", "0", "--batch-size", "64", "--reference", "size_greedy", "--out", out]
    nodes = [torchrun(args, 2, n, free_port) for n in (0, 1)]
    logs = [p.communicate(timeout=600) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(err[-4000:] for _, err in logs)  # whole tails
    assert "2 evaluation(s)" in logs[0][0] and "evaluation(s)" not in logs[1][0]   # rank 0 alone writes
    got = {e["method"]: e for e in json.loads(out.read_text())}
    spawned = MeasuredEvaluator(profile_with("cpu", batch_size=64), rounds=3, warmup_rounds=0, reference="size_greedy",
                                progress=False).evaluate(task, plans)
    for m, e in spawned.items():
        want = e.to_dict()
        assert set(got[m]) == set(want)
        assert got[m]["source"] == want["source"] + " (torchrun: 2 ranks, each timing its own device's shards)"
        assert len(got[m]["rounds_ms"]) == 3 and len(got[m]["per_device"]) == 2
        assert all(d["fw_compute_ms"] > 0 and d["bw_comm_ms"] > 0 for d in got[m]["per_device"])
        assert got[m]["lower_bound_ms"] > 0
    assert got["dim_greedy"]["reference"] == "size_greedy" and len(got["dim_greedy"]["ratio_ci95"]) == 2
    assert got["dim_greedy"]["verdict"] == verdict(tuple(got["dim_greedy"]["ratio_ci95"]))   # the rule, any load


def test_comm_campaign_between_torchrun_ranks_is_written_once_and_resumes(tmp_path, torchrun, free_port):
    store = tmp_path / "comm.db"
    args = ["measure-comm", "--store", store, "--samples", "3", "--profile", "cpu"]
    run = torchrun(args, 1, 0, free_port, nproc=2)
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err
    assert "3 comm sample(s) added" in out
    with SampleStore(store) as s:
        samples = list(s.samples("comm:2"))
    assert len(samples) == 3
    assert all(len(x["fw_comm_ms"]) == 2 and min(x["bw_comm_ms"]) > 0 for x in samples)
    assert samples[0]["provenance"]["campaign"]["launcher"] == {
        "launcher": "torchrun", "world_size": 2, "local_world_size": 2, "nnodes": 1, "backend": "gloo"}
    again = torchrun(args[:-4] + ["--samples", "4", "--profile", "cpu"], 1, 0, free_port, nproc=2)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0 and "1 comm sample(s) added" in out, err


def _worker(parent: int, rank: int) -> int | None:
    """The pid of torchrun ``parent``'s worker process with RANK=``rank``, if started."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (d / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and f"RANK={rank}".encode() in env:
            return int(d.name)
    return None


def test_a_rank_that_dies_stops_the_others_with_one_line_and_no_output(tmp_path, torchrun, free_port):
    _task_and_plans(tmp_path)
    out = tmp_path / "eval.json"
    args = ["evaluate", tmp_path / "t.json", tmp_path / "size_greedy.json", "--measure", "--rounds", "100",
            "--batch-size", "64", "--out", out]
    run = torchrun(args, 1, 0, free_port, nproc=2)
    deadline, victim = time.monotonic() + 120, None
    while victim is None and time.monotonic() < deadline and run.poll() is None:
        victim = _worker(run.pid, 1)
        time.sleep(0.2)
    assert victim is not None, "rank 1 never started"
    time.sleep(8)          # well into the rounds (100 rounds take minutes)
    os.kill(victim, signal.SIGKILL)
    _, err = run.communicate(timeout=300)
    assert run.returncode != 0
    assert not out.exists()
    ours = [line for line in err.splitlines() if line.startswith("shardlab.dist: rank 0:")]  # on a line of its own
    assert len(ours) == 1, err
    assert "another rank" in ours[0]


def test_a_cuda_profile_without_nccl_is_one_line(tmp_path, monkeypatch, capsys):
    import torch.distributed

    from shardlab import dist

    _task_and_plans(tmp_path)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: False)
    for var, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(var, value)
    for how in ("--measure", "--torchrec"):
        args = ["evaluate", str(tmp_path / "t.json"), str(tmp_path / "size_greedy.json"), how, "--profile", "h200",
                "--out", str(tmp_path / "e.json")]
        assert dist.main(args) == 2
        err = capsys.readouterr().err
        assert err == "shardlab.dist: error: profile device is cuda but this torch has no NCCL\n"
    assert not (tmp_path / "e.json").exists()


def test_the_torchrun_module_and_the_dist_verb_take_the_same_flags_and_defaults():
    """``python -m shardlab.dist`` and ``shardlab dist`` are one parser's verbs, and their TorchRec
    step options default to the evaluator's own (``constants.TORCHREC_*``), as ``shardlab evaluate
    --torchrec``'s do."""
    import argparse
    import inspect

    from shardlab import constants as C
    from shardlab.cli import build_parser
    from shardlab.cli.arguments import torchrec_steps
    from shardlab.dist import build_parser as dist_parser
    from shardlab.torchrec import TorchRecEvaluator

    def verbs(parser):
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return action.choices

    cli_dist = verbs(verbs(build_parser())["dist"])
    module = verbs(dist_parser())
    assert set(cli_dist) == set(module) == {"evaluate", "measure-comm"}
    for verb in module:
        flags = lambda p: sorted((a.dest, tuple(a.option_strings), a.default) for a in p._actions)  # noqa: E731
        assert flags(cli_dist[verb]) == flags(module[verb]), verb
    args = dist_parser().parse_args(["evaluate", "t.json", "p.json", "--torchrec", "--out", "e.json"])
    defaults = inspect.signature(TorchRecEvaluator).parameters
    assert (args.rounds, *torchrec_steps(args)) == (C.TORCHREC_ROUNDS, C.TORCHREC_STEPS, C.TORCHREC_WARMUP_STEPS) \
        == (defaults["rounds"].default, defaults["steps"].default, defaults["warmup_steps"].default)
    assert torchrec_steps(dist_parser().parse_args(["evaluate", "t.json", "p.json", "--torchrec", "--out", "e.json",
                                                    "--steps", "7", "--warmup-steps", "0"])) == (7, 0)
