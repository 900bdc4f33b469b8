"""Exact table-wise assignment: the placement of items on devices that minimises the largest
device load, solved as a mixed-integer program by HiGHS, with the solver's proven bound.

The problem (loads in any additive unit; ms under an additive cost model)::

    minimise   M
    subject to sum_g x[i, g] = 1                       every item on one device
               sum_i load[i, g] x[i, g] <= M           every device g
               sum_i mem[i] x[i, g] <= cap             every device g (bytes)
               x[i, g] in {0, 1}

``load`` is (n,) for identical devices or (n, G) for devices that differ. With identical
devices, the ``G`` largest items are confined to devices ``0 .. k`` (the k-th largest to the
first k + 1): any plan can be relabelled to meet this, so it cuts the G! copies of each plan
without losing one.

Why HiGHS (``highspy``): an open-source (MIT) LP and MIP solver in a single wheel of a few MB
that needs only numpy, so CPU-only machines and CI install it in seconds; its LP relaxation
also gives bounds where the integer problem is too large. The alternative, OR-Tools' CP-SAT,
pulls in pandas and protobuf beside torch. On random additive loads (this module's author's
trial, 2-core CPU, one thread) the two agreed on small problems and both stopped at their time
limit within 0.1% of the bound on 30-100 items x 8 devices, where a perfect partition is
nearly possible and optimality is hard to prove for any solver.

**What is proven.** ``bound`` is HiGHS's dual bound: no assignment has a largest load below
it. ``cost`` is the largest load of the returned assignment, recomputed here in float64
(not the solver's value). ``gap = (cost - bound) / cost``; ``status`` is ``"optimal"`` when
the solver closed the gap to its relative tolerance ``rel_gap`` (so "optimal" means within
``rel_gap`` of the optimum, never more), ``"time_limit"`` when it stopped at ``time_limit_s``
with a feasible assignment. ``None`` when no assignment meets the memory caps (proven
infeasible) or none was found within the time limit.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np

from shardlab.errors import ShardlabError, field_error

#: The solver's relative gap tolerance: "optimal" means within this fraction of the optimum.
REL_GAP = 1e-4
#: Default time limit of one solve (s).
TIME_LIMIT_S = 10.0


@dataclass(frozen=True)
class Assignment:
    """An assignment and what is proven about it: ``device`` (n,) device of each item;
    ``cost`` its largest device load; ``bound`` the proven lower bound on every assignment's
    largest load (same unit as the loads); ``gap`` (cost - bound) / cost (0 where cost is 0);
    ``status`` ``"optimal"`` (gap closed to ``rel_gap``) or ``"time_limit"``; ``seconds`` the
    solve's wall time (s); ``rel_gap`` the tolerance it ran with."""

    device: tuple[int, ...]
    cost: float
    bound: float
    gap: float
    status: str
    seconds: float
    rel_gap: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the plan metadata's form)."""
        return {"cost": self.cost, "bound": self.bound, "gap": self.gap, "status": self.status,
                "seconds": round(self.seconds, 3), "rel_gap": self.rel_gap, "solver": solver_name()}


_quiet = False


def _highs() -> Any:
    """A new ``highspy.Highs`` with its log off. HiGHS prints a banner to the process's stdout
    (file descriptor 1, beneath Python) when the first one is made; that one is made with fd 1
    pointed at the null device, so a command's own output stays as it is."""
    global _quiet
    if not _quiet:
        sys.stdout.flush()
        saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 1)
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(null)
        _quiet = True
    else:
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h


def solver_name() -> str:
    """``"HiGHS <version>"``."""
    h = _highs()
    return f"HiGHS {h.version()}" if hasattr(h, "version") else "HiGHS"


def _loads(load: Any, ngpu: int) -> tuple[np.ndarray, bool]:
    """(n, G) float64 loads and whether the devices are identical; one-line errors."""
    arr = np.asarray(load, dtype=np.float64)
    if arr.ndim == 1:
        arr, same = np.repeat(arr[:, None], ngpu, axis=1), True
    elif arr.ndim == 2 and arr.shape[1] == ngpu:
        same = False
    else:
        raise field_error("exact assignment", "load", f"shape {arr.shape}", f"must be (n,) or (n, {ngpu})")
    if not np.all(np.isfinite(arr)) or (arr < 0).any():
        raise field_error("exact assignment", "load", "a value", "must be finite and >= 0")
    return arr, same


def min_makespan(load: Any, mem: Any, cap: float, ngpu: int, time_limit_s: float = TIME_LIMIT_S,
                 rel_gap: float = REL_GAP, seed: int = 0) -> Assignment | None:
    """The assignment of n items to ``ngpu`` devices with the smallest largest load (module
    docstring). ``load``: (n,) or (n, G) per item (per device); ``mem``: (n,) bytes per item;
    ``cap``: bytes per device; ``time_limit_s`` > 0; ``rel_gap`` in [0, 1); ``seed`` fixes the
    solver's choices (one thread), so the same input gives the same assignment whenever the
    solve ends ``"optimal"``; one stopped by ``time_limit_s`` returns what the solver had by
    then, which depends on the machine's speed (its ``status`` says so)."""
    if not (isinstance(ngpu, (int, np.integer)) and ngpu >= 1):
        raise field_error("exact assignment", "ngpu", ngpu, "must be an integer >= 1")
    if not (isinstance(time_limit_s, (int, float)) and math.isfinite(time_limit_s) and time_limit_s > 0):
        raise field_error("exact assignment", "time_limit_s", time_limit_s, "must be a number > 0")
    if not (isinstance(rel_gap, (int, float)) and 0 <= rel_gap < 1):
        raise field_error("exact assignment", "rel_gap", rel_gap, "must be in [0, 1)")
    loads, same = _loads(load, int(ngpu))
    n, g = loads.shape
    need = np.asarray(mem, dtype=np.float64).reshape(-1)
    if need.shape != (n,) or not np.all(np.isfinite(need)) or (need < 0).any():
        raise field_error("exact assignment", "mem", f"shape {need.shape}", f"must be (n,) = ({n},), finite, >= 0")
    if not (math.isfinite(cap) and cap >= 0):
        raise field_error("exact assignment", "cap", cap, "must be a number >= 0")
    if n == 0:
        return Assignment((), 0.0, 0.0, 0.0, "optimal", 0.0, float(rel_gap))
    if (need > cap).any():
        return None
    start = time.monotonic()
    h = _program(loads, need, float(cap), same, time_limit_s, rel_gap, seed)
    h.run()
    seconds = time.monotonic() - start
    sol = h.getSolution()
    if not getattr(sol, "value_valid", True) or len(sol.col_value) < n * g:
        return None
    x = np.asarray(sol.col_value[:n * g]).reshape(n, g)
    device = x.argmax(axis=1)
    if not np.allclose(x.sum(axis=1), 1.0, atol=1e-6) or (x.max(axis=1) < 0.5).any():
        return None
    per_device = np.zeros(g)
    np.add.at(per_device, device, loads[np.arange(n), device])
    used = np.zeros(g)
    np.add.at(used, device, need)
    if (used > cap * (1 + 1e-9)).any():
        raise ShardlabError("exact assignment: the solver returned an assignment over field 'cap'")
    cost = float(per_device.max())
    bound = min(float(h.getInfo().mip_dual_bound), cost)
    status = "optimal" if h.getModelStatus() == highspy.HighsModelStatus.kOptimal else "time_limit"
    gap = (cost - bound) / cost if cost > 0 else 0.0
    return Assignment(tuple(int(d) for d in device), cost, bound, gap, status, seconds, float(rel_gap))


def _program(loads: np.ndarray, need: np.ndarray, cap: float, same: bool, time_limit_s: float,
             rel_gap: float, seed: int) -> Any:
    """The HiGHS model of the module docstring: columns x[i, g] (row-major) then M."""
    n, g = loads.shape
    inf = highspy.kHighsInf
    h = _highs()
    for key, value in (("time_limit", float(time_limit_s)), ("mip_rel_gap", float(rel_gap)),
                       ("threads", 1), ("random_seed", int(seed) % 2_147_483_647)):
        h.setOptionValue(key, value)
    nx = n * g
    upper = np.ones(nx + 1)
    upper[-1] = inf
    if same:                                  # the k-th largest item only on devices 0 .. k
        for k, i in enumerate(np.argsort(-loads[:, 0], kind="stable")[:g]):
            upper[i * g + k + 1:(i + 1) * g] = 0.0
    h.addVars(nx + 1, np.zeros(nx + 1), upper)
    cols = np.arange(nx, dtype=np.int32)
    h.changeColsIntegrality(nx, cols, np.array([highspy.HighsVarType.kInteger] * nx))
    h.changeColsCost(1, np.array([nx], dtype=np.int32), np.array([1.0]))
    for i in range(n):
        h.addRow(1.0, 1.0, g, np.arange(i * g, (i + 1) * g, dtype=np.int32), np.ones(g))
    for d in range(g):
        idx = np.arange(d, nx, g, dtype=np.int32)
        h.addRow(-inf, 0.0, n + 1, np.append(idx, np.int32(nx)), np.append(loads[:, d], -1.0))
        h.addRow(-inf, cap, n, idx, need)
    return h
