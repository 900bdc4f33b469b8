"""The generated HTML report opened like a user would: headless Debian Chromium with the network
off, a screenshot, and checks that every chart rendered (bars drawn, plot area not blank, no
console errors, nothing fetched)."""

from __future__ import annotations

from shardlab.costmodel.bundle import load_bundle
from shardlab.data.tasks import generate_task
from shardlab.evaluate import estimate_plan
from shardlab.report.html import write_report
from shardlab.search import get_sharder, run_sharder
from tests.browser import chromium_page, pixel_spread


def test_report_renders_offline_in_chromium(tmp_path):
    task = generate_task(ntables=16, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=3)
    plans = {m: run_sharder(get_sharder(m), task) for m in ("random", "lookup_greedy", "neuroshard[columns=false]")}
    model = load_bundle("analytic")
    evaluations = {m: estimate_plan(task, p, model) for m, p in plans.items()}
    path = write_report(tmp_path / "report.html", task, plans, evaluations, {"seed": 0})
    with chromium_page(width=1280, height=1000) as page:
        page.goto(path.resolve().as_uri())
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        charts = page.query_selector_all(".js-plotly-plot")
        shot = page.screenshot(full_page=True)
        (tmp_path / "report.png").write_bytes(shot)
        bars = page.evaluate("document.querySelectorAll('.js-plotly-plot .trace.bars .point path').length")
        text = page.inner_text("body")
        spreads = [pixel_spread(c.screenshot()) for c in charts]
        errors, refused, requests = list(page.errors), list(page.refused), list(page.requests)
    assert len(charts) >= 2
    # every plan's GPUs carry four stacked parts in the cost chart: at least 3 plans x 4 GPUs x 4
    assert bars >= len(plans) * task.ngpu * 4
    assert all(std > 10 and levels > 20 for std, levels in spreads), spreads
    assert errors == [] and refused == [], (errors, refused)
    assert requests == [path.resolve().as_uri()]
    for m in plans:
        assert m in text
    assert "cost / lower bound" in text and len(shot) > 50_000


def test_blank_page_is_detected(tmp_path):
    """The checks above can fail: a report whose plotly.js is missing draws nothing."""
    page_path = tmp_path / "broken.html"
    page_path.write_text('<html><body><div class="js-plotly-plot" style="width:600px;height:300px"></div>'
                         '<script src="https://cdn.plot.ly/plotly-3.0.0.min.js"></script>'
                         '<script>Plotly.newPlot(document.querySelector("div"), [{type: "bar", y: [1, 2]}]);'
                         '</script></body></html>')
    with chromium_page() as page:
        page.goto(page_path.as_uri())
        page.wait_for_timeout(500)
        spread = pixel_spread(page.query_selector(".js-plotly-plot").screenshot())
        errors, refused = list(page.errors), list(page.refused)
    assert spread[0] < 1 and spread[1] <= 2
    assert any("cdn.plot.ly" in u for u in refused)
    assert any("Plotly is not defined" in e for e in errors)
