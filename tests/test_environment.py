"""environment.yml lists the same requirements as pyproject.toml (no drift), torch stays
pinned to the CPU-loadable pair, and the installed versions are the pinned ones."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pyproject_requirements() -> set[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = set(data["dependencies"])
    for extra, items in data["optional-dependencies"].items():
        if extra == "cuda":  # the GPU alternative to fbgemm-gpu-cpu; not in the CPU env
            continue
        reqs |= {r for r in items if not r.startswith("shardlab")}
    return {r.replace(" ", "") for r in reqs}


def _environment_requirements() -> set[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return {r.replace(" ", "") for r in pip if not r.startswith(("-", "--"))}


def test_environment_yml_matches_pyproject():
    assert _environment_requirements() == _pyproject_requirements()


def test_torch_and_fbgemm_pins():
    reqs = _pyproject_requirements()
    assert "torch==2.13.0" in reqs and "fbgemm-gpu-cpu==1.8.0" in reqs
    assert not any(re.fullmatch(r"torch", r) for r in reqs)


def test_installed_versions_are_the_pins():
    for req in _pyproject_requirements():
        if "==" in req:
            name, want = req.split("==")
            assert version(name).split("+")[0] == want, name  # torch: 2.13.0+cpu
    assert version("torch").startswith("2.13.0")
