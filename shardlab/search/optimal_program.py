"""A task and a cost-model bundle as the exact program of :mod:`shardlab.search.exact`.

**The plan space** (what the program's optimum and bound are over): every table that fits a
device whole is placed whole, or -- with ``columns`` -- as two column halves (each on any
device; only where half the dim is a multiple of ``constants.DIM_MULTIPLE``); a table that
fits no device whole is cut into k equal row blocks on consecutive devices, in one of TorchRec's
row layouts (:func:`~shardlab.search.row_wise.row_choices`: row-wise over the first k devices,
k from the fewest blocks that fit to G, or table-row-wise inside one host). One program is
built per combination of these layouts (a layout fixes the blocks, so each program is exact);
the planner solves every combination up to ``constants.MAX_LAYOUT_COMBOS`` (:func:`layouts`),
else row-wise over every device alone. Memory caps hold.

**Exact under the analytic models.** :class:`~shardlab.costmodel.analytic.AnalyticCompute`
is affine in the items a device holds (a per-op cost once a device holds anything, plus each
(sub)table's terms), so each item's load is the model's prediction for it alone less the
per-op cost. :class:`~shardlab.costmodel.analytic.AnalyticComm` is affine in the device's
columns, all columns (a constant here: every plan moves them all) and the largest device's
columns, plus waiting; its constants are read off the model by three probes.
:class:`~shardlab.costmodel.topology_comm.TopologyComm` is the slowest rank's time over four
linear byte counts per rank (sent and received, inside and between hosts), i.e. link rows.
Row-wise collectives of the fixed row blocks add a constant per rank
(:meth:`~shardlab.costmodel.rowwise_comm.RowWiseComm.increment`). The planner checks the
program's cost against the model's own estimate of the plan it returns.

**Linearised otherwise.** For a compute model that is not additive (a learned one), each item's
load is fitted by non-negative least squares to the model's predictions on random shards of the
task's items (relative error), and the comm of a learned bundle is its profile's analytic comm
model; the label says so. The program's bound is then a bound of the linearisation only.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.analytic import AnalyticComm, AnalyticCompute, nnls_relative
from shardlab.costmodel.bundle import load_bundle, plain_model
from shardlab.costmodel.topology_comm import TopologyComm
from shardlab.data.lookups import device_tables
from shardlab.evaluate.exchange import comm_pattern
from shardlab.plan import Placement, Plan
from shardlab.search.exact_program import Program
from shardlab.search.row_split import equal_row_ranges
from shardlab.search.row_wise import RowChoice, oversized, row_choices
from shardlab.tables import Table, Task

#: Random shards the linearisation of a non-additive compute model is fitted on, per item.
FIT_SHARDS_PER_ITEM = 6


@dataclass(frozen=True)
class Item:
    """One block the program may place: table ``table`` (index in the task), alternative
    ``alt`` (0 whole, 1 halves), columns ``[col_offset, col_offset + cols)``, as the
    (sub)table ``sub`` a device holding it would cost."""

    table: int
    alt: int
    col_offset: int
    cols: int
    sub: Table


@dataclass(frozen=True)
class Built:
    """A task's program: ``program``, its ``items``, the ``fixed`` placements (row blocks),
    whether it is ``exact`` under the bundle (else a linearisation), ``label`` (what it rests
    on, one line) and ``space`` (the plan space, one line)."""

    program: Program
    items: tuple[Item, ...]
    fixed: tuple[Placement, ...]
    exact: bool
    label: str
    space: str


def plan_space(columns: bool, whole: tuple[str, ...] = (), row_layouts: str = "row-wise over every device") -> str:
    """The plan space in one line (module docstring)."""
    kept = f" ({len(whole)} kept whole)" if columns and whole else ""
    return ("table-wise" + (" or two column halves per table" + kept if columns else "")
            + f"; a table that fits no device {row_layouts}")


def in_space(task: Task, plan: Plan, columns: bool = True, whole: tuple[str, ...] = (),
             row_layouts: list[Mapping[int, RowChoice]] | None = None) -> bool:
    """Whether ``plan`` lies in the plan space (module docstring; ``row_layouts``: the layouts
    solved for, default :func:`default_layout` alone): the optimum and bound of the program are
    over these plans only."""
    got: dict[str, set[tuple[int, int, int, int, int]]] = {}
    for p in plan.placements:
        got.setdefault(p.table, set()).add((p.col_offset, p.cols, p.row_offset, p.rows, p.device))
    big = {task.tables[i].name for i in oversized(task)}
    if big:
        options = []
        for layout in row_layouts or [default_layout(task)]:
            fixed = plan_items(task, columns, whole, layout)[1]
            options.append({name: {(f.col_offset, f.cols, f.row_offset, f.rows, f.device) for f in fixed
                                    if f.table == name} for name in big})
        if not any(all(got.get(name) == want[name] for name in big) for want in options):
            return False
    for t in task.tables:
        if t.name in big:
            continue
        shape = {(c0, c, r0, r) for c0, c, r0, r, _ in got.get(t.name, set())}
        half = t.dim // 2
        halves = columns and task.ngpu > 1 and half % C.DIM_MULTIPLE == 0 and half > 0 and t.name not in whole
        if shape != {(0, t.dim, 0, t.rows)} and not (halves and shape == {(0, half, 0, t.rows), (half, half, 0, t.rows)}):
            return False
        if len([b for b in plan.placements if b.table == t.name]) != len(shape):
            return False
    return True


def default_layout(task: Task) -> dict[int, RowChoice]:
    """Row-wise over the first min(G, rows) devices for every table that fits no device."""
    return {i: RowChoice(min(task.ngpu, task.tables[i].rows), 0) for i in oversized(task)}


def layouts(task: Task) -> list[dict[int, RowChoice]]:
    """The row layouts the planner solves for (module docstring): every combination of
    :func:`~shardlab.search.row_wise.row_choices` of the tables that fit no device where there
    are at most ``constants.MAX_LAYOUT_COMBOS``, else :func:`default_layout` alone."""
    big = oversized(task)
    if not big:
        return [{}]
    options = [row_choices(task, i) for i in big]
    if math.prod(len(o) for o in options) > C.MAX_LAYOUT_COMBOS:
        return [default_layout(task)]
    return [dict(zip(big, combo)) for combo in itertools.product(*options)]


def plan_items(task: Task, columns: bool, whole: tuple[str, ...] = (), layout: Mapping[int, RowChoice] | None = None
               ) -> tuple[list[Item], list[Placement]]:
    """The task's items (whole tables and column halves; none for the tables named in
    ``whole``) and its fixed row blocks, laid out as ``layout`` says (table index -> choice;
    default :func:`default_layout`)."""
    items: list[Item] = []
    fixed: list[Placement] = []
    cap = task.mem_cap_bytes
    layout = default_layout(task) if layout is None else layout
    for k, t in enumerate(task.tables):
        if task.table_bytes(t) > cap:
            choice = layout[k]
            fixed += [Placement(t.name, 0, t.dim, off, n, choice.first + j)
                      for j, (off, n) in enumerate(equal_row_ranges(t.rows, choice.k))]
            continue
        items.append(Item(k, 0, 0, t.dim, t))
        half = t.dim // 2
        if columns and task.ngpu > 1 and half % C.DIM_MULTIPLE == 0 and half > 0 and t.name not in whole:
            items += [Item(k, 1, off, half, t.with_dim(half, name=f"{t.name}[{off}:{off + half}]"))
                      for off in (0, half)]
    return items, fixed


def _compute_loads(compute: Any, items: list[Item], fixed_shards: list[list[Table]], ngpu: int, seed: int
                   ) -> tuple[float, np.ndarray, np.ndarray, bool]:
    """(per-op ms, item loads (n,) ms, fixed loads (G,) ms, exact): fw + bw compute."""
    subs = [it.sub for it in items]
    if isinstance(plain_model(compute), AnalyticCompute) and compute is plain_model(compute):
        op = float(compute.predict_sums(np.zeros((1, compute.embed_dim)), np.array([1])).sum())
        def alone(tables: list[Table]) -> np.ndarray:
            return np.asarray(compute.predict([[t] for t in tables]), dtype=float).sum(axis=1) - op
        load = alone(subs) if subs else np.zeros(0)
        fixed = np.array([alone(s).sum() if s else 0.0 for s in fixed_shards])
        return op, load, fixed, True
    rng = np.random.default_rng(seed)
    n = len(items)
    shards, rows = [], []
    per = max(1, n // max(ngpu, 1))
    for _ in range(min(4000, FIT_SHARDS_PER_ITEM * max(n, 1))):
        pick = rng.choice(n, size=min(n, max(1, rng.integers(1, 2 * per + 1))), replace=False)
        shards.append([subs[i] for i in pick])
        row = np.zeros(n + 1)
        row[0], row[1 + pick] = 1.0, 1.0
        rows.append(row)
    y = np.asarray(compute.predict(shards), dtype=float).sum(axis=1)
    coef = nnls_relative(np.array(rows), np.maximum(y, 1e-6))
    pred = np.asarray(compute.predict([s for s in fixed_shards if s]), dtype=float).sum(axis=1) if any(fixed_shards) else []
    fixed = np.zeros(ngpu)
    fixed[[g for g, s in enumerate(fixed_shards) if s]] = np.asarray(pred) - coef[0]
    return float(coef[0]), coef[1:], fixed, False


def _affine_comm(comm: Any, ngpu: int, total_dim: float) -> dict[str, Any]:
    """An all-to-all model affine in (own columns, all columns, largest columns) plus waiting,
    read off by probes at ``total_dim`` columns in all (module docstring)."""
    g, s = ngpu, float(total_dim)
    lump = np.zeros((1, g))
    lump[0, 0] = s
    even = np.full((1, g), s / g)
    a, b = (np.asarray(comm.predict(d, None), dtype=float)[0] for d in (lump, even))
    delays = np.zeros((1, g))
    delays[0, 0] = 1.0
    waited = np.asarray(comm.predict(even, delays), dtype=float)[0]
    out: dict[str, Any] = {"wait": float(waited[1, 0] - b[1, 0])}
    for j, key in ((1, "bw"), (0, "fw")):
        send = (a[0, j] - a[1, j]) / s
        big = (a[1, j] - b[1, j] + send * s / g) / (s - s / g)
        out["send_" + key], out["max_" + key] = float(send), float(big)
        out[key + "0"] = np.full(g, a[1, j] - big * s)
    return out


def _topology_links(comm: TopologyComm, ngpu: int, total_dim: float) -> dict[str, Any]:
    """The slowest-rank time of the topology model as link rows (module docstring)."""
    g = ngpu
    host = np.arange(g) // max(1, comm.gpus_per_host)
    size = np.bincount(host)[host].astype(float)
    per_col = 1e3 * comm.batch_size / g * comm.bytes_per_value
    ki, ke = per_col / (comm.intra_gbps * 1e9), per_col / (comm.inter_gbps * 1e9)
    lat = comm.latency_us * 1e-3
    rank = np.concatenate([np.arange(g)] * 4)
    const = np.concatenate([np.full(g, lat)] * 3 + [lat + ke * float(total_dim) * np.ones(g)])
    own = np.concatenate([ki * (size - 1), -ki * np.ones(g), ke * (g - size), np.zeros(g)])
    on_host = np.concatenate([np.zeros(g), ki * np.ones(g), np.zeros(g), -ke * np.ones(g)])
    return {"host": host, "link_const": const, "link_rank": rank, "link_own": own, "link_host": on_host,
            "link_bw": 1.0, "link_fw": 1.0, "wait": 1.0}


def build(task: Task, bundle: Any, rowwise_comm: Any = None, columns: bool = True, seed: int = 0,
          whole: tuple[str, ...] = (), layout: Mapping[int, RowChoice] | None = None) -> Built:
    """The program of ``task`` under ``bundle`` (and ``rowwise_comm`` for the fixed row blocks,
    as :func:`~shardlab.evaluate.model.estimate_plan` costs them), the tables that fit no device
    laid out as ``layout`` says (default :func:`default_layout`)."""
    g = task.ngpu
    items, fixed = plan_items(task, columns, whole, layout)
    partial = Plan(task.name, "optimal", g, tuple(fixed))
    fixed_shards = device_tables(task, partial) if fixed else [[] for _ in range(g)]
    op, load, fixed_ms, exact = _compute_loads(bundle.compute, items, fixed_shards, g, seed)
    label = bundle.source if exact else f"a linearisation fitted to {bundle.source} around the task"
    shard_dims = np.array([sum(t.out_dim for t in s) for s in fixed_shards], dtype=float)
    fixed_dim, inc = shard_dims, np.zeros((g, 2))
    if fixed and rowwise_comm is not None and g > 1:
        dims, rw = comm_pattern(task, partial, int(rowwise_comm.setting("batch_size")))
        fixed_dim = np.asarray(dims, dtype=float)
        if not rw.empty:
            inc = np.asarray(rowwise_comm.increment(g, rw.to_dict()), dtype=float)
            label += "+" + rowwise_comm.source
    total = float(fixed_dim.sum() + sum(task.tables[k].out_dim for k in {it.table for it in items}))
    comm: dict[str, Any] = {}
    if g > 1:
        model, comm_label = bundle.comm_for(g)
        plain = plain_model(model)
        if isinstance(plain, TopologyComm):
            comm = _topology_links(plain, g, total)
        else:
            if not isinstance(plain, AnalyticComm) or plain is not model:
                model = load_bundle("analytic", getattr(bundle.compute, "profile_", {}).get("name", "cpu")).comm
                exact, comm_label = False, f"+comm linearised as {model.source}"
            comm = _affine_comm(model, g, total)
        label += comm_label
        comm["bw0"] = comm.get("bw0", np.zeros(g)) + inc[:, 1]
        comm["fw0"] = comm.get("fw0", np.zeros(g)) + inc[:, 0]
    used = np.zeros(g)
    for p in fixed:
        used[p.device] += task.hbm_bytes(task.table(p.table), p.rows, p.cols)
    program = Program(np.repeat(load[:, None], g, axis=1), np.array([it.sub.out_dim for it in items], dtype=float),
                      np.array([task.hbm_bytes(it.sub, it.sub.rows, it.cols) for it in items], dtype=float),
                      task.mem_cap_bytes - used, np.array([it.table for it in items], dtype=int),
                      np.array([it.alt for it in items], dtype=int), op_ms=op, fixed_ms=fixed_ms,
                      fixed_dim=fixed_dim, busy=np.array([bool(s) for s in fixed_shards]),
                      identical=not fixed and len(set(np.asarray(comm.get("host", [0])).tolist())) == 1, **comm)
    floor = averaged_bound(program, items)
    if floor is not None:
        program = replace(program, floor_ms=floor)
    return Built(program, tuple(items), tuple(fixed), exact, label, plan_space(columns, whole))


def to_plan(task: Task, built: Built, device: Any, method: str, seed: int = 0) -> Plan:
    """The plan of a placement of ``built``'s items (-1: not taken) plus its fixed blocks."""
    out = list(built.fixed)
    for it, d in zip(built.items, device):
        if d >= 0:
            t = task.tables[it.table]
            out.append(Placement(t.name, it.col_offset, it.cols, 0, t.rows, int(d)))
    return Plan(task.name, method, task.ngpu, tuple(out), seed)


def greedy_start(built: Built) -> np.ndarray | None:
    """The cheaper (program cost; ties: the first) of :func:`greedy_placement` with and without
    column halves, or None where neither places every table."""
    found = [d for d in (greedy_placement(built, False), greedy_placement(built, True)) if d is not None]
    return min(found, key=built.program.cost) if found else None


def greedy_placement(built: Built, whole_only: bool) -> np.ndarray | None:
    """A placement to start the solver from: tables heaviest first (compute plus columns at
    ``w`` ms each), each whole or in its halves -- whichever leaves the smaller largest compute
    + ``w`` x the largest columns (ties: whole; ``whole_only``: whole always) -- every piece on the device that leaves that
    least among those it fits (ties: the least compute + ``w`` x columns there, then the lower
    id); ``w`` the program's ms per column on the busiest device. None if a table fits nowhere.
    (n,) device per item, -1 for items not taken."""
    p = built.program
    n, g = p.load.shape
    device = np.full(n, -1)
    free = p.cap.astype(float).copy()
    c = p.device_array(p.fixed_ms) + p.op_ms * p.device_array(p.busy)
    d = p.device_array(p.fixed_dim).copy()
    own = float(np.max(p.link_own)) if len(p.link_own) else 0.0
    w = p.send_bw + p.send_fw + p.max_bw + p.max_fw + (p.link_bw + p.link_fw) * max(own, 0.0)
    by_table: dict[int, dict[int, list[int]]] = {}
    for i, it in enumerate(built.items):
        by_table.setdefault(it.table, {}).setdefault(it.alt, []).append(i)

    def place(i: int, c: np.ndarray, d: np.ndarray, free: np.ndarray) -> int | None:
        ok = np.flatnonzero(p.mem[i] <= free)
        if not len(ok):
            return None
        after_c = c[ok] + p.load[i, ok] + p.op_ms * (c[ok] == 0)
        after_d = d[ok] + p.dim[i]
        worst = np.maximum(c.max(), after_c) + w * np.maximum(d.max(), after_d)
        best = int(ok[np.lexsort((ok, after_c + w * after_d, worst))[0]])
        c[best] += p.load[i, best] + (p.op_ms if c[best] == 0 else 0.0)
        d[best] += p.dim[i]
        free[best] -= p.mem[i]
        return best

    order = sorted(by_table, key=lambda t: -sum(p.load[i, 0] + w * p.dim[i] for i in by_table[t][0]))
    for t in order:
        tried = []
        for alt, members in sorted(by_table[t].items())[:1 if whole_only else None]:
            cc, dd, ff = c.copy(), d.copy(), free.copy()
            where = [place(i, cc, dd, ff) for i in members]
            if None not in where:
                tried.append((float(cc.max() + w * dd.max()), alt, members, where, cc, dd, ff))
        if not tried:
            return None
        _, _, members, where, c, d, free = min(tried, key=lambda x: (x[0], x[1]))
        device[members] = where
    return device


def averaged_bound(program: Program, items: tuple[Item, ...] | list[Item]) -> float | None:
    """A bound (ms) on every placement of the program's space, with no solver: a plan's cost is
    at least the mean over the k devices it uses of their costs, and each term of that mean has
    a floor -- compute: one per-op cost plus (fixed blocks + the items' loads, each table its
    cheaper alternative) / k >= the same / G; columns: all columns / k >= / G on the mean device
    and the largest; the slowest link T: each link row's mean over ranks; waiting >= 0; the
    per-rank constants their smallest. And the device holding a table's costliest piece (its
    cheaper alternative) pays one per-op cost, that piece and its columns' send terms. None where a comm coefficient is negative (the
    averaging then proves nothing). Linear in the tables."""
    p = program
    g = p.ngpu
    coefs = np.array([p.send_bw, p.send_fw, p.max_bw, p.max_fw, p.wait, p.link_bw, p.link_fw])
    if (coefs < -1e-12 * max(1.0, float(np.abs(coefs).max()))).any():
        return None
    send_bw, send_fw, max_bw, max_fw, _, link_bw, link_fw = np.maximum(coefs, 0.0)
    by_table: dict[int, dict[int, float]] = {}
    for it, load in zip(items, p.load.min(axis=1)):
        alts = by_table.setdefault(it.table, {})
        alts[it.alt] = alts.get(it.alt, 0.0) + float(load)
    if not by_table and not p.device_array(p.busy).any():
        return 0.0
    compute = p.op_ms + (sum(min(a.values()) for a in by_table.values()) + float(p.device_array(p.fixed_ms).sum())) / g
    if g == 1:
        return compute
    total = float(p.device_array(p.fixed_dim).sum() + sum(it.sub.out_dim for it in items if it.alt == 0))
    t = 0.0
    if len(p.link_const):
        size = np.bincount(p.host)[p.host]
        for j in range(len(p.link_const) // g):
            rows = slice(j * g, (j + 1) * g)
            on_host = float(p.link_host[rows][0])
            hosts = (size.min() if on_host >= 0 else size.max()) * total     # <= or >= sum_r S_host(r)
            t = max(t, float(p.link_const[rows].mean()) + (float(p.link_own[rows].min()) * total + on_host * hosts) / g)
    per_col = total / g
    shared = p.device_array(p.bw0).min() + p.device_array(p.fw0).min() + (max_bw + max_fw) * per_col + (link_bw + link_fw) * t
    piece: dict[int, dict[int, float]] = {}             # the device of a table's costliest piece pays at least it
    for it, load in zip(items, p.load.min(axis=1)):
        alts = piece.setdefault(it.table, {})
        alts[it.alt] = max(alts.get(it.alt, 0.0), float(load) + (send_bw + send_fw) * it.sub.out_dim)
    largest = max((min(a.values()) for a in piece.values()), default=0.0)
    return float(max(compute + (send_bw + send_fw) * per_col, p.op_ms + largest) + shared)
