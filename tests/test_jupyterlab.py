"""JupyterLab as a user meets it: `jupyter lab` serves this project's notebooks on loopback, and
the search notebook run there with ``interactive = True`` shows the live balance widget (plotly
FigureWidget through anywidget), which answers its plan selector and shows the tables on hover;
headless Chromium drives it with the network off."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tests.browser import chromium_page, jupyter_lab, prepare_notebook, run_notebook_in_lab

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "shardlab-test"
NOTEBOOKS = {"search.ipynb", "measure.ipynb", "train_cost_model.ipynb", "explore_data.ipynb", "benchmark.ipynb"}


def test_jupyter_lab_serves_the_notebooks(tmp_path):
    with jupyter_lab(ROOT, tmp_path, TOKEN) as base:
        with urllib.request.urlopen(f"{base}/api", timeout=10) as r:
            assert "version" in json.load(r)
        req = urllib.request.Request(f"{base}/api/contents/notebooks", headers={"Authorization": f"token {TOKEN}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            names = {c["name"] for c in json.load(r)["content"]}
        assert NOTEBOOKS <= names
        with urllib.request.urlopen(f"{base}/lab?token={TOKEN}", timeout=10) as r:
            assert r.status == 200 and "JupyterLab" in r.read().decode()


WIDGET_TITLES = "[...document.querySelectorAll('.jp-OutputArea-output .js-plotly-plot .annotation-text')]" \
                ".map(e => e.textContent)"


def test_balance_widget_is_live_in_jupyterlab(tmp_path):
    (tmp_path / "root").mkdir()
    prepare_notebook("search", tmp_path / "root", interactive=True, ngpu=4, ntables=20, out_dir="", report_dir="",
                     methods="random,dim_greedy,neuroshard")
    with jupyter_lab(tmp_path / "root", tmp_path, TOKEN) as base, \
            chromium_page(width=1400, height=1000, allow=(base,)) as page:
        run_notebook_in_lab(page, base, "search.ipynb", TOKEN)
        page.wait_for_selector(".jp-OutputArea-output .widget-dropdown select", timeout=180_000)
        page.wait_for_selector(".jp-OutputArea-output .jupyter-widgets .js-plotly-plot .trace.bars .point path",
                               timeout=60_000)
        selects = page.query_selector_all(".jp-OutputArea-output .widget-dropdown select")
        assert [s.input_value() for s in selects] == ["random", "neuroshard"]
        assert any(t.startswith("random") for t in page.evaluate(WIDGET_TITLES))
        selects[0].select_option("dim_greedy")                 # the user picks another plan A
        page.wait_for_function(f"{WIDGET_TITLES}.some(t => t.startsWith('dim_greedy'))", timeout=30_000)
        assert not any(t.startswith("random") for t in page.evaluate(WIDGET_TITLES))
        widget = page.query_selector(".jp-OutputArea-output .jupyter-widgets .js-plotly-plot")
        widget.scroll_into_view_if_needed()
        box = widget.query_selector(".trace.bars .point path").bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # plotly hovers via its drag layer
        page.wait_for_selector(".jp-OutputArea-output .js-plotly-plot .hoverlayer .hovertext", timeout=10_000)
        hover = page.text_content(".jp-OutputArea-output .js-plotly-plot .hoverlayer .hovertext")
        text = page.inner_text(".jp-NotebookPanel")
        errors, refused = list(page.errors), list(page.refused)
    assert "tables:" in hover and "dim_greedy" in hover
    assert "Traceback" not in text and "Error" not in text.replace("no error", "")
    assert errors == [] and refused == [], (errors, refused)
