"""The TorchRec evaluator: plans applied in DistributedModelParallel on gloo ranks,
real training steps timed in paired rounds; its CLI flags and one-line errors."""

from __future__ import annotations

import json

import pytest

from shardlab.cli import main
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.torchrec.export import export_for_device, export_torchrec
from shardlab.plan import Placement, Plan, validate_plan
from shardlab.measure.hardware import profile_with
from shardlab.search import get_sharder, run_sharder

pytest.importorskip("torchrec", reason="torchrec is installed by scripts/setup.sh")
from shardlab.evaluate import verdict  # noqa: E402
from shardlab.torchrec import TorchRecEvaluator, torchrec_plans  # noqa: E402


@pytest.fixture(scope="module")
def task():
    return generate_task(ntables=4, ngpu=2, mem_cap_gb=1.0, batch_size=64, seed=3, dims=(8, 16))


def layouts(task):
    """Table-wise, column-wise (both halves of one table), row-wise and table-row-wise plans of ``task``."""
    tw = run_sharder(get_sharder("size_greedy"), task)
    t0 = task.tables[0]
    rest = [p for p in tw.placements if p.table != t0.name]
    half, rows = t0.dim // 2, t0.rows // 2
    cw = Plan(task.name, "cw", 2, tuple(rest + [Placement(t0.name, 0, half, 0, t0.rows, 0),
                                                Placement(t0.name, half, half, 0, t0.rows, 1)]))
    rw = Plan(task.name, "rw", 2, tuple(rest + [Placement(t0.name, 0, t0.dim, 0, rows, 0),
                                                Placement(t0.name, 0, t0.dim, rows, t0.rows - rows, 1)]))
    twrw = Plan(task.name, "twrw", 2, rw.placements, metadata={"torchrec_sharding_types": {t0.name: "table_row_wise"}})
    for p in (tw, cw, rw):
        validate_plan(task, p)
    return {"size_greedy": tw, "cw": cw, "rw": rw, "twrw": twrw}


def test_cpu_export_places_shards_on_the_cpu_of_their_rank(task):
    data = export_torchrec(task, layouts(task)["cw"], module="ebc")
    cpu = export_for_device(data, "cpu")
    placements = [s["placement"] for e in cpu["plan"].values() for s in e["shards"]]
    assert all(p.endswith("/cpu") for p in placements) and {"rank:0/cpu", "rank:1/cpu"} <= set(placements)
    assert export_for_device(data, "cuda") == data
    with pytest.raises(ShardlabError, match="'device'"):
        export_for_device(data, "tpu")


def test_table_column_row_and_table_row_wise_plans_train_in_torchrec_in_paired_rounds(task):
    plans = layouts(task)
    kinds = {k: export_torchrec(task, p)["plan"][task.tables[0].name]["sharding_type"] for k, p in plans.items()}
    assert kinds["rw"] == "row_wise" and kinds["twrw"] == "table_row_wise"
    ev = torchrec_plans(task, plans, profile_with("cpu", batch_size=64), rounds=3, steps=2, warmup_steps=1,
                        reference="size_greedy", margin=0.2)
    assert set(ev) == set(plans)
    for name, e in ev.items():
        assert e.source.startswith("measured:torchrec-cpu")
        assert len(e.rounds_ms) == 3 and e.ci95_ms[0] <= e.cost_ms <= e.ci95_ms[1]
        assert len(e.per_device) == 2 and all(d.fw_compute_ms > 0 and d.bw_compute_ms > 0 for d in e.per_device)
        assert all(d.fw_comm_ms == 0 and d.bw_comm_ms == 0 for d in e.per_device)
        assert e.comparison.reference == "size_greedy" and e.comparison.margin == 0.2
        assert e.comparison.verdict == verdict(e.comparison.ratio_ci95, 0.2)          # the rule, whatever the load
    assert ev["size_greedy"].comparison.ratio == pytest.approx(1.0)


def test_cli_evaluate_torchrec_and_its_one_line_errors(task, tmp_path, capsys):
    from shardlab.io import save_plan, save_task

    save_task(task, tmp_path / "t.json")
    save_plan(layouts(task)["size_greedy"], tmp_path / "p.json")
    args = ["evaluate", str(tmp_path / "t.json"), str(tmp_path / "p.json")]
    assert main(args + ["--torchrec", "--rounds", "3", "--steps", "2", "--warmup-steps", "1",
                        "--batch-size", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"].startswith("measured:torchrec-cpu") and len(out["rounds_ms"]) == 3
    assert main(args + ["--steps", "2"]) == 2
    assert "only applies with --torchrec" in capsys.readouterr().err
    assert main(args + ["--torchrec", "--repeats", "2"]) == 2
    assert "only applies with --measure" in capsys.readouterr().err
    with pytest.raises(ShardlabError, match="field 'steps'"):
        TorchRecEvaluator(steps=0).evaluate(task, {"p": layouts(task)["size_greedy"]})


def test_two_torchrun_nodes_on_localhost_give_the_spawned_paths_evaluation(task, tmp_path, torchrun, free_port):
    from shardlab.io import save_plan, save_task

    save_task(task, tmp_path / "t.json")
    plan = layouts(task)["cw"]
    save_plan(plan, tmp_path / "p.json")
    out = tmp_path / "eval.json"
    extra = ["--torchrec", "--rounds", "3", "--steps", "2", "--warmup-steps", "1", "--batch-size", "64", "--out", str(out)]
    nodes = [torchrun(["evaluate", tmp_path / "t.json", tmp_path / "p.json", *extra], 2, n, free_port) for n in (0, 1)]
    logs = [p.communicate(timeout=600) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(err[-4000:] for _, err in logs)  # whole tails
    got = json.loads(out.read_text())
    spawned = TorchRecEvaluator(profile_with("cpu", batch_size=64), rounds=3, steps=2,
                                warmup_steps=1).evaluate(task, {"cw": plan})["cw"].to_dict()
    assert set(got) == set(spawned) and got["source"] == spawned["source"]
    assert got["method"] == "cw" and len(got["rounds_ms"]) == 3 and len(got["per_device"]) == 2
    assert "1 evaluation(s)" in logs[0][0]


def test_dist_refuses_a_world_size_that_is_not_the_plans_ngpu(task, tmp_path, monkeypatch, capsys):
    from shardlab import dist
    from shardlab.io import save_plan, save_task

    save_task(task, tmp_path / "t.json")
    save_plan(layouts(task)["size_greedy"], tmp_path / "p.json")
    args = ["evaluate", str(tmp_path / "t.json"), str(tmp_path / "p.json"), "--torchrec", "--out", str(tmp_path / "e.json")]
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert dist.main(args) == 2
    assert "RANK is unset" in capsys.readouterr().err
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert dist.main(args) == 2
    err = capsys.readouterr().err
    assert "WORLD_SIZE = 3" in err and "'ngpu' = 2" in err and err.count("\n") == 1


def test_agreement_measures_both_ways_resumes_and_reports_disagreements(tmp_path):
    from shardlab.measure.store import SampleStore
    from studies.torchrec_agreement.agreement import KIND, agreement, measure_agreement

    small = generate_task(ntables=5, ngpu=2, mem_cap_gb=1.0, batch_size=64, seed=8, dims=(8, 16))
    fast = profile_with("cpu", batch_size=64, repeats=2, warmup=1)
    kw = dict(methods=["random", "size_greedy", "lookup_greedy"], profile=fast, rounds=3, steps=2, progress=False)
    store = str(tmp_path / "a.db")
    assert measure_agreement(store, [("t0", small)], **kw) == 1
    assert measure_agreement(store, [("t0", small)], **kw) == 0
    with SampleStore(store) as s:
        samples = list(s.samples(KIND))
    sample = samples[0]
    assert all(e["source"].startswith("measured:torchrec-") for e in sample["torchrec"].values())
    assert all(e["source"].startswith("measured:cpu") for e in sample["measured"].values())
    out = agreement(samples)
    row = out["tasks"][0]
    assert row["plans"] == 3 and out["pairs"] == 3 and -1.0 <= row["spearman"] <= 1.0
    assert set(row["facts"]["random"]) == {"shards", "splits", "busiest_rank", "busiest_tables",
                                           "busiest_lookups_per_sample"}
    # a made-up opposite ordering (a half of b measured, twice b in TorchRec) is a disagreement
    a, b = "random", "size_greedy"
    flipped = {**sample, "measured": dict(sample["measured"]), "torchrec": dict(sample["torchrec"])}
    for side, scale in (("measured", 0.5), ("torchrec", 2.0)):
        e = dict(sample[side][a])
        e["rounds_ms"] = [x * scale for x in sample[side][b]["rounds_ms"]]
        flipped[side][a] = e
    pairs = agreement([flipped])["tasks"][0]["disagreements"]
    hit = [p for p in pairs if (p["a"], p["b"]) == (a, b)]
    assert hit and hit[0]["measured"]["verdict"] == "faster" and hit[0]["torchrec"]["verdict"] == "slower"


def test_whole_dlrm_step_is_timed_beside_its_embedding_part(tmp_path, capsys):
    from shardlab.io import save_plan, save_task

    same = generate_task(ntables=3, ngpu=2, mem_cap_gb=1.0, batch_size=64, seed=6, dims=(16,))
    plan = run_sharder(get_sharder("lookup_greedy"), same)
    ev = TorchRecEvaluator(profile_with("cpu", batch_size=64), rounds=3, steps=2, warmup_steps=1, whole_step=True)
    parts = ev.evaluate_parts(same, {"lookup_greedy": plan})
    whole, emb = parts["whole_step"]["lookup_greedy"], parts["embeddings"]["lookup_greedy"]
    assert whole.source.startswith("measured:torchrec-dlrm-cpu") and emb.source.startswith("measured:torchrec-cpu")
    assert len(whole.rounds_ms) == len(emb.rounds_ms) == 3
    assert all(d.bw_compute_ms > 0 for d in whole.per_device)
    with pytest.raises(ShardlabError, match=r"one embedding dim .* got dims \[\d+, \d+"):
        ev.evaluate_parts(generate_task(ntables=4, ngpu=2, mem_cap_gb=1.0, batch_size=64, seed=3, dims=(8, 16)),
                          {"p": layouts_of_mixed()})
    save_task(same, tmp_path / "t.json")
    save_plan(plan, tmp_path / "p.json")
    assert main(["evaluate", str(tmp_path / "t.json"), str(tmp_path / "p.json"), "--torchrec", "--whole-step",
                 "--rounds", "3", "--steps", "2", "--warmup-steps", "1", "--batch-size", "64"]) == 0
    line = capsys.readouterr().out
    assert "measured:torchrec-dlrm-cpu" in line and "of the step" in line


def layouts_of_mixed():
    mixed = generate_task(ntables=4, ngpu=2, mem_cap_gb=1.0, batch_size=64, seed=3, dims=(8, 16))
    return run_sharder(get_sharder("size_greedy"), mixed)


def test_models_too_big_to_keep_are_built_for_their_turn_with_the_same_results_shape(task, monkeypatch):
    from shardlab.torchrec import evaluator as torchrec_evaluator
    from shardlab.torchrec.evaluator import rank_bytes

    plans = layouts(task)
    data = export_for_device(export_torchrec(task, plans["cw"], module="ebc"), "cpu")
    t0 = task.tables[0]
    assert rank_bytes(task, data, 0) + rank_bytes(task, data, 1) == sum(t.rows * t.dim * 4 for t in task.tables)
    assert rank_bytes(task, data, 1) >= t0.rows * (t0.dim // 2) * 4
    monkeypatch.setattr(torchrec_evaluator, "rank_budget_bytes", lambda ranks: 0.0)   # nothing fits: build per turn
    ev = TorchRecEvaluator(profile_with("cpu", batch_size=64), rounds=3, steps=2, warmup_steps=1).evaluate(task, plans)
    assert all(len(e.rounds_ms) == 3 and e.source.startswith("measured:torchrec-cpu") for e in ev.values())
