"""Spawned helper processes (ranks, measuring workers) that leave Ctrl-C to their parent.

A spawned interpreter keeps an ignored SIGINT ignored. So when a child starts inside
:func:`sigint_ignored` (or runs :func:`ignore_sigint` first, as a pool's initializer), a Ctrl-C at
the terminal reaches the parent alone: the parent stops its children and prints one line, and no
child prints a KeyboardInterrupt traceback of its own.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


def ignore_sigint() -> None:
    """Ignore Ctrl-C in this (child) process; a pool's ``initializer``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore Ctrl-C in this process for the block (main thread only; elsewhere a no-op), so the
    children spawned in it inherit the ignored signal; the old handler comes back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
