"""Where torch is imported (docs/extending.md, "Where torch is imported"): the packages that read,
check, cost analytically and draw plans load no torch, torchrec, fbgemm or plotly when imported (nor
do the TorchRec folder's package and its plan export: its other modules load torchrec when used);
the search and evaluate packages load torch (their policies and measured evaluators are torch
code) but never torchrec. Each import runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torchrec", "fbgemm_gpu", "plotly")
LIGHT = ("shardlab", "shardlab.tables", "shardlab.plan", "shardlab.data", "shardlab.io", "shardlab.costmodel",
         "shardlab.report", "shardlab.cli", "shardlab.torchrec", "shardlab.torchrec.export")


def _loaded(module: str) -> list[str]:
    code = (f"import sys, json; import {module}; "
            f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", LIGHT)
def test_the_light_packages_load_no_heavy_package(module):
    assert _loaded(module) == []


@pytest.mark.parametrize("module", ["shardlab.search", "shardlab.evaluate"])
def test_search_and_evaluate_load_torch_but_not_torchrec(module):
    assert _loaded(module) == ["torch"]
