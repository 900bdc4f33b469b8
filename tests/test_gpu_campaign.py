"""The one-GPU campaign machinery, run here on CPU: lookup batches made ahead by worker
processes, deadlines, whole-plan compute in paired rounds, the h100 profile."""

import time

import numpy as np
import pytest

from shardlab import constants as C
from shardlab.data.tasks import generate_task, pool_tables
from shardlab.measure.broad_campaign import BroadSpace, run_broad_campaign
from shardlab.measure.campaign import compute_sample_tables
from shardlab.measure.compute import fused_inputs, measure_compute, prefetched, run_jobs_prefetched
from shardlab.measure.hardware import get_profile, profile_with
from shardlab.measure.store import SampleStore
from shardlab.tables import Table
from studies.gpu_compute.analysis import cross_device, plan_verdicts, same_ops
from studies.gpu_compute.plan_compute import COVERS, measure_plan_compute

PROF = profile_with("cpu", batch_size=128, repeats=2, warmup=1)


def _jobs(n):
    tables = pool_tables(C.DEFAULT_POOL, "train")
    return [(f"k{i}", [t.to_dict() for t in compute_sample_tables(tables, i, 0, 4, int(C.GB), "fp32", "exact_sgd")])
            for i in range(n)]


@pytest.mark.parametrize("workers", [0, 2])
def test_prefetched_batches_are_the_jobs_own_in_order(workers):
    jobs = _jobs(4)
    got = list(prefetched(iter(jobs), 128, 2, workers, window=3))
    assert [k for k, _, _ in got] == [k for k, _ in jobs]
    for (_, tables, batches), (_, want_tables) in zip(got, jobs):
        assert tables == want_tables and len(batches) == 2
        for k, (idx, off) in enumerate(batches):
            want_idx, want_off = fused_inputs([Table.from_dict(t) for t in tables], 128, k)
            assert np.array_equal(idx.numpy(), want_idx.numpy()) and np.array_equal(off.numpy(), want_off.numpy())


def test_measure_compute_uses_given_batches(monkeypatch):
    import shardlab.measure.compute as compute

    tables = [Table.from_dict(t) for t in _jobs(1)[0][1]]
    batches = [fused_inputs(tables, 128, k) for k in range(PROF.input_batches)]

    def no_drawing(*a):
        raise AssertionError("batches were drawn again")

    monkeypatch.setattr(compute, "fused_inputs", no_drawing)
    s = measure_compute(tables, PROF, inputs=batches)
    assert s.total_ms > 0 and len(s.tables) == len(tables)
    with pytest.raises(AssertionError, match="drawn again"):
        measure_compute(tables, PROF)


def test_prefetched_campaign_commits_and_stops_at_its_deadline(tmp_path):
    path = str(tmp_path / "s.db")
    with SampleStore(path) as store:
        assert run_jobs_prefetched(store, "compute", _jobs(3), PROF, {"p": 1}, 1, "t", False) == 3
        assert run_jobs_prefetched(store, "compute", _jobs(5)[3:], PROF, {"p": 1}, 0, "t", False,
                                   deadline=time.monotonic() - 1) == 0
        assert store.count("compute") == 3


def test_broad_campaign_draws_nothing_past_its_deadline(tmp_path):
    path = str(tmp_path / "b.db")
    t0 = time.perf_counter()
    added = run_broad_campaign(path, 500, PROF, space=BroadSpace(row_share=1.0), max_tables=3, mem_cap_gb=1.0,
                               progress=False, deadline=time.monotonic() - 1)
    assert added == 0 and time.perf_counter() - t0 < 5       # 500 drawn samples would take far longer


def test_plan_compute_rounds_are_paired_and_resumable(tmp_path):
    path = str(tmp_path / "p.db")
    task = generate_task(ntables=8, ngpu=2, mem_cap_gb=0.25, batch_size=128, seed=3, name="t8")   # small ops
    assert measure_plan_compute(path, [task], ["size_greedy", "dim_greedy"], PROF, rounds=2, workers=0,
                                progress=False) == 2
    with SampleStore(path) as store:
        recs = {r["method"]: r for r in store.samples("plan_compute:2")}
    for r in recs.values():
        arr = np.asarray(r["rounds_fw_bw_ms"])
        assert arr.shape == (2, 2, 2) and (arr >= 0).all() and r["covers"] == COVERS
        assert np.allclose(r["rounds_cost_ms"], arr.sum(axis=2).max(axis=1))
    assert measure_plan_compute(path, [task], ["size_greedy", "dim_greedy"], PROF, rounds=2, workers=0,
                                progress=False) == 0


def test_h100_profile_is_the_seeds_setting_on_cuda():
    p = get_profile("h100")
    assert (p.device, p.batch_size, p.weights_precision, p.optimizer) == ("cuda", 65536, "fp32", "exact_sgd")
    assert p.comm_backend == "gloo"      # one GPU: no NCCL between ranks


def _op(profile, i, tables, ms):
    return {"key": f"compute:{profile}:dlrm-synth:train:s0:{i}", "tables": tables, "fw_ms": ms / 3, "bw_ms": 2 * ms / 3}


def test_same_ops_pair_by_index_and_refuse_different_tables():
    t = [{"name": "a", "rows": 10, "dim": 4}]
    u = [{"name": "b", "rows": 10, "dim": 4}]
    cpu = [_op("cpu", i, t, 10.0 * (i + 1)) for i in range(4)]
    gpu = [_op("h100", i, t, 1.0 * (i + 1)) for i in (3, 1, 0)]           # one op missing, order shuffled
    a, b = same_ops(cpu, gpu)
    assert np.allclose(a, [10, 20, 40]) and np.allclose(b, [1, 2, 4])
    assert cross_device(a, b)["spearman"] == pytest.approx(1.0)
    assert cross_device(a, b)["ratio_p90_over_p10"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="different tables"):
        same_ops(cpu, [_op("h100", 0, u, 1.0)])


def test_plan_verdicts_follow_the_paired_rounds():
    def rec(method, rounds):
        return {"ngpu": 4, "task": {"name": "t"}, "method": method, "rounds_cost_ms": rounds}

    ref = [10.0, 14.0, 9.0, 12.0, 11.0]                                   # drifting rounds
    out = plan_verdicts([rec("lookup_greedy", ref), rec("fast", [x * 0.8 for x in ref]),
                         rec("slow", [x * 1.3 for x in ref]), rec("same", [x * (1 + (-1) ** i * 0.02) for i, x in enumerate(ref)])])
    got = {r["method"]: r["verdict"] for r in out["per_task"]}
    assert got == {"fast": "faster", "slow": "slower", "same": "equivalent"}
    assert out["counts"]["G=4 fast"] == {"faster": 1, "slower": 0, "equivalent": 0, "inconclusive": 0}
    spread = [x * (1 + (-1) ** i * 0.15) for i, x in enumerate(ref)]       # +-15% around the reference
    vague = plan_verdicts([rec("lookup_greedy", ref), rec("vague", spread)])
    assert vague["per_task"][0]["verdict"] == "inconclusive" and vague["counts"]["G=4 vague"]["inconclusive"] == 1


# ----------------------------------------------------------------------------- scripts/gpu/campaign.py on CPU

def _campaign_script():
    """scripts/gpu/campaign.py as a module: it imports on a machine without a GPU."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "campaign.py"
    spec = importlib.util.spec_from_file_location("gpu_campaign_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fused_phase_times_the_h100_ops_again_under_their_keys(tmp_path):
    from shardlab.measure.store import load_measured

    camp = _campaign_script()
    before = list(load_measured("compute", "h100"))
    jobs = camp.fused_jobs(PROF)
    assert len(jobs) == len(before) and len(camp.fused_jobs(PROF, limit=3)) == 3
    for (key, tables), old in zip(jobs, before):
        assert key == old["key"].replace("compute:h100:", f"compute:{PROF.name}:", 1) and tables == old["tables"]
    path = str(tmp_path / "f.db")
    assert camp.run_fused(path, PROF, workers=0, limit=2, deadline=None) == 2
    assert camp.run_fused(path, PROF, workers=0, limit=2, deadline=None) == 0          # resumes: nothing left
    with SampleStore(path) as store:
        rows = list(store.samples("compute"))
    assert [r["tables"] for r in rows] == [s["tables"] for s in before[:2]]
    assert len(same_ops(before, rows)[0]) == 2                                         # pairs op by op
    assert rows[0]["provenance"]["compute_timing"] == "perf_counter"                   # a CPU dry run
    assert rows[0]["provenance"]["campaign"]["replays"] == "the compute ops of datasets/h100"


def test_plans_phase_covers_every_method_and_leaves_out_what_cannot_run():
    from shardlab.search import sharder_names
    from studies.common.methods import TABLE_WISE

    camp = _campaign_script()
    methods = camp.plan_methods()
    assert set(methods) == set(sharder_names()) | {TABLE_WISE} and len(methods) == len(set(methods))
    ok, left_out = camp.runnable(["random", "no_such_sharder", "size_greedy"], 128)
    assert ok == ["random", "size_greedy"] and list(left_out) == ["no_such_sharder"]
    assert set(camp.PHASES) == {"fused", "compute", "test", "broad", "single", "plans"}
