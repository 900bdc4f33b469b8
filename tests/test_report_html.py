"""Standalone HTML reports: offline (plotly.js embedded, nothing fetched), with costs, ratios
to the bound, search time, charts and provenance (the machine and versions as the caller passes
them: report/ does not inspect the machine); the CLI writes the same report."""

from __future__ import annotations

import re

import pytest

from shardlab.cli import main
from shardlab.costmodel.bundle import load_bundle
from shardlab.data.tasks import generate_task
from shardlab.evaluate import estimate_plan
from shardlab.io import save_plan, save_task
from shardlab.measure.hardware import environment
from shardlab.report.html import NO_ENVIRONMENT, write_report
from shardlab.search import get_sharder, run_sharder


def test_report_is_standalone_and_complete(tmp_path):
    task = generate_task(ntables=12, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=8)
    plans = {m: run_sharder(get_sharder(m), task) for m in ("size_greedy", "neuroshard[columns=false]")}
    model = load_bundle("analytic")
    evs = {m: estimate_plan(task, p, model) for m, p in plans.items()}
    text = write_report(tmp_path / "r.html", task, plans, evs, {"seed": 0}, environment=environment("cpu")).read_text()
    assert not re.search(r"<script[^>]+src=", text)          # nothing fetched
    assert "Plotly" in text and text.count("plotly-graph-div") >= 2
    for m, e in evs.items():
        assert f"<td>{m}</td>" in text and f"<td>{round(e.cost_ms, 3):.4g}</td>" in text
    assert "analytic:cpu[batch_size=4096]" in text and "fbgemm_gpu" in text and "cost / lower bound" in text
    bare = write_report(tmp_path / "n.html", task, plans, evs, {"seed": 0}).read_text()
    [(said, value)] = NO_ENVIRONMENT.items()
    assert f"<th>{said}</th><td>{value}</td>" in bare and "fbgemm_gpu" not in bare


def test_report_cli(tmp_path, capsys):
    task = generate_task(ntables=8, ngpu=2, mem_cap_gb=4.0, batch_size=4096, seed=9)
    save_task(task, tmp_path / "t.json")
    for m in ("random", "dim_greedy"):
        save_plan(run_sharder(get_sharder(m), task), tmp_path / f"{m}.json")
    assert main(["report", str(tmp_path / "random.json"), str(tmp_path / "dim_greedy.json"), "--task",
                 str(tmp_path / "t.json"), "--html", str(tmp_path / "r.html"), "--model", "analytic"]) == 0
    assert "2 plans, best" in capsys.readouterr().out and (tmp_path / "r.html").stat().st_size > 1_000_000
    assert "fbgemm_gpu" in (tmp_path / "r.html").read_text()     # the CLI passes the machine and versions
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


def _measured_setup():
    """Four plans 'measured' in 5 paired rounds (tests/rounds_fakes.py, no kernels): random is
    slower than size_greedy (the reference), lookup_greedy's median is lower but its interval
    reaches beyond 1/(1 + 5%) and 1 (inconclusive), neuroshard[columns=false] is faster."""
    from shardlab.evaluate import ModelEvaluator
    from tests.rounds_fakes import as_measured

    task = generate_task(ntables=12, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=8)
    plans = {m: run_sharder(get_sharder(m), task) for m in ("size_greedy", "random", "lookup_greedy", "neuroshard[columns=false]")}
    pred = ModelEvaluator("analytic", reference="size_greedy").evaluate(task, plans)
    near = pred["size_greedy"].cost_ms / pred["lookup_greedy"].cost_ms * 0.99
    evs = as_measured(pred, scale={"lookup_greedy": near}, reference="size_greedy")
    assert [e.verdict for e in evs.values()][1:] == ["slower", "inconclusive", "faster"]
    return task, plans, pred, evs


def test_measured_report_has_error_bars_ratios_and_verdicts(tmp_path):
    from shardlab.report.costs import cost_summary_rows, plan_cost_figure

    from tests.rounds_fakes import as_measured

    task, plans, pred, evs = _measured_setup()
    near = pred["size_greedy"].cost_ms / pred["lookup_greedy"].cost_ms * 0.99
    bar = plan_cost_figure(evs).data[0]
    lows = [c - d for c, d in zip(bar.y, bar.error_y.arrayminus)]
    highs = [c + u for c, u in zip(bar.y, bar.error_y.array)]
    assert bar.error_y.visible and not bar.error_y.symmetric
    assert lows == pytest.approx([e.ci95_ms[0] for e in evs.values()])
    assert highs == pytest.approx([e.ci95_ms[1] for e in evs.values()])
    assert list(bar.marker.pattern.shape) == ["/", "", "", ""]             # the reference is marked
    rows = {r["method"]: r for r in cost_summary_rows(evs)}
    key = "ratio vs size_greedy [95% CI]"
    c = evs["lookup_greedy"].comparison
    assert rows["lookup_greedy"][key] == f"{c.ratio:.3f} [{c.ratio_ci95[0]:.3f}, {c.ratio_ci95[1]:.3f}]"
    assert [r["verdict"] for r in rows.values()] == ["reference", "slower", "inconclusive", "faster"]
    assert rows["random"]["cost 95% CI (ms)"] == "[{:.3f}, {:.3f}]".format(*evs["random"].ci95_ms)
    text = write_report(tmp_path / "m.html", task, plans, evs, {"seed": 0}).read_text()
    for word in (key, "inconclusive", "faster", "slower", "95% bootstrap", "error bars", "arrayminus",
                 "equivalence margin m = 5%"):
        assert word in text, word
    assert "predicted, no uncertainty" not in text and "within noise" not in text
    # the same rounds judged with a 10% margin: lookup_greedy's interval lies inside [1/1.1, 1.1]
    wide = as_measured(pred, scale={"lookup_greedy": near}, reference="size_greedy", margin=0.10)
    lo, hi = wide["lookup_greedy"].comparison.ratio_ci95
    assert 1 / 1.1 <= lo <= 1.0 <= hi <= 1.1 and wide["lookup_greedy"].verdict == "equivalent"
    text = write_report(tmp_path / "w.html", task, plans, wide, {"seed": 0}).read_text()
    assert "equivalence margin m = 10%" in text and "equivalent" in text


def test_model_report_says_no_uncertainty(tmp_path):
    from shardlab.report.costs import cost_summary_rows, plan_cost_figure

    task, plans, pred, _ = _measured_setup()
    bar = plan_cost_figure(pred).data[0]
    assert not bar.error_y.visible and "no uncertainty" in plan_cost_figure(pred).layout.title.text
    rows = cost_summary_rows(pred)
    assert "cost 95% CI (ms)" not in rows[0] and "ratio vs size_greedy [95% CI]" not in rows[0]
    assert [r["verdict"] for r in rows] == ["reference"] + ["predicted, no uncertainty"] * 3
    assert rows[1]["ratio vs size_greedy"] == f"{pred['random'].comparison.ratio:.3f}"
    text = write_report(tmp_path / "p.html", task, plans, pred, {"seed": 0}).read_text()
    assert "predicted, no uncertainty" in text and "within noise" not in text


def test_report_compares_evaluations_that_carry_no_comparison(tmp_path):
    """Evaluations made one by one (estimate_plan) are compared to the best baseline by the report."""
    from shardlab.evaluate import compare_to_reference, resolve_reference

    task, plans, _, _ = _measured_setup()
    model = load_bundle("analytic")
    bare = {m: estimate_plan(task, p, model) for m, p in plans.items()}
    ref = resolve_reference(bare, None)
    assert ref in ("size_greedy", "random", "lookup_greedy")
    text = write_report(tmp_path / "b.html", task, plans, bare, {"seed": 0}).read_text()
    ratio = compare_to_reference(bare)["neuroshard[columns=false]"].comparison.ratio
    assert f"ratio vs {ref}" in text and f"<td>{ratio:.3f}</td>" in text
