"""An executed notebook shared as HTML (``jupyter nbconvert --to html``) keeps its plotly
figures and draws them offline in headless Chromium."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.browser import chromium_page, pixel_spread

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_executed_search_notebook_converts_with_its_figures(tmp_path):
    out = tmp_path / "search.ipynb"
    subprocess.run([str(BIN / "papermill"), "--no-progress-bar", "--cwd", str(tmp_path),
                    str(ROOT / "notebooks" / "search.ipynb"), str(out), "-p", "ngpu", "2", "-p", "ntables", "8",
                    "-p", "methods", "random,size_greedy", "-p", "out_dir", "", "-p", "report_dir", ""],
                   check=True, capture_output=True)
    subprocess.run([str(BIN / "jupyter"), "nbconvert", "--to", "html", str(out)], check=True, capture_output=True)
    html = tmp_path / "search.html"
    with chromium_page(width=1200, height=900) as page:
        page.goto(html.as_uri())
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        plots = page.query_selector_all(".js-plotly-plot")
        spreads = [pixel_spread(p.screenshot()) for p in plots]
        bars = page.evaluate("document.querySelectorAll('.js-plotly-plot .trace.bars .point path').length")
        plotly_errors = [e for e in page.errors if "Plotly" in e or "exception" in e]
    assert len(plots) == 3                     # the load figure, the plan-cost figure and the per-GPU cost figure
    assert bars > 0 and all(std > 10 for std, _ in spreads), spreads
    assert plotly_errors == []
