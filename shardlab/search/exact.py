"""Exact placement of items on devices under a cost that is linear per device plus three
global maxima, as a mixed-integer program solved by HiGHS, with the solver's proven bound.

The program (:class:`Program`; every time in ms). Items i (whole tables, column halves)
belong to groups (a table); a group with several alternatives (whole, or two halves) takes
exactly one, and every item of the taken alternative goes to one device::

    x[i, g] in {0, 1}, z[t, a] in {0, 1}:  sum_g x[i, g] = z[t(i), a(i)],  sum_a z[t, a] = 1
    u[g] = 1 if device g holds an item (or a fixed block), else 0
    c[g] = op_ms u[g] + fixed_ms[g] + sum_i load[i, g] x[i, g]          compute (fw + bw)
    d[g] = fixed_dim[g] + sum_i dim[i] x[i, g]                          all-to-all columns
    sum_i mem[i] x[i, g] <= cap[g]                                      bytes
    D >= d[g];   T >= link_const[j] + link_own[j] d[r(j)] + link_host[j] S[h(j)],  S[h] = sum_{g in h} d[g]
    bw[g] = bw0[g] + send_bw d[g] + max_bw D + link_bw T                backward all-to-all
    fw[g] = fw0[g] + send_fw d[g] + max_fw D + link_fw T + wait (R - c[g] - bw[g])
    R >= c[g] + bw[g]
    minimise M >= c[g] + bw[g] + fw[g]  for every g

This is the plan cost of :mod:`shardlab.schedule` (compute, backward comm, forward comm that
waits for the last rank to be ready) whenever compute is affine in the items a device holds
and comm is affine in the device's columns, the largest device's columns and a slowest-link
time ``T`` (the analytic models: :mod:`shardlab.search.optimal` builds the program from them).
D, T and R only ever raise M (every coefficient is >= 0 and each shifts all devices alike), so
at the optimum they sit at max d, the slowest link and max ready: the program's optimum is the
plan cost's. With identical devices and no fixed blocks, the largest single-alternative items
are confined to devices ``0 .. k`` (the k-th largest to the first k + 1): any plan can be
relabelled to meet this, so it cuts the G! copies of each plan without losing one.

Why HiGHS (``highspy``): an open-source (MIT) LP and MIP solver in a single wheel of a few MB
that needs only numpy, so CPU-only machines and CI install it in seconds; its LP relaxation
also gives bounds where the integer problem is too large. The alternative, OR-Tools' CP-SAT,
pulls in pandas and protobuf beside torch.

**What is proven.** ``bound`` is HiGHS's dual bound: no placement has a cost below it.
``cost`` is the returned placement's cost recomputed here in float64 (:meth:`Program.cost`,
not the solver's value); ``gap = (cost - bound) / cost``; ``status`` is ``"optimal"`` when
the solver closed the gap to its relative tolerance ``rel_gap`` (within ``rel_gap`` of the
optimum, never more), ``"time_limit"`` when it stopped at ``time_limit_s``. None when no
placement meets the memory caps (proven) or none was found in time.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    import highspy
except ImportError:  # a measuring-only image (the GPU lease) may lack it; solving then says so
    highspy = None

from shardlab.errors import ShardlabError, field_error
from shardlab.search.exact_program import Program, complete, item_groups, relabelled, sure_order

#: The solver's relative gap tolerance: "optimal" means within this fraction of the optimum.
REL_GAP = 1e-3
#: Default time limit of one solve (s).
TIME_LIMIT_S = 10.0
#: Grace after the time limit before a solve is interrupted, and again before it is given up (s).
OVERRUN_S = 1.0
#: Above this many item x device pairs, "device is used" is tied to the items by one row per
#: device (n u[g] >= sum_i x[i, g]) instead of one per pair: a smaller program, a weaker LP.
PAIR_ROWS_MAX = 20_000


@dataclass(frozen=True)
class Assignment:
    """A placement and what is proven about it: ``device`` (n,) device of each item (-1: its
    alternative not taken); ``cost`` its cost; ``bound`` the proven lower bound on every
    placement's cost (same unit); ``gap`` (cost - bound) / cost (0 where cost is 0); ``status``
    ``"optimal"`` (gap closed to ``rel_gap``) or ``"time_limit"``; ``seconds`` the solve's wall
    time (s); ``rel_gap`` the tolerance it ran with."""

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


def answered(program: Program, device: Any, bound: float, status: str, seconds: float, rel_gap: float) -> Assignment:
    """The Assignment of placement ``device``: its cost recomputed by ``program`` (float64, not
    the solver's value), ``bound`` capped at that cost, and the gap between them."""
    cost = program.cost(np.asarray(device, dtype=int))
    bound = min(float(bound), cost)
    return Assignment(tuple(int(d) for d in device), cost, bound, (cost - bound) / cost if cost > 0 else 0.0,
                      status, float(seconds), float(rel_gap))


_quiet = False


def _highs() -> Any:
    """A new ``highspy.Highs`` with its log off. HiGHS prints a banner to the process's stdout
    (file descriptor 1, beneath Python) when the first one is made; that one is made with fd 1
    pointed at the null device, so a command's own output stays as it is."""
    global _quiet
    if highspy is None:
        raise ShardlabError("the exact planner needs highspy (pip install highspy): it is not installed")
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


def check_limits(time_limit_s: Any, rel_gap: Any) -> None:
    """One-line errors for a time limit that is not > 0 or a gap outside [0, 1)."""
    if not (isinstance(time_limit_s, (int, float)) and math.isfinite(time_limit_s) and time_limit_s > 0):
        raise field_error("exact assignment", "time_limit_s", time_limit_s, "must be a number > 0")
    if not (isinstance(rel_gap, (int, float)) and 0 <= rel_gap < 1):
        raise field_error("exact assignment", "rel_gap", rel_gap, "must be in [0, 1)")


def _run(h: Any, time_limit_s: float) -> bool:
    """Run the solver with a watchdog: HiGHS checks its time limit only at some points, and a
    procedure that seldom checks can overrun it (an upstream limitation), so the solve runs in
    HiGHS's own thread and is interrupted :data:`OVERRUN_S` after the limit. True when it has
    stopped (the model is then safe to read); False when even the interrupt went unheard (its
    thread is left to finish on its own and its model is not read)."""
    h.HandleUserInterrupt = True
    h.startSolve()
    if h.wait(time_limit_s + OVERRUN_S)[0]:
        return True
    h.cancelSolve()
    return bool(h.wait(OVERRUN_S)[0])


def min_makespan(load: Any, mem: Any, cap: float, ngpu: int, time_limit_s: float = TIME_LIMIT_S,
                 rel_gap: float = REL_GAP, seed: int = 0) -> Assignment | None:
    """The assignment of n items to ``ngpu`` devices with the smallest largest load: the
    program without comm, op cost or alternatives. ``load``: (n,) or (n, G) per item (per
    device); ``mem``: (n,) bytes per item; ``cap``: bytes per device."""
    if not (isinstance(ngpu, (int, np.integer)) and ngpu >= 1):
        raise field_error("exact assignment", "ngpu", ngpu, "must be an integer >= 1")
    check_limits(time_limit_s, rel_gap)
    loads, same = _loads(load, int(ngpu))
    n, g = loads.shape
    need = np.asarray(mem, dtype=np.float64).reshape(-1)
    if need.shape != (n,) or not np.all(np.isfinite(need)) or (need < 0).any():
        raise field_error("exact assignment", "mem", f"shape {need.shape}", f"must be (n,) = ({n},), finite, >= 0")
    if not (math.isfinite(cap) and cap >= 0):
        raise field_error("exact assignment", "cap", cap, "must be a number >= 0")
    program = Program(loads, np.zeros(n), need, np.full(g, float(cap)), np.arange(n), np.zeros(n, dtype=int),
                      identical=same)
    return solve(program, time_limit_s, rel_gap, seed)


def solve(program: Program, time_limit_s: float = TIME_LIMIT_S, rel_gap: float = REL_GAP, seed: int = 0,
          start: np.ndarray | None = None, relax: bool = False) -> Assignment | None:
    """The cheapest placement of ``program`` (module docstring) within ``time_limit_s``;
    ``seed`` fixes the solver's choices (one thread), so the same input gives the same
    placement whenever the solve ends ``"optimal"`` (one stopped by the clock depends on the
    machine's speed: its status says so). ``start``: a placement (n,) to start from (the
    solver's first incumbent where it is feasible). ``relax``: solve the LP relaxation only;
    the Assignment then carries the bound and the start's cost (``status`` ``"relaxation"``;
    None without a start)."""
    check_limits(time_limit_s, rel_gap)
    n, g = program.load.shape
    if n == 0:
        return answered(program, np.zeros(0, dtype=int), np.inf, "optimal", 0.0, rel_gap)
    multi, _ = item_groups(program)
    if (~(program.mem[:, None] <= program.cap[None] * (1 + 1e-12)).any(axis=1) & ~multi).any():
        return None                              # an item with no alternative fits no device
    began = time.monotonic()
    h, layout = _model(program, time_limit_s, rel_gap, seed, relax)
    if start is not None:
        start = relabelled(program, np.asarray(start, dtype=int))
        sol = highspy.HighsSolution()
        sol.col_value = list(_column_values(program, layout, np.asarray(start)))
        h.setSolution(sol)
    if not _run(h, time_limit_s):
        if start is None or not complete(program, start):
            return None
        # the solver never came back: its start, with the builder's bound
        return answered(program, start, program.floor_ms, "time_limit", time.monotonic() - began, rel_gap)
    seconds = time.monotonic() - began
    status = h.getModelStatus()
    if relax:
        if start is None or status != highspy.HighsModelStatus.kOptimal:
            return None
        return answered(program, start, max(float(h.getInfo().objective_function_value), program.floor_ms),
                        "relaxation", seconds, rel_gap)
    sol = h.getSolution()
    if not getattr(sol, "value_valid", True) or len(sol.col_value) < n * g:
        return None
    x = np.asarray(sol.col_value[:n * g]).reshape(n, g)
    device = np.where(x.max(axis=1) > 0.5, x.argmax(axis=1), -1)
    found = complete(program, device)
    if found:
        used = np.bincount(device[device >= 0], weights=program.mem[device >= 0], minlength=g)
        if (used > program.cap * (1 + 1e-9)).any():
            raise ShardlabError("exact assignment: the solver returned a placement over field 'cap'")
    if start is not None and complete(program, start) and (not found or program.cost(start) < program.cost(device)):
        device, found = start, True                              # the solver found none better in time
    if not found:
        return None
    said = "optimal" if status == highspy.HighsModelStatus.kOptimal else "time_limit"
    return answered(program, device, max(float(h.getInfo().mip_dual_bound), program.floor_ms), said, seconds, rel_gap)


def _layout(program: Program) -> dict[str, int]:
    """First column of each variable block (x, z, u, c, d, S, D, T, R, M) and the count."""
    n, g = program.load.shape
    _, z = item_groups(program)
    hosts = int(program.host.max()) + 1 if len(program.link_const) else 0
    sizes = [("x", n * g), ("z", len(z)), ("u", g), ("c", g), ("d", g), ("S", hosts), ("D", 1), ("T", 1),
             ("R", 1), ("M", 1)]
    out, at = {}, 0
    for name, size in sizes:
        out[name] = at
        at += size
    out["n"] = at
    return out


def _column_values(program: Program, layout: dict[str, int], device: np.ndarray) -> np.ndarray:
    """Every column's value at placement ``device`` (a start for the solver)."""
    n, g = program.load.shape
    v = np.zeros(layout["n"])
    on = device >= 0
    v[layout["x"] + np.arange(n)[on] * g + device[on]] = 1.0
    _, z = item_groups(program)
    for i in np.arange(n)[on]:
        k = z.get((int(program.group[i]), int(program.alt[i])))
        if k is not None:
            v[layout["z"] + k] = 1.0
    st = program.state(device)
    for name in ("u", "c", "d", "S"):
        v[layout[name]:layout[name] + len(st[name])] = st[name]
    for name in ("D", "T", "R"):
        v[layout[name]] = st[name]
    v[layout["M"]] = st["total"].max()
    return v


class _Rows:
    """Rows of a sparse program, gathered then handed to HiGHS in one call (CSR)."""

    def __init__(self) -> None:
        self.idx: list[np.ndarray] = []
        self.val: list[np.ndarray] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, idx: Any, val: Any, lo: float, hi: float) -> None:
        self.idx.append(np.asarray(idx, dtype=np.int32).reshape(-1))
        self.val.append(np.asarray(val, dtype=np.float64).reshape(-1))
        self.lo.append(lo)
        self.hi.append(hi)


def _model(program: Program, time_limit_s: float, rel_gap: float, seed: int, relax: bool) -> tuple[Any, dict[str, int]]:
    """The HiGHS model of ``program`` (module docstring) and its column layout."""
    n, g = program.load.shape
    inf = highspy.kHighsInf
    lay = _layout(program)
    multi, zcol = item_groups(program)
    busy = program.device_array(program.busy).astype(bool)
    lower, upper = np.zeros(lay["n"]), np.full(lay["n"], inf)
    upper[lay["x"]:lay["x"] + n * g] = 1.0
    upper[lay["z"]:lay["u"]] = 1.0
    upper[lay["u"]:lay["u"] + g] = 1.0
    lower[lay["u"]:lay["u"] + g] = busy
    fits = program.mem[:, None] <= program.cap[None] * (1 + 1e-12)
    upper[lay["x"]:lay["x"] + n * g] = fits.reshape(-1)
    if program.identical and not busy.any():     # the k-th largest sure item only on devices 0 .. k
        for k, i in enumerate(sure_order(program)):
            upper[lay["x"] + i * g + k + 1:lay["x"] + (i + 1) * g] = 0.0
    x = lambda i, d: lay["x"] + i * g + d   # noqa: E731
    rows = _Rows()
    for i in range(n):
        k = zcol.get((int(program.group[i]), int(program.alt[i])))
        cols = [x(i, d) for d in range(g)]
        if k is None:
            rows.add(cols, np.ones(g), 1.0, 1.0)
        else:
            rows.add(cols + [lay["z"] + k], np.append(np.ones(g), -1.0), 0.0, 0.0)
    by_group: dict[int, list[int]] = {}
    for (t, _), k in zcol.items():
        by_group.setdefault(t, []).append(lay["z"] + k)
    for cols in by_group.values():
        rows.add(cols, np.ones(len(cols)), 1.0, 1.0)
    items = np.arange(n)
    pair_rows = n * g <= PAIR_ROWS_MAX
    for d in range(g):
        xs = lay["x"] + items * g + d
        u, c, dd = lay["u"] + d, lay["c"] + d, lay["d"] + d
        if not busy[d]:
            rows.add(np.append(xs, u), np.append(-np.ones(n), 1.0), -inf, 0.0)          # u <= sum x
            if pair_rows:
                for xi in xs:
                    rows.add([u, xi], [1.0, -1.0], 0.0, inf)                          # u >= x
            else:
                rows.add(np.append(xs, u), np.append(-np.ones(n), float(n)), 0.0, inf)  # n u >= sum x
        rows.add(np.concatenate([[c, u], xs]), np.concatenate([[1.0, -program.op_ms], -program.load[:, d]]),
                 program.device_array(program.fixed_ms)[d], program.device_array(program.fixed_ms)[d])
        rows.add(np.append(dd, xs), np.append(1.0, -program.dim), program.device_array(program.fixed_dim)[d],
                 program.device_array(program.fixed_dim)[d])
        rows.add(xs, program.mem, -inf, float(program.cap[d]))
        rows.add([lay["D"], dd], [1.0, -1.0], 0.0, inf)
    if len(program.link_const):
        for h in range(int(program.host.max()) + 1):
            members = np.flatnonzero(program.host == h)
            rows.add(np.append(lay["S"] + h, lay["d"] + members), np.append(1.0, -np.ones(len(members))), 0.0, 0.0)
        for j, r in enumerate(program.link_rank):
            rows.add([lay["T"], lay["d"] + r, lay["S"] + program.host[r]],
                     [1.0, -program.link_own[j], -program.link_host[j]], float(program.link_const[j]), inf)
    k = program.wait
    bw0, fw0 = program.device_array(program.bw0), program.device_array(program.fw0)
    for d in range(g):
        c, dd = lay["c"] + d, lay["d"] + d
        rows.add([lay["R"], c, dd, lay["D"], lay["T"]],
                 [1.0, -1.0, -program.send_bw, -program.max_bw, -program.link_bw], float(bw0[d]), inf)
        rows.add([lay["M"], c, dd, lay["D"], lay["T"], lay["R"]],
                 [1.0, -(1 - k), -((1 - k) * program.send_bw + program.send_fw),
                  -((1 - k) * program.max_bw + program.max_fw), -((1 - k) * program.link_bw + program.link_fw), -k],
                 float((1 - k) * bw0[d] + fw0[d]), inf)
    h = _highs()
    for key, value in (("time_limit", float(time_limit_s)), ("mip_rel_gap", float(rel_gap)),
                       ("threads", 1), ("random_seed", int(seed) % 2_147_483_647)):
        h.setOptionValue(key, value)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = lay["n"], len(rows.lo)
    cost = np.zeros(lay["n"])
    cost[lay["M"]] = 1.0
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, lower, upper
    lp.row_lower_, lp.row_upper_ = np.array(rows.lo), np.array(rows.hi)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.concatenate([[0], np.cumsum([len(i) for i in rows.idx])]).astype(np.int32)
    lp.a_matrix_.index_ = np.concatenate(rows.idx)
    lp.a_matrix_.value_ = np.concatenate(rows.val)
    if not relax:
        kinds = np.full(lay["n"], highspy.HighsVarType.kContinuous)
        kinds[lay["x"]:lay["u"] + g] = highspy.HighsVarType.kInteger
        lp.integrality_ = list(kinds)
    h.passModel(lp)
    return h, lay
