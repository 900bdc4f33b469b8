#!/usr/bin/env python
"""Make the pictures in docs/img/ (not a test) in headless Debian Chromium, network off:

- docs/img/report.png: the top of the offline HTML report drawn from a committed record's stored
  Evaluations (default: the user guide's ``shardlab compare`` example in
  studies/quoted_figures/results/, 8 paired rounds of three plans measured on a 2-core VM). It
  measures nothing: every cost, interval and verdict in the picture comes from the record's
  ``rounds_ms``, and drawing it again gives the same picture.
- docs/img/widget.png: the search notebook run in JupyterLab with ``interactive=True`` and no
  measurement, the balance widget with plan A = ``--plan-a``. Its costs are the shipped cost
  model's predictions (same seed, same numbers), not measurements.

    .venv/bin/python studies/tools/readme_screenshots.py [--record FILE] [--ngpu 4 --ntables 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.evaluate import Evaluation  # noqa: E402
from shardlab.io import read_json  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from shardlab.report.html import write_report  # noqa: E402
from shardlab.tables import Task  # noqa: E402
from tests.browser import chromium_page, jupyter_lab, prepare_notebook, run_notebook_in_lab  # noqa: E402

RECORD = ROOT / "studies" / "quoted_figures" / "results" / "compare_example-20261125T033305Z.json"


def report_from_record(record_path: Path, html_path: Path) -> Path:
    """Write the offline report of a quoted-figures record's stored plans and Evaluations."""
    record = read_json(record_path)
    task = Task.from_dict(record["task"])
    plans = {p.method: p for p in (Plan.from_dict(d) for d in record["plans"].values())}
    evaluations = {e.method: e for e in (Evaluation.from_dict(d) for d in record["evaluations"])}
    provenance = {"drawn from": f"{record_path.relative_to(ROOT)} (stored rounds; nothing re-measured)",
                  "measured at": record["made"], "commit measured": record["git"]}
    return write_report(html_path, task, plans, evaluations, provenance,
                        environment=record["environment"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", default=str(RECORD), help="quoted-figures record the report is drawn from")
    ap.add_argument("--ngpu", type=int, default=4)
    ap.add_argument("--ntables", type=int, default=30)
    ap.add_argument("--methods", default="random,lookup_greedy,torchrec,dreamshard,autoshard,neuroshard")
    ap.add_argument("--plan-a", default="torchrec")
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "root").mkdir()
        html_path = report_from_record(Path(args.record).resolve(), tmp / "report.html")
        with chromium_page(width=1280, height=1150) as page:
            page.goto(html_path.as_uri())
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
            page.wait_for_timeout(500)
            page.screenshot(path=str(out / "report.png"))
            assert not page.errors, page.errors
        # the widget: the notebook in JupyterLab, interactive, predicted costs
        prepare_notebook("search", tmp / "root", ngpu=args.ngpu, ntables=args.ntables, methods=args.methods,
                         measure=False, interactive=True, out_dir="", report_dir="")
        with jupyter_lab(tmp / "root", tmp) as base, chromium_page(width=1200, height=1000, allow=(base,)) as page:
            run_notebook_in_lab(page, base, "search.ipynb")
            page.wait_for_selector(".jp-OutputArea-output .jupyter-widgets .js-plotly-plot .trace.bars",
                                   timeout=600_000)
            select = page.query_selector(".jp-OutputArea-output .widget-dropdown select")
            select.select_option(args.plan_a)
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
    sys.exit(main())
