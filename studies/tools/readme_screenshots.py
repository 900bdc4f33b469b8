#!/usr/bin/env python
"""Make the README's screenshots (not a test) in headless Debian Chromium, network off:

- docs/img/widget.png: the search notebook run in JupyterLab with ``interactive=True`` (and, with
  ``--measure``, every plan measured here in ``--rounds`` paired rounds so the widget's
  simulated/measured toggle is live and shows each cost's 95% interval and plan B's verdict
  against plan A), the balance widget with plan A = ``--plan-a``;
- docs/img/report.png: the top of the offline HTML report that run's twin writes headless.

    .venv/bin/python studies/tools/readme_screenshots.py [--measure [--rounds 5]] [--ngpu 4 --ntables 30]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.browser import chromium_page, jupyter_lab, prepare_notebook, run_notebook_in_lab  # noqa: E402

PAPERMILL = str(Path(sys.executable).with_name("papermill"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ngpu", type=int, default=4)
    ap.add_argument("--ntables", type=int, default=30)
    ap.add_argument("--methods", default="random,lookup_greedy,torchrec,dreamshard,autoshard,neuroshard")
    ap.add_argument("--plan-a", default="torchrec")
    ap.add_argument("--measure", action="store_true", help="measure every plan (slow; enables the toggle)")
    ap.add_argument("--rounds", type=int, default=5, help="paired measurement rounds with --measure (3 or more: CIs)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    values = {"ngpu": args.ngpu, "ntables": args.ntables, "methods": args.methods, "measure": args.measure,
              "rounds": args.rounds}
    params = [a for k, v in values.items() for a in ("-p", k, str(v))]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "root").mkdir()
        # the report: the same notebook headless
        subprocess.run([PAPERMILL, "--no-progress-bar", str(ROOT / "notebooks" / "search.ipynb"),
                        str(tmp / "headless.ipynb"), *params, "-p", "out_dir", "", "-p", "report_dir", str(tmp / "run")],
                       check=True)
        with chromium_page(width=1280, height=1150) as page:
            page.goto(next((tmp / "run").glob("search-*.html")).as_uri())
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
            page.wait_for_timeout(500)
            page.screenshot(path=str(out / "report.png"))
            assert not page.errors, page.errors
        # the widget: the notebook in JupyterLab, interactive
        prepare_notebook("search", tmp / "root", **values, interactive=True, out_dir="", report_dir="")
        with jupyter_lab(tmp / "root", tmp) as base, chromium_page(width=1200, height=1000, allow=(base,)) as page:
            run_notebook_in_lab(page, base, "search.ipynb")
            page.wait_for_selector(".jp-OutputArea-output .jupyter-widgets .js-plotly-plot .trace.bars",
                                   timeout=600_000)
            select = page.query_selector(".jp-OutputArea-output .widget-dropdown select")
            select.select_option(args.plan_a)
            if args.measure:                                   # show measured costs in the widget
                page.click(".jp-OutputArea-output .widget-toggle-buttons button:has-text('measured')")
                page.wait_for_function("[...document.querySelectorAll('.jp-OutputArea-output .js-plotly-plot .gtitle')]"
                                       ".some(e => e.textContent.includes('measured'))", timeout=30_000)
            page.wait_for_timeout(1500)
            output = select.evaluate_handle("e => e.closest('.jp-OutputArea-output')").as_element()
            output.scroll_into_view_if_needed()
            widget = output.query_selector(".js-plotly-plot")
            bars = widget.query_selector_all(".trace.bars")                # plan A's four parts, then plan B's
            box = bars[2].query_selector_all(".point path")[1].bounding_box()   # plan A, GPU 1, forward all-to-all
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)   # show a hover label
            page.wait_for_timeout(800)
            output.screenshot(path=str(out / "widget.png"))
            assert not page.errors, page.errors
    print(f"wrote {out / 'widget.png'} and {out / 'report.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
