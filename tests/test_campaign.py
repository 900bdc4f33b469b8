"""Compute campaigns: deterministic samples within the memory cap, provenance recorded, and
`kill -9` in the middle loses no completed sample; a rerun resumes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

from shardlab.cli import main
from shardlab.constants import GB
from shardlab.data.tasks import pool_tables
from shardlab.measure.campaign import compute_sample_tables
from shardlab.measure.hardware import profile_with
from shardlab.measure.store import SampleStore

# small ops (each within 0.25 GB): what these tests check is the store and the signals, not the kernels
FAST = ["--batch-size", "256", "--repeats", "3", "--warmup", "1", "--max-tables", "4", "--mem-gb", "0.25", "--no-progress"]


def test_sample_tables_deterministic_and_capped():
    tables = pool_tables("dlrm-synth", "train")
    a = compute_sample_tables(tables, 7, 0, 15, int(0.5 * GB), "fp32", "exact_sgd")
    assert a == compute_sample_tables(tables, 7, 0, 15, int(0.5 * GB), "fp32", "exact_sgd")
    assert a != compute_sample_tables(tables, 8, 0, 15, int(0.5 * GB), "fp32", "exact_sgd")
    for i in range(20):
        s = compute_sample_tables(tables, i, 1, 15, int(0.5 * GB), "fp32", "exact_sgd")
        assert 1 <= len(s) <= 15 and sum(t.memory_bytes() for t in s) <= 0.5 * GB
    assert profile_with("cpu", batch_size=256).name == "cpu[batch_size=256]"


def _count(path) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_kill_9_loses_nothing_and_rerun_resumes(tmp_path):
    store = tmp_path / "compute.db"
    args = ["measure", "compute", "--store", str(store), "--samples", "40", "--workers", "2", *FAST]
    proc = subprocess.Popen([sys.executable, "-m", "shardlab", *args], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while _count(store) < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # parent and its workers, mid-campaign
    proc.wait()
    with SampleStore(store) as s:
        assert s.integrity_ok()
        before = {r["key"]: r for r in s.samples("compute")}
    assert 3 <= len(before) < 40, "the kill must land mid-campaign"
    assert main(args) == 0  # resume
    with SampleStore(store) as s:
        after = {r["key"]: r for r in s.samples("compute")}
    assert len(after) == 40
    assert {k.rsplit(":", 1)[1] for k in after} == {str(i) for i in range(40)}
    assert all(after[k] == v for k, v in before.items())  # nothing rewritten
    some = next(iter(after.values()))
    prov = some["provenance"]
    assert prov["profile"]["batch_size"] == 256 and prov["torch"].startswith("2.13")
    assert {"hardware", "fbgemm_gpu", "date", "git", "command"} <= set(prov)
    assert some["total_ms"] > 0 and 1 <= len(some["tables"]) <= 4


def test_ctrl_c_stops_the_workers_quietly_and_keeps_every_stored_sample(tmp_path):
    """Ctrl-C at a terminal signals the whole process group: the workers ignore it (started with
    SIGINT ignored), the command prints one line and exits 130, and the store stays whole."""
    store = tmp_path / "compute.db"
    args = ["measure", "compute", "--store", str(store), "--samples", "40", "--workers", "2", *FAST]
    proc = subprocess.Popen([sys.executable, "-m", "shardlab", *args], start_new_session=True, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as at a terminal
    deadline = time.time() + 180
    while _count(store) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines() == ["shardlab: interrupted"], err
    with SampleStore(store) as s:
        assert s.integrity_ok() and 2 <= len(list(s.samples("compute"))) < 40


def test_single_table_costs_and_measured_figures(tmp_path):
    from shardlab.measure.campaign import run_compute_campaign, run_single_table_costs
    from shardlab.report.measured import (campaign_summary, cost_vs_features_figure,
                                          fused_and_summed, fused_vs_sum_figure)

    prof = profile_with("cpu", batch_size=128, repeats=3, warmup=1)
    store = tmp_path / "m.db"
    assert run_compute_campaign(str(store), 5, prof, max_tables=3, mem_cap_gb=0.25, progress=False) == 5
    added = run_single_table_costs(str(store), prof, progress=False)
    assert run_single_table_costs(str(store), prof, progress=False) == 0  # all measured already
    with SampleStore(store) as s:
        samples = list(s.samples("compute"))
        singles = {r["key"]: r for r in s.samples("single")}
    assert added == len(singles) == len({(t["name"], t["dim"]) for x in samples for t in x["tables"]})
    fused, summed, n = fused_and_summed(samples, singles)
    assert len(fused) == 5 and (summed > 0).all() and list(n) == [len(x["tables"]) for x in samples]
    summary = campaign_summary(samples, singles)
    assert summary["samples"] == 5 and summary["median_relative_spread"] >= 0
    assert "measured:" in cost_vs_features_figure(samples).layout.title.text
    assert "measured:" in fused_vs_sum_figure(samples, singles).layout.title.text


def test_comm_campaign_resumes_and_records(tmp_path, capsys):
    from shardlab.measure.campaign import comm_sample_spec

    spec = comm_sample_spec(4, 3, 0)
    assert spec == comm_sample_spec(4, 3, 0) and sum(spec["dim_sums"]) == sum(spec["dims"])
    assert 0 <= spec["p"] <= 1 and all(0 <= d <= 30 for d in spec["delays_ms"])
    store = tmp_path / "comm.db"
    args = ["measure", "comm", "--store", str(store), "--ngpu", "2", "--samples", "3", "--batch-size", "64",
            "--repeats", "3", "--warmup", "1", "--max-delay-ms", "5", "--no-progress"]
    assert main(args) == 0
    assert "G=2: +3 (3 stored)" in capsys.readouterr().out
    assert main(args) == 0
    assert "G=2: +0 (3 stored)" in capsys.readouterr().out
    with SampleStore(store) as s:
        rows = list(s.samples("comm:2"))
    assert len(rows) == 3
    r = rows[0]
    assert len(r["fw_comm_ms"]) == 2 and len(r["delays_ms"]) == 2 and r["batch_size"] == 64
    assert r["provenance"]["campaign"]["world_size"] == 2 and "hardware" in r["provenance"]
