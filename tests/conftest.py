"""Shared fixtures: small hand-made tables and tasks (no pool, no generator).

The suite runs with NeuroShard's default task calibration off (``SHARDLAB_TASK_CALIBRATION=off``,
set before shardlab is imported, so subprocesses and notebooks inherit it): most tests check
exact plans, which a measurement would make depend on machine load. The default itself, on,
and the calibrated search are tested in ``tests/test_search_calibration.py``."""

from __future__ import annotations

import os

os.environ["SHARDLAB_TASK_CALIBRATION"] = "off"

import pytest  # noqa: E402

from shardlab import Table, Task  # noqa: E402

UNIFORM_BINS = tuple([1.0] + [0.0] * 16)


def make_table(name: str, rows: int = 1000, dim: int = 16, pf: float = 2.0) -> Table:
    """A small valid table with every access in bin 0."""
    return Table(name, rows, dim, pf, UNIFORM_BINS)


@pytest.fixture
def small_task() -> Task:
    """Six tables of varied size over 3 devices with a roomy cap."""
    tables = tuple(make_table(f"t{i}", rows=1000 * (i + 1), dim=4 * (i + 1), pf=1.0 + i)
                   for i in range(6))
    return Task("small", 3, 1.0, tables, batch_size=1024)


@pytest.fixture
def torchrun():
    """Start ``python -m shardlab.dist ARGS`` under torchrun as node ``node_rank`` of ``nnodes``
    (``nproc`` processes each) on 127.0.0.1 at ``port``; returns the Popen (stdout/stderr piped)."""
    import subprocess
    import sys

    def start(args, nnodes: int, node_rank: int, port: int, nproc: int = 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
               "--node-rank", str(node_rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
               "-m", "shardlab.dist", *[str(a) for a in args]]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    return start


@pytest.fixture
def free_port():
    """A TCP port free on 127.0.0.1 at the time of asking."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
