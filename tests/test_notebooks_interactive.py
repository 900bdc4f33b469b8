"""Every notebook run headless by papermill with ``interactive = True`` (the widgets are built
but nobody draws them) still finishes without error or hang: the widgets redraw through
FigureWidget updates, never through ``interactive_output`` (measured on this stack). A hang fails at
the execution timeout instead of eating the CI budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_interactive_notebook_runs_headless(name, tmp_path):
    params = ["-p", "interactive", "True", "-p", "out_dir", str(tmp_path / "out")]
    if (ROOT / "notebooks" / "ci" / f"{name}.yaml").exists():
        params += ["-f", str(ROOT / "notebooks" / "ci" / f"{name}.yaml")]
    if name == "search":
        params += ["-p", "report_dir", str(tmp_path / "reports")]
    out = tmp_path / f"{name}.ipynb"
    proc = subprocess.run([str(Path(sys.executable).with_name("papermill")), "--no-progress-bar",
                           "--execution-timeout", "180", "--cwd", str(tmp_path),
                           str(ROOT / "notebooks" / f"{name}.ipynb"), str(out), *params],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = nbformat.read(out, 4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    widgets = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert errors == [] and widgets, f"{name}: {len(errors)} errors, {len(widgets)} widget outputs"
