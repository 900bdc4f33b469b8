"""scripts/setup.sh selects the right builds: run in its dry-run mode (it prints the commands a
real run would run and creates nothing) with and without SHARDLAB_CUDA=1, its pip commands are
read back, the extras they install are resolved through pyproject.toml, and the pins are
checked: CPU torch 2.13.0 + fbgemm-gpu-cpu 1.8.0 from the default index, CUDA torch 2.13.0 +
fbgemm-gpu 1.8.0 from the PyTorch cu130 index, torchrec 1.8.0 without dependencies in both."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "scripts" / "setup.sh"
CU130 = "https://download.pytorch.org/whl/cu130"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def dry_run(venv: Path, cuda: bool) -> tuple[str, list[list[str]]]:
    """setup.sh's dry-run output: the header line and each printed command, split as the shell would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDLAB_")}
    env.update(SHARDLAB_VENV=str(venv), SHARDLAB_SETUP_DRY_RUN="1", **({"SHARDLAB_CUDA": "1"} if cuda else {}))
    out = subprocess.run(["bash", str(SETUP)], env=env, capture_output=True, text=True, timeout=60, check=True)
    lines = out.stdout.splitlines()
    assert lines and lines[0].startswith("# setup")
    return lines[0], [shlex.split(line) for line in lines[1:] if line.strip()]


def resolve(extras: str) -> set[str]:
    """The requirements ``shardlab[extras]`` brings, the core dependencies included (nested extras followed)."""
    reqs, todo, seen = set(PYPROJECT["dependencies"]), [e.strip() for e in extras.split(",")], set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for r in PYPROJECT["optional-dependencies"][extra]:
            m = re.fullmatch(r"shardlab\[(.+)\]", r.replace(" ", ""))
            if m:
                todo.extend(m.group(1).split(","))
            else:
                reqs.add(r.replace(" ", ""))
    return reqs


def pip_installs(cmds: list[list[str]]) -> list[list[str]]:
    return [c[c.index("install") + 1:] for c in cmds if c[1:4] == ["-m", "pip", "install"]]


def installed_requirements(cmds: list[list[str]]) -> tuple[set[str], list[str]]:
    """Every requirement the pip installs name (the editable install's extras resolved) and
    the indexes they name (--index-url / --extra-index-url values)."""
    reqs, indexes = set(), []
    for args in pip_installs(cmds):
        it = iter(args)
        for a in it:
            if a in ("--index-url", "--extra-index-url"):
                indexes.append(next(it))
            elif a == "-e":
                m = re.fullmatch(r"\.\[(.+)\]", next(it))
                assert m, "the editable install names its extras"
                reqs |= resolve(m.group(1))
            elif not a.startswith("-"):
                reqs.add(a)
    return reqs, indexes


def test_cpu_dry_run_selects_the_cpu_builds(tmp_path):
    venv = tmp_path / "venv"
    _, cmds = dry_run(venv, cuda=False)
    reqs, indexes = installed_requirements(cmds)
    assert {"torch==2.13.0", "fbgemm-gpu-cpu==1.8.0", "torchrec==1.8.0"} <= reqs
    assert not any(r.startswith("fbgemm-gpu==") for r in reqs)
    assert indexes == [] and "download.pytorch.org" not in str(cmds)
    assert cmds[0][1:] == ["-m", "venv", str(venv)]
    assert not venv.exists()                     # a dry run creates nothing


def test_cuda_dry_run_selects_the_cuda_builds_from_the_cu130_index(tmp_path):
    venv = tmp_path / "venv"
    _, cmds = dry_run(venv, cuda=True)
    reqs, indexes = installed_requirements(cmds)
    assert {"torch==2.13.0", "fbgemm-gpu==1.8.0", "torchrec==1.8.0"} <= reqs
    assert not any(r.startswith("fbgemm-gpu-cpu") for r in reqs)
    first = pip_installs(cmds)[0]                # torch and fbgemm-gpu come from the CUDA index, first
    assert first[first.index("--index-url") + 1] == CU130 and {"torch==2.13.0", "fbgemm-gpu==1.8.0"} <= set(first)
    assert indexes == [CU130]
    assert not venv.exists()


@pytest.mark.parametrize("cuda", [False, True])
def test_torchrec_goes_in_without_dependencies(tmp_path, cuda):
    _, cmds = dry_run(tmp_path / "venv", cuda)
    torchrec = [c for c in pip_installs(cmds) if any(a.startswith("torchrec") for a in c)]
    assert len(torchrec) == 1 and "--no-deps" in torchrec[0] and "torchrec==1.8.0" in torchrec[0]


def test_the_stamp_tells_a_cpu_install_from_a_cuda_one(tmp_path):
    """A venv stamped by a CPU install is up to date for the CPU mode and not for the CUDA one."""
    venv = tmp_path / "venv"
    venv.mkdir()
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + SETUP.read_bytes()).hexdigest()[:16]
    (venv / ".shardlab-installed").write_text(digest + "\n")
    assert "up to date" in dry_run(venv, cuda=False)[0]
    assert "up to date" not in dry_run(venv, cuda=True)[0]
    (venv / ".shardlab-installed").write_text(digest + " cuda\n")
    assert "up to date" in dry_run(venv, cuda=True)[0]
    assert "up to date" not in dry_run(venv, cuda=False)[0]


def test_setup_pins_agree_with_pyproject():
    text = SETUP.read_text()
    pins = dict(re.findall(r"^(torch|fbgemm)_version=(\S+)$", text, re.M))
    assert set(pins) == {"torch", "fbgemm"}
    extras = PYPROJECT["optional-dependencies"]
    assert f"torch=={pins['torch']}" in PYPROJECT["dependencies"]
    assert extras["cpu"] == [f"fbgemm-gpu-cpu=={pins['fbgemm']}"]
    assert extras["cuda"] == [f"fbgemm-gpu=={pins['fbgemm']}"]
    assert resolve("dev") - resolve("dev-cuda") == {f"fbgemm-gpu-cpu=={pins['fbgemm']}"}   # the same but the build
