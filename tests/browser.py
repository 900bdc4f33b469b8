"""Headless Debian Chromium for tests and README screenshots (Playwright drives the system
browser at ``/usr/bin/chromium``, which ``scripts/setup_browser.sh`` installs; Playwright's own
browser download is never used).

:func:`chromium_page` yields a page whose console errors and uncaught exceptions are collected
in ``page.errors`` and whose requests are logged in ``page.requests``; every request outside
the allowed prefixes (default: ``file:`` only) is refused, so a report that tried to fetch plotly.js from
a CDN would show up both as a failed request and as a blank chart.
"""

from __future__ import annotations

import io
import os
import shutil
from contextlib import contextmanager
from typing import Iterator

CHROMIUM = os.environ.get("SHARDLAB_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
         "--disable-background-networking", "--disable-component-update"]


def chromium_path() -> str:
    """The Chromium binary; raises a one-line error naming the fix when it is missing."""
    path = shutil.which(CHROMIUM) or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    if not path:
        raise RuntimeError(f"no Chromium at {CHROMIUM}: run `bash scripts/setup_browser.sh` (Debian package chromium)")
    return path


@contextmanager
def chromium_page(width: int = 1280, height: int = 900, allow: tuple[str, ...] = ("file:",)) -> Iterator[object]:
    """A fresh headless Chromium page (viewport ``width`` x ``height`` px) in a new profile that
    refuses every request whose URL does not start with one of ``allow`` (the network is off).
    The page gets ``errors`` (list of str: console errors and page exceptions), ``requests``
    (list of URLs asked for) and ``refused`` (those refused)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=FLAGS)
        try:
            context = browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            page.errors, page.requests, page.refused = [], [], []
            page.on("console", lambda m: page.errors.append(f"console: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: page.errors.append(f"exception: {e}"))
            page.on("request", lambda r: page.requests.append(r.url))

            def gate(route: object) -> None:
                url = route.request.url
                if url.startswith(allow):
                    route.continue_()
                else:
                    page.refused.append(url)
                    route.abort("internetdisconnected")

            page.route("**/*", gate)
            yield page
        finally:
            browser.close()


def pixel_spread(png: bytes) -> tuple[float, int]:
    """(standard deviation of grey levels 0-255, number of distinct grey levels) of a PNG
    screenshot: a blank plot area gives about (0, 1)."""
    from PIL import Image, ImageStat

    image = Image.open(io.BytesIO(png)).convert("L")
    return float(ImageStat.Stat(image).stddev[0]), len(image.getcolors(256) or [])


def free_port() -> int:
    """A free TCP port on loopback."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def jupyter_lab(root: str | os.PathLike, scratch: str | os.PathLike, token: str = "shardlab-test",
                timeout_s: float = 60.0) -> Iterator[str]:
    """Run ``jupyter lab`` on loopback serving ``root`` (runtime and config files under
    ``scratch``, the app exposed as ``window.jupyterapp`` for scripted commands); yields its
    base URL and stops it on exit. Raises if it does not answer within ``timeout_s`` seconds."""
    import json
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    port, scratch = free_port(), Path(scratch)
    settings = scratch / "lab-settings"
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True, exist_ok=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))   # no news pop-up
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(scratch / "rt"), "JUPYTER_CONFIG_DIR": str(scratch / "cfg"),
           "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "lab-workspaces")}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1", f"--port={port}",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--allow-root",
           "--LabApp.expose_app_in_browser=True"]
    log = open(scratch / "jupyter-lab.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {proc.returncode}: see {scratch / 'jupyter-lab.log'}")
            try:
                with urllib.request.urlopen(f"{base}/api", timeout=2) as r:
                    json.load(r)
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"jupyter lab did not answer on {base} within {timeout_s:.0f} s")
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def run_notebook_in_lab(page: object, base: str, name: str, token: str = "shardlab-test",
                        timeout_ms: int = 180_000) -> None:
    """Open notebook ``name`` (relative to the served root) in JupyterLab, wait for its kernel,
    and run all cells, as a user pressing Run > Run All Cells would."""
    page.goto(f"{base}/lab/tree/{name}?token={token}")
    page.wait_for_function("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                           " return w && w.sessionContext && w.sessionContext.session"
                           " && w.sessionContext.session.kernel && w.content && w.content.widgets.length > 0; }",
                           timeout=timeout_ms)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")


def prepare_notebook(name: str, folder: str | os.PathLike, **params: object) -> str:
    """``notebooks/<name>.ipynb`` with ``params`` injected by papermill (``--prepare-only``: not
    executed), written to ``folder``; returns its path. For opening in JupyterLab."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = Path(folder) / f"{name}.ipynb"
    args = [a for k, v in params.items() for a in ("-p", k, str(v))]
    subprocess.run([str(Path(sys.executable).with_name("papermill")), "--prepare-only",
                    str(root / "notebooks" / f"{name}.ipynb"), str(out), *args], check=True, capture_output=True)
    return str(out)

