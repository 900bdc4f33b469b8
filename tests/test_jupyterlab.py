"""Smoke test: `jupyter lab` serves this project's notebooks on loopback, then stops."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_jupyter_lab_serves_the_notebooks(tmp_path):
    port, token = _free_port(), "shardlab-smoke"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1", f"--port={port}",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT}", "--allow-root"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline, api = time.time() + 60, None
        while time.time() < deadline and api is None:
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            try:
                with urllib.request.urlopen(f"{base}/api", timeout=2) as r:
                    api = json.load(r)
            except OSError:
                time.sleep(0.5)
        assert api and "version" in api
        req = urllib.request.Request(f"{base}/api/contents/notebooks", headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            names = {c["name"] for c in json.load(r)["content"]}
        assert {"search.ipynb", "profile.ipynb", "train_cost_model.ipynb"} <= names
        with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=10) as r:
            assert r.status == 200 and "JupyterLab" in r.read().decode()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
