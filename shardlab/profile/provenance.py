"""Provenance of measurements: which machine, which versions, when, by which command."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU model as the OS reports it (``/proc/cpuinfo``), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_name(device: str) -> str:
    """``"<gpu name>"`` for a CUDA device, else ``"<cpu model> (<n> cpus)"``."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"{cpu_name()} ({os.cpu_count()} cpus)"


@lru_cache(maxsize=1)
def git_revision() -> str:
    """The repository's commit, with ``+dirty`` when the package has uncommitted changes."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "shardlab"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev or "unknown") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def fbgemm_version() -> str:
    """Installed fbgemm_gpu version, or ``"absent"``."""
    try:
        import fbgemm_gpu

        return str(getattr(fbgemm_gpu, "__version__", "unknown"))
    except ImportError:
        return "absent"


def environment(device: str = "cpu") -> dict[str, Any]:
    """Everything a measurement must carry: hardware, versions, time (UTC), command, revision."""
    return {"hardware": hardware_name(device), "device": device, "torch": str(torch.__version__),
            "fbgemm_gpu": fbgemm_version(), "python": platform.python_version(),
            "platform": platform.platform(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(shlex.quote(a) for a in sys.argv), "git": git_revision()}
