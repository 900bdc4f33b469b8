"""CPU affinity for measurements: pin a process to one core where the OS allows it.

On a small shared VM the scheduler moves a timed process between cores (cold caches, a
neighbour's work); pinning each comm rank and the compute-measuring process to a core of their
own (round-robin over the cores this process may use) removes that part of the noise. Where
``os.sched_setaffinity`` does not exist (macOS, Windows) or refuses, nothing is pinned and the
functions say so by returning None / False. What pinning buys here is measured in
``reports/measurement_noise.md`` and ``datasets/cpu/NOTES.md``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


def allowed_cores() -> list[int] | None:
    """The cores this process may run on, sorted (None where the OS has no affinity API)."""
    get = getattr(os, "sched_getaffinity", None)
    if get is None:
        return None
    try:
        return sorted(get(0))
    except OSError:
        return None


def core_for(index: int, cores: list[int] | None = None) -> int | None:
    """The core for the ``index``-th pinned process: round-robin over ``cores`` (default
    :func:`allowed_cores`); None where there is no affinity API."""
    cores = allowed_cores() if cores is None else cores
    return cores[index % len(cores)] if cores else None


def pin_to(core: int | None) -> bool:
    """Pin the calling process to ``core``; False (and nothing changed) where impossible."""
    setter = getattr(os, "sched_setaffinity", None)
    if core is None or setter is None:
        return False
    try:
        setter(0, {core})
        return True
    except OSError:
        return False


@contextmanager
def pinned(core: int | None, enabled: bool = True) -> Iterator[bool]:
    """Within the block the calling process runs on ``core`` only (if ``enabled`` and the OS
    allows); the previous affinity is restored after. Yields whether it is pinned."""
    before = allowed_cores()
    ok = enabled and pin_to(core)
    try:
        yield ok
    finally:
        if ok and before is not None:
            os.sched_setaffinity(0, set(before))
