"""How reports state uncertainty (shardlab.report.uncertainty): measured costs with intervals
and verdicts, measured costs without an interval (fewer than 3 rounds) said to have none,
predictions said to carry none; and a measured report drawn in Chromium with its error bars."""

from __future__ import annotations

import pytest

from shardlab.data.tasks import generate_task
from shardlab.constants import EQUIVALENCE_MARGIN
from shardlab.evaluate import VERDICTS, ModelEvaluator, compare_to_reference
from shardlab.report.costs import cost_summary_rows, plan_cost_figure
from shardlab.report.html import write_report
from shardlab.report.uncertainty import (NO_INTERVAL, NO_UNCERTAINTY, comparison_text, pair_text,
                                         uncertainty_note, verdict_text)
from shardlab.search import get_sharder, run_sharder
from tests.rounds_fakes import as_measured


@pytest.fixture(scope="module")
def case():
    task = generate_task(ntables=10, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=21)
    plans = {m: run_sharder(get_sharder(m), task) for m in ("size_greedy", "random", "neuroshard[columns=false]")}
    return task, plans, ModelEvaluator("analytic", reference="size_greedy").evaluate(task, plans)


def test_fewer_than_three_rounds_say_no_interval(case):
    _, _, pred = case
    two = as_measured(pred, rounds=2, reference="size_greedy")
    assert all(e.ci95_ms is None and e.verdict is None for e in two.values())
    assert verdict_text("random", two["random"]) == NO_INTERVAL
    assert [r["verdict"] for r in cost_summary_rows(two)] == ["reference", NO_INTERVAL, NO_INTERVAL]
    assert cost_summary_rows(two)[1]["cost 95% CI (ms)"] == NO_INTERVAL
    assert not plan_cost_figure(two).data[0].error_y.visible
    assert "fewer than 3 rounds" in uncertainty_note(two) and NO_UNCERTAINTY not in uncertainty_note(two)


def test_lines_for_measured_and_predicted_plans(case):
    _, _, pred = case
    measured = as_measured(pred, rounds=5, reference="size_greedy")
    e = measured["neuroshard[columns=false]"]
    c = e.comparison
    assert comparison_text("neuroshard[columns=false]", e) == (
        f"neuroshard[columns=false]: {e.cost_ms:.3f} ms [{e.ci95_ms[0]:.3f}, {e.ci95_ms[1]:.3f}] (5 rounds); "
        f"x{c.ratio:.3f} [{c.ratio_ci95[0]:.3f}, {c.ratio_ci95[1]:.3f}] vs size_greedy: {c.verdict}")
    assert comparison_text("size_greedy", measured["size_greedy"]).endswith("; the reference")
    assert comparison_text("random", pred["random"]).endswith(f"vs size_greedy: {NO_UNCERTAINTY}")
    # plan B vs plan A: paired when both have the same rounds, else the ratio of costs alone
    paired = compare_to_reference({"random": measured["random"], "neuroshard[columns=false]": e}, "random")["neuroshard[columns=false]"]
    assert pair_text("random", measured["random"], "neuroshard[columns=false]", e).endswith(f": {paired.verdict}")
    assert paired.verdict in VERDICTS and paired.comparison.margin == EQUIVALENCE_MARGIN
    other = as_measured(pred, rounds=4, reference="size_greedy")
    unpaired = pair_text("random", measured["random"], "neuroshard[columns=false]", other["neuroshard[columns=false]"])
    ratio = other["neuroshard[columns=false]"].cost_ms / measured["random"].cost_ms
    assert f"x{ratio:.3f} vs random" in unpaired and "faster" not in unpaired
    assert pair_text("random", pred["random"], "random", pred["random"]).endswith("the same plan on both sides")


def test_measured_report_draws_error_bars_in_chromium(case, tmp_path):
    from tests.browser import chromium_page

    task, plans, pred = case
    measured = as_measured(pred, rounds=5, reference="size_greedy")
    path = write_report(tmp_path / "m.html", task, plans, measured, {"seed": 0})
    with chromium_page(width=1280, height=1000) as page:
        page.goto(path.resolve().as_uri())
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        error_bars = page.evaluate("document.querySelectorAll('.js-plotly-plot .errorbar path.yerror').length")
        text = page.inner_text("body")
        errors = list(page.errors)
    assert error_bars >= len(plans) and errors == []
    assert "ratio vs size_greedy [95% CI]" in text and measured["neuroshard[columns=false]"].verdict in text
