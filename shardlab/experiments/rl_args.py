"""Checks shared by the RL training configurations (``DreamShardArgs``, ``AutoShardArgs``)."""

from __future__ import annotations

import numpy as np

from shardlab.errors import ShardlabError


def check_rl_args(args: object, counts: dict[str, int]) -> None:
    """Normalise ``args.ngpu`` (an int or device counts) to a tuple and ``args.ntables`` to a
    (low, high) tuple, in place on a frozen dataclass; one-line errors naming the bad field.
    ``counts``: field -> the least value it may take (e.g. ``{"updates": 1}``)."""
    label = type(args).__name__
    ngpu = getattr(args, "ngpu")
    gpus = (ngpu,) if np.isscalar(ngpu) else tuple(ngpu)
    object.__setattr__(args, "ngpu", tuple(int(g) for g in gpus))
    object.__setattr__(args, "ntables", tuple(int(n) for n in getattr(args, "ntables")))
    for name, least in counts.items():
        if int(getattr(args, name)) < least:
            raise ShardlabError(f"{label}: field '{name}' must be >= {least}, got {getattr(args, name)!r}")
    gpus = getattr(args, "ngpu")
    if not gpus or min(gpus) < 1:
        raise ShardlabError(f"{label}: field 'ngpu' must be device counts >= 1, got {gpus!r}")
    low_high = getattr(args, "ntables")
    if len(low_high) != 2 or not 1 <= low_high[0] <= low_high[1]:
        raise ShardlabError(f"{label}: field 'ntables' must be (low, high) with 1 <= low <= high, got {low_high!r}")
