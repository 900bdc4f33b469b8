"""Every notebook run headless by papermill with ``interactive = True`` (the widgets are built
but nobody draws them) still finishes without error or hang: the widgets redraw through
FigureWidget updates, never through ``interactive_output`` (measured on this stack). A hang fails at
the execution timeout instead of eating the CI budget.

``scripts/test.sh`` runs every notebook so before pytest (nbval then re-executes those) and names
its folder in ``SHARDLAB_PAPERMILLED``; there these tests check those executions (their injected
parameters must say ``interactive = True``) instead of running each notebook a third time.
Elsewhere each test runs its notebook itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


def _executed(name: str, tmp_path: Path) -> nbformat.NotebookNode:
    """The notebook executed by papermill with ``interactive = True`` and its CI parameters:
    scripts/test.sh's execution where it names one, else one run here."""
    done = os.environ.get("SHARDLAB_PAPERMILLED")
    if done:
        nb = nbformat.read(Path(done) / f"{name}.ipynb", 4)
        injected = [c.source for c in nb.cells if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
        assert injected and "interactive = True" in injected[0], f"{name}: not executed with interactive = True"
        return nb
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
    return nbformat.read(out, 4)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_interactive_notebook_runs_headless(name, tmp_path):
    nb = _executed(name, tmp_path)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    widgets = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert errors == [] and widgets, f"{name}: {len(errors)} errors, {len(widgets)} widget outputs"
