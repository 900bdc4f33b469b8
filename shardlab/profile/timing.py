"""Summaries of repeated timings shared by the compute and communication profilers."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def spread_ms(ms: Sequence[float]) -> tuple[float, float, float, float]:
    """(p25, p75, min, max) of repeated timings in ms."""
    p25, p75 = np.percentile(ms, [25, 75])
    return (float(p25), float(p75), float(min(ms)), float(max(ms)))
