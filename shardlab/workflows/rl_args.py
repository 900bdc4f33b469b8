"""The RL training configurations, CleanRL style: one frozen dataclass per method
(:class:`DreamShardArgs`, :class:`AutoShardArgs`) whose fields, defaults and field docstrings
are the single source of every knob. ``shardlab train dreamshard_policy|autoshard_policy``
builds its options from them (:mod:`shardlab.cli.arguments`), so a default or a help line is
written once, here. This module imports no torch: the command line reads it to build ``--help``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from shardlab.bounds import BOUNDS
from shardlab.errors import check_ranges, field_error, is_int

if TYPE_CHECKING:      # a profile object may be passed; at run time this module stays torch-free
    from shardlab.measure.hardware import HardwareProfile

@dataclass(frozen=True)
class _PolicyArgs:
    """The knobs both policies' training has (first in each subclass's ``--help``; a subclass
    declares a field again where its default or help differs)."""

    episodes: int = 16
    """Episodes per update, all on one training task (episodes)."""
    ngpu: tuple[int, ...] = (4,)
    """Device counts G of the training tasks and measured plans; one policy serves them all (devices)."""
    ntables: tuple[int, int] = (10, 60)
    """Tables per training task and measured plan: inclusive range LOW HIGH (tables)."""
    lr: float = 5e-4
    """Adam learning rate (unitless)."""
    entropy_coef: float = 1e-3
    """Weight of the entropy bonus in the loss (unitless)."""
    profile: str | HardwareProfile = "cpu"
    """Hardware profile the plans are measured with: a shipped profile name or a profile."""
    probe_every: int = 0
    """Updates between probes of the greedy policy on the fixed probe tasks (updates; 0: none)."""
    probe_judge: str = "neuroshard_broad"
    """Shipped cost-model bundle that judges the probes (a simulation, labelled so)."""
    seed: int = 0
    """Seed of tasks, sampling, networks and the measured-plan campaign (integer >= 0)."""
    progress: bool = True
    """Show a progress bar over the updates."""


@dataclass(frozen=True)
class DreamShardArgs(_PolicyArgs):
    """DreamShard's training configuration (one place for every knob)."""

    iterations: int = 10
    """Outer iterations, each: measure plans, refit the cost network, REINFORCE (iterations)."""
    measure_per_iteration: int = 4
    """Plans of the current policy measured per iteration, over all device counts (plans; 0: none, and without
    measured or given plans no cost-network update: the reward is the cost model's alone)."""
    updates_per_iteration: int = 50
    """REINFORCE updates per iteration (policy-gradient steps)."""
    lr: float = 5e-4
    """Adam learning rate at the start of each iteration, decayed linearly to 0 (unitless)."""
    tasks_per_iteration: int = 8
    """Training tasks drawn per iteration, cycled by the updates (tasks)."""
    cost_epochs: int = 100
    """Epochs of each cost-network update, continuing from its current weights (epochs)."""

    def __post_init__(self) -> None:
        check_rl_args(self, ("iterations", "measure_per_iteration", "updates_per_iteration", "episodes",
                             "tasks_per_iteration", "cost_epochs", "probe_every"))


@dataclass(frozen=True)
class AutoShardArgs(_PolicyArgs):
    """AutoShard's training configuration (one place for every knob)."""

    updates: int = 300
    """Learner updates in all (gradient steps; each replays ``episodes`` episodes)."""
    n_tasks: int = 16
    """Training tasks drawn once and cycled by the updates (tasks)."""
    sync_every: int = 4
    """Updates between refreshes of the actors' behaviour policy (updates)."""
    entropy_coef: float = 1e-2
    """Weight of the entropy bonus (unitless)."""
    value_coef: float = 0.5
    """Weight of the value loss (unitless)."""
    max_grad_norm: float = 40.0
    """Gradient-norm clip of each update (unitless)."""
    rho_bar: float = 1.0
    """V-trace truncation of the importance weights in the targets and advantages (unitless)."""
    c_bar: float = 1.0
    """V-trace truncation of the trace-cutting weights (unitless)."""
    refit_every: int = 100
    """Updates between online refits of the cost model; refits happen only with a sample store (updates)."""
    measure_plans: int = 2
    """Greedy policy plans measured per refit (plans; 0: none, no refits: the reward is the cost model's alone)."""
    cost_epochs: int | None = None
    """Epochs of each online refit (epochs; None: the pre-trained cost model's own)."""

    def __post_init__(self) -> None:
        check_rl_args(self, ("updates", "episodes", "n_tasks", "sync_every", "refit_every", "measure_plans",
                             "probe_every") + (("cost_epochs",) if self.cost_epochs is not None else ()))


#: Most tables in one training task (the shipped pools' tasks have tens).
MOST_TABLES = 10_000
#: Rates and weights: field -> (least, whether the least itself is allowed); all must be finite.
RATES = {"lr": (0.0, False), "entropy_coef": (0.0, True), "value_coef": (0.0, True), "max_grad_norm": (0.0, False),
         "rho_bar": (0.0, False), "c_bar": (0.0, False)}


def check_rl_args(args: object, counts: tuple[str, ...]) -> None:
    """Normalise ``args.ngpu`` (an int or device counts) to a tuple and ``args.ntables`` to a
    (low, high) tuple, in place on a frozen dataclass; one-line errors naming the bad field and
    the policy kind (``dreamshard_policy``). ``counts``: the count fields to check, each against
    its range in :data:`shardlab.bounds.BOUNDS` (far above any use, far below a hang); every rate
    in :data:`RATES` it has must be finite."""
    label = type(args).__name__.removesuffix("Args").lower() + "_policy"
    ngpu = getattr(args, "ngpu")
    gpus = (ngpu,) if np.isscalar(ngpu) else tuple(ngpu)
    if not gpus or not all(BOUNDS["ngpu"].admits(g) for g in gpus):
        raise field_error(label, "ngpu", ngpu, f"must be device counts, each {BOUNDS['ngpu'].requirement.removeprefix('must be ')}")
    object.__setattr__(args, "ngpu", tuple(int(g) for g in gpus))
    low_high = tuple(getattr(args, "ntables"))
    if len(low_high) != 2 or not all(is_int(n) for n in low_high) or not 1 <= low_high[0] <= low_high[1] <= MOST_TABLES:
        raise field_error(label, "ntables", low_high, f"must be (low, high) with 1 <= low <= high <= {MOST_TABLES:,}")
    object.__setattr__(args, "ntables", tuple(int(n) for n in low_high))
    ranges = {n: (BOUNDS[n].admits, BOUNDS[n].requirement) for n in counts}
    for name, (least, inclusive) in RATES.items():
        if hasattr(args, name):
            ranges[name] = (lambda v, lo=least, eq=inclusive: _finite(v) and (v > lo or (eq and v == lo)),
                            f"must be a finite number {'>=' if inclusive else '>'} {least:g}")
    check_ranges(label, args, ranges)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
