"""Every numeric setting's range, declared once.

A setting that a user can give in more than one place -- a CLI option, a notebook parameter, a
field of the RL Args, a sharder option, an evaluator's argument -- has its range here, under the
one name all of them use (``rounds``, ``beam_width``, ...), and each entry point checks it with
:func:`check_bound` or reads :data:`BOUNDS` when it checks (``shardlab.cli.checks``), so
changing a bound here changes it everywhere. ``tests/test_bounds.py`` changes one and sees it in
every entry point.

Units are the setting's own: counts, ms, GB, dimensionless shares and exponents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shardlab import constants as C
from shardlab.errors import field_error


@dataclass(frozen=True)
class Bound:
    """The values a setting may take: ``least`` to ``most`` (None: no upper bound), an integer
    where ``integer``; ``least_excluded``: the least itself is not allowed (``(0, 1e6]``);
    ``what``: a few words on what the setting counts, added to the error."""

    least: float
    most: float | None = None
    integer: bool = True
    least_excluded: bool = False
    what: str = ""

    def admits(self, value: Any) -> bool:
        """Whether ``value`` is in range (a bool never is; an integer setting takes a whole float)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not math.isfinite(value) or (self.integer and not float(value).is_integer()):
            return False
        low_ok = value > self.least if self.least_excluded else value >= self.least
        return low_ok and (self.most is None or value <= self.most)

    @property
    def requirement(self) -> str:
        """The words of the error, e.g. ``"must be an integer in [1, 1,000]"``."""
        kind = "an integer" if self.integer else "a number"
        show = (lambda v: f"{int(v):,}") if self.integer else (lambda v: f"{v:g}")
        if self.most is None:
            text = f"must be {kind} {'>' if self.least_excluded else '>='} {show(self.least)}"
        else:
            text = f"must be {kind} in {'(' if self.least_excluded else '['}{show(self.least)}, {show(self.most)}]"
        return f"{text} ({self.what})" if self.what else text


#: setting name -> its range. One entry per name; every entry point reads it from here.
BOUNDS: dict[str, Bound] = {
    # tasks and hardware
    "seed": Bound(0),
    "ngpu": Bound(1, C.MAX_NGPU),
    "ntables": Bound(1),
    "min_tables": Bound(1),
    "max_tables": Bound(1),
    "batch_size": Bound(1, C.MAX_BATCH_SIZE, what="samples per batch"),
    "row_scale": Bound(1, what="rows multiplied by"),
    "tasks": Bound(1, what="tasks drawn"),
    "mem_gb": Bound(0, C.MAX_MEM_CAP_GB, integer=False, least_excluded=True, what="GB"),
    "row_share": Bound(0, 1, integer=False, what="a share"),
    "max_delay_ms": Bound(0, C.MAX_DELAY_MS, integer=False, what="ms"),
    "assume_zipf": Bound(0, None, integer=False, least_excluded=True, what="a Zipf exponent"),
    # measuring
    "repeats": Bound(1, 10_000, what="timed runs per measurement"),
    "warmup": Bound(0, 10_000, what="untimed runs per measurement"),
    "rounds": Bound(1, 1000, what="timed rounds per sitting"),
    "warmup_rounds": Bound(0, 100, what="untimed rounds per sitting"),
    "sittings": Bound(1, 100),
    "samples": Bound(0, C.MAX_SAMPLES),
    "max_samples": Bound(1, C.MAX_SAMPLES),
    "n_samples": Bound(1, C.MAX_SAMPLES),
    "workers": Bound(1, 64, what="measuring processes"),
    "verify": Bound(1, 20, what="candidate plans measured"),
    "steps": Bound(1, 10_000, what="timed training steps"),
    "warmup_steps": Bound(0, 1000, what="untimed training steps"),
    # training
    "epochs": Bound(1, C.MAX_EPOCHS),
    "pretrain_epochs": Bound(0, C.MAX_EPOCHS),
    "cost_epochs": Bound(1, C.MAX_EPOCHS),
    "iterations": Bound(1, 100_000),
    "updates_per_iteration": Bound(1, 100_000),
    "measure_per_iteration": Bound(0, 100_000),
    "tasks_per_iteration": Bound(1, 100_000),
    "episodes": Bound(1, 4096),
    "probe_every": Bound(0, 10_000_000),
    "updates": Bound(1, 10_000_000),
    "n_tasks": Bound(1, 100_000),
    "sync_every": Bound(1, 10_000_000),
    "refit_every": Bound(1, 10_000_000),
    "measure_plans": Bound(0, 100_000),
    # searching
    "beam_width": Bound(1, 64),
    "max_splits": Bound(0, 100),
    "top_n": Bound(1, 1000),
    "polish_moves": Bound(0, 100_000, what="moves per polished state"),
    "child_moves": Bound(0, 100_000, what="polish moves per beam candidate"),
    "host_size": Bound(1, C.MAX_NGPU),
}


def check_bound(owner: str, name: str, value: Any) -> Any:
    """``value`` when it is in :data:`BOUNDS`'s range for ``name``, else the one-line
    :func:`~shardlab.errors.field_error` of ``owner`` (e.g. ``"measured evaluator: field
    'rounds' = 0 must be an integer in [1, 1,000] (timed rounds per sitting)"``)."""
    bound = BOUNDS[name]
    if not bound.admits(value):
        raise field_error(owner, name, value, bound.requirement)
    return value


def check_bounds(owner: str, obj: Any, *names: str) -> None:
    """:func:`check_bound` of each attribute ``names`` of ``obj`` (a config, an Args value, parsed
    arguments), in order: the first out of range is the error."""
    for name in names:
        check_bound(owner, name, getattr(obj, name))
