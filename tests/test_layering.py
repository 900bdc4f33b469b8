"""The package's layers import one way (docs/extending.md, "The house rules"), and the studies stay apart:

    tables, plan, schedule, constants, errors, io, paths, loads  <-  data  <-  profile  <-  costmodel
    <-  evaluate  <-  search  <-  workflows  <-  report  <-  CLI, notebooks

A module may import its own layer and the layers to its left, never one to its right. In
particular search/ sees cost-model and evaluator protocols but never profile/ (measurement) or
workflows/ (campaigns, policy training, benchmark runs). And report/ only draws and writes:
it may import the data, cost-model and evaluation layers (the rows, Evaluations and plans it is
handed), never search/ (it runs no sharder), profile/ (it measures nothing and does not inspect
the machine: callers pass the environment in) or workflows/ (which produce what it draws,
and are imported by the CLI, studies and notebooks that hand their results to report/). Parsed
from the source (every import, including imports inside functions), so a lazy import cannot
hide a violation.

The studies (``studies/<name>/``: each experiment's driver, regenerating command and results)
are not installed and no package module imports them; ``scripts/`` holds only the install, test
and setup helpers and the GPU campaign's entry points (``scripts/gpu/``).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shardlab"
STUDIES = ROOT / "studies"
#: Everything ``scripts/`` may hold: install, test and setup helpers, and the GPU campaign.
SCRIPTS = {"setup.sh", "test.sh", "setup_browser.sh", "sealed_test.sh", "gpu/README.md", "gpu/campaign.py", "gpu/lease.py",
           "gpu/lease_calls.json", "gpu/fbgemm_pack.py", "gpu/fbgemm-1.6.0.sha256", "gpu/fbgemm-1.6.0-sm90.json"}

#: Layer of each top-level module or subpackage; higher may import lower, never the reverse.
LAYERS = {"constants": 0, "bounds": 0, "errors": 0, "tables": 0, "plan": 0, "schedule": 0, "io": 0, "paths": 0, "loads": 0, "processes": 0,
          "data": 1, "measure": 2, "costmodel": 3, "evaluate": 4, "search": 5,
          "workflows": 6, "torchrec": 6, "report": 7, "cli": 8, "dist": 8,
          "__init__": 8, "__main__": 8}

def _modules(path: Path) -> set[str]:
    """Every absolute module name the file imports (``from x import y``: ``x``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _imports(path: Path) -> set[str]:
    """Top-level shardlab parts (``data``, ``search``, ...) that the file imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for n in names:
            parts = n.split(".")
            if parts[0] == "shardlab" and len(parts) > 1:
                out.add(parts[1])
    return out


def _violations() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        me = rel.parts[0].removesuffix(".py")
        assert me in LAYERS, f"{rel}: module not placed in a layer (add it to LAYERS)"
        for other in _imports(path):
            if other in LAYERS and LAYERS[other] > LAYERS[me]:
                found.setdefault((me, other), []).append(str(rel))
    return found


def test_imports_go_one_way():
    bad = _violations()
    assert not bad, f"imports against the layering: {bad}"


def test_search_never_sees_measurement_or_workflows():
    for path in (PACKAGE / "search").rglob("*.py"):
        assert not _imports(path) & {"measure", "workflows", "report"}, path


def test_report_only_draws_and_writes():
    """report/ imports none of search/, profile/, workflows/ (module docstring)."""
    for path in (PACKAGE / "report").rglob("*.py"):
        assert not _imports(path) & {"search", "measure", "workflows"}, path


def test_no_private_names_imported_across_modules():
    """A name starting with ``_`` is its module's own: no other shardlab module imports it."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shardlab"):
                found += [f"{path.relative_to(PACKAGE)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, f"private names imported across modules: {found}"


def test_the_package_never_imports_the_studies():
    found = [f"{path.relative_to(ROOT)}: {m}" for path in sorted(PACKAGE.rglob("*.py"))
             for m in _modules(path) if m.split(".")[0] == "studies"]
    assert not found, f"package modules importing studies/: {found}"


def test_the_studies_are_not_installed():
    """Package discovery takes ``shardlab`` and its subpackages only: never ``studies``."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert find["include"] == ["shardlab*"], find


def test_scripts_hold_only_install_test_and_setup_helpers():
    held = {str(p.relative_to(ROOT / "scripts")) for p in (ROOT / "scripts").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}
    assert held <= SCRIPTS, f"scripts/ holds more than its helpers (a study goes to studies/): {sorted(held - SCRIPTS)}"


def test_every_study_says_how_to_regenerate_its_results():
    """Each ``studies/<name>/README.md`` names every driver of the study with the command that
    runs it from the repository root, and the index lists every study."""
    index = (STUDIES / "README.md").read_text()
    folders = [d for d in sorted(STUDIES.iterdir()) if d.is_dir() and d.name not in ("__pycache__",)]
    assert {d.name for d in folders} >= {"common", "tools"}
    for d in folders:
        assert f"({d.name}/)" in index, f"studies/README.md does not list {d.name}/"
        if d.name == "common":
            continue
        readme = (d / "README.md").read_text()
        drivers = [p for p in sorted(d.glob("*.py")) if re.search(r'^if __name__ == "__main__":', p.read_text(), re.M)]
        assert drivers, d
        for p in drivers:
            assert f".venv/bin/python studies/{d.name}/{p.name}" in readme, f"{d.name}/README.md: no command for {p.name}"
        for r in sorted((d / "results").glob("*.md")) if (d / "results").exists() else []:
            assert f"results/{r.stem}" in readme, f"{d.name}/README.md does not mention {r.name}"


#: Packages a function may import where it needs them: optional or slow to import.
LAZY_OK = {"torch", "torchrec", "fbgemm_gpu", "plotly", "ipywidgets", "IPython", "papermill", "nbformat"}


def test_imports_inside_functions_are_only_optional_heavy_packages():
    """Everything else -- shardlab's own modules, the standard library, numpy -- is imported at
    the top of the module, where a reader sees what the module depends on."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                for n in names:
                    assert n.split(".")[0] in LAZY_OK, f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {n} in a function"
