"""Standalone HTML reports: offline (plotly.js embedded, nothing fetched), with costs, ratios
to the bound, search time, charts and provenance; the CLI writes the same report."""

from __future__ import annotations

import re

from shardlab.cli import main
from shardlab.costmodel.bundle import load_bundle
from shardlab.data.tasks import generate_task
from shardlab.evaluate import estimate_plan
from shardlab.io import save_plan, save_task
from shardlab.report.html import write_report
from shardlab.search import get_sharder, run_sharder


def test_report_is_standalone_and_complete(tmp_path):
    task = generate_task(ntables=12, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=8)
    plans = {m: run_sharder(get_sharder(m), task) for m in ("size_greedy", "neuroshard_tw")}
    model = load_bundle("analytic")
    evs = {m: estimate_plan(task, p, model) for m, p in plans.items()}
    text = write_report(tmp_path / "r.html", task, plans, evs, {"seed": 0}).read_text()
    assert not re.search(r"<script[^>]+src=", text)          # nothing fetched
    assert "Plotly" in text and text.count("plotly-graph-div") >= 2
    for m, e in evs.items():
        assert f"<td>{m}</td>" in text and f"<td>{round(e.cost_ms, 3):.4g}</td>" in text
    assert "analytic:cpu[batch_size=4096]" in text and "fbgemm_gpu" in text and "cost / lower bound" in text


def test_report_cli(tmp_path, capsys):
    task = generate_task(ntables=8, ngpu=2, mem_cap_gb=4.0, batch_size=4096, seed=9)
    save_task(task, tmp_path / "t.json")
    for m in ("random", "dim_greedy"):
        save_plan(run_sharder(get_sharder(m), task), tmp_path / f"{m}.json")
    assert main(["report", str(tmp_path / "random.json"), str(tmp_path / "dim_greedy.json"), "--task",
                 str(tmp_path / "t.json"), "--html", str(tmp_path / "r.html"), "--model", "analytic"]) == 0
    assert "2 plans, best" in capsys.readouterr().out and (tmp_path / "r.html").stat().st_size > 1_000_000
    other = generate_task(ntables=8, ngpu=2, mem_cap_gb=4.0, batch_size=4096, seed=10)
    save_task(other, tmp_path / "o.json")
    assert main(["report", str(tmp_path / "random.json"), "--task", str(tmp_path / "o.json"),
                 "--html", str(tmp_path / "x.html")]) == 2
    assert "field 'task'" in capsys.readouterr().err


def test_report_cli_defaults_to_reports_dir(tmp_path, monkeypatch, capsys):
    task = generate_task(ntables=6, ngpu=2, mem_cap_gb=4.0, batch_size=4096, seed=11)
    save_task(task, tmp_path / "t.json")
    save_plan(run_sharder(get_sharder("size_greedy"), task), tmp_path / "p.json")
    monkeypatch.chdir(tmp_path)
    assert main(["report", "p.json", "--task", "t.json", "--model", "analytic"]) == 0
    assert (tmp_path / "reports" / f"{task.name}.html").stat().st_size > 1_000_000
    assert f"reports/{task.name}.html" in capsys.readouterr().out
