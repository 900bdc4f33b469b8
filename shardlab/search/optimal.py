"""``optimal``: the plan of least cost under a cost model, with a proven bound and the gap.

The task becomes the program of :mod:`shardlab.search.optimal_program` (its plan space:
tables whole or in two column halves, tables that fit no device in TorchRec's row layouts --
one program per combination of layouts, sharing the time limit),
solved by :mod:`shardlab.search.exact` from a greedy start, by size (item x device pairs,
``constants.MAX_EXACT_PAIRS`` / ``MAX_RELAXED_PAIRS``):

- small: the integer program within ``time_limit_s``; status ``optimal`` (gap closed to
  ``rel_gap``) or ``time_limit`` (the best plan found, the solver's bound);
- medium: the LP relaxation gives the bound, the greedy start is the plan (status ``relaxation``;
  where the relaxation is not solved within the time left, the averaged bound instead);
- large: the bound is the program averaged over devices (status ``averaged``, below), the
  greedy start is the plan.

**The averaged bound** (:func:`~shardlab.search.optimal_program.averaged_bound`) needs no
solver and is linear in the tables; the integer program and its relaxation start from it.

A plan's ``metadata["optimality"]``: ``model`` (what the cost, bound and gap are under),
``space`` (the plan space the bound is over; ``columns`` whether it holds column halves,
``whole`` the tables kept whole, ``row_layouts`` the layouts solved for: table -> [k, first
device] per combination), ``exact`` (False: the program is a linearisation
of a learned model, and the bound is the linearisation's, not the model's), ``cost_ms`` (the
program's cost of the plan), ``bound_ms``, ``gap`` ((cost - bound) / cost), ``status``,
``seconds``, ``time_limit_s``, ``rel_gap``, ``solver``, ``pairs`` (item x device pairs) and
``bundle`` (the cost model's own label) and ``model_cost_ms`` (the bundle's own estimate of the plan; equal to ``cost_ms`` where exact,
checked to 1e-6). The bound is over the space only: a plan outside it (quarter columns, row
blocks of a table that fits) is bounded by the model's floor
(:func:`~shardlab.evaluate.model.model_bound_ms`), which :func:`plan_bound` returns for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.bundle import CostModelBundle, load_bundle
from shardlab.costmodel.rowwise_comm import load_rowwise_comm
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.evaluate.model import estimate_plan, floor_label, model_bound_ms
from shardlab.evaluate.evaluation import Evaluation
from shardlab.plan import Plan
from shardlab.search.exact import REL_GAP, TIME_LIMIT_S, Assignment, answered, check_limits, solve, solver_name
from shardlab.search.exact_program import restricted
from shardlab.search.optimal_program import Built, build, greedy_start, in_space, layouts, plan_items, plan_space, to_plan
from shardlab.search.row_wise import RowChoice
from shardlab.search.registry import register_sharder
from shardlab.tables import Task


#: Share of the time limit kept for what follows the solve (the plan, the model's re-costing).
RESERVE = 0.02


def solve_task(task: Task, bundle: Any, rowwise_comm: Any = None, columns: bool = True,
               time_limit_s: float = TIME_LIMIT_S, rel_gap: float = REL_GAP, seed: int = 0,
               whole: tuple[str, ...] = ()) -> tuple[Built, Assignment, list[dict[int, RowChoice]]]:
    """The program of ``task`` and its answer by size (module docstring), all within
    ``time_limit_s`` of the call (building included), and the row layouts solved for: one
    program per layout combination (:func:`~shardlab.search.optimal_program.layouts`), each
    in an equal share of the time left; the cheapest answer is returned with the smallest of
    the layouts' bounds (a layout whose program found no placement counts its averaged bound).
    Raises :class:`InfeasibleError` when no placement in the space was found (none meets the
    memory caps, or the solver found none in time)."""
    check_limits(time_limit_s, rel_gap)
    end = time.monotonic() + (1 - RESERVE) * time_limit_s      # the rest: the plan, the model's re-costing
    options = layouts(task)
    best: tuple[Built, Assignment] | None = None
    bounds = []
    for k, layout in enumerate(options):
        share = time.monotonic() + (end - time.monotonic()) / (len(options) - k)
        built, answer = _solve_layout(task, bundle, rowwise_comm, columns, seed, whole, layout, share, rel_gap)
        bounds.append(built.program.floor_ms if answer is None else answer.bound)
        if answer is not None and (best is None or answer.cost < best[1].cost):
            best = built, answer
    if best is None:
        raise InfeasibleError(f"task '{task.name}': the exact planner found no plan in field 'time_limit_s' = "
                              f"{time_limit_s:g} s; none may fit field 'mem_cap_gb' = {task.mem_cap_gb:g} GB "
                              f"({built.space})", None, 0.0)
    built, answer = best
    if len(options) > 1:
        built = replace(built, space=plan_space(columns, whole, f"in one of {len(options)} row layouts, all solved"))
    return built, answered(built.program, answer.device, min(bounds), answer.status, answer.seconds, rel_gap), options


def _solve_layout(task: Task, bundle: Any, rowwise_comm: Any, columns: bool, seed: int, whole: tuple[str, ...],
                  layout: dict[int, RowChoice], end: float, rel_gap: float) -> tuple[Built, Assignment | None]:
    """One layout's program and its answer by size (module docstring) by the clock time ``end``
    (``time.monotonic()``); None where it found no placement. With column halves, the
    table-wise program is solved first in half the time left, and the cheaper of its answer and
    the greedy start starts the full one."""
    built = build(task, bundle, rowwise_comm, columns, seed, whole, layout)
    p = built.program
    pairs = p.load.size
    start = greedy_start(built)
    left = lambda share=1.0: max(0.05, (end - time.monotonic()) * share)   # noqa: E731
    table_wise = np.array([it.alt == 0 for it in built.items])
    if pairs <= C.MAX_EXACT_PAIRS and not table_wise.all():
        first = solve(restricted(p, table_wise), left(0.5), rel_gap, seed,
                      start=None if start is None else start[table_wise])
        if first is not None:
            mapped = np.full(len(table_wise), -1)
            mapped[table_wise] = first.device
            start = mapped if start is None or p.cost(mapped) < p.cost(start) else start
    answer: Assignment | None = None
    if pairs <= C.MAX_EXACT_PAIRS:
        answer = solve(p, left(), rel_gap, seed, start=start)
    elif start is not None and pairs <= C.MAX_RELAXED_PAIRS:
        answer = solve(p, left(), rel_gap, seed, start=start, relax=True)    # None: not solved in time
    if answer is None and start is not None and pairs > C.MAX_EXACT_PAIRS:
        answer = answered(p, start, p.floor_ms, "averaged", 0.0, rel_gap)
    return built, answer


@dataclass
class OptimalSharder:
    """The exact planner (module docstring). ``model``: a cost-model bundle, or the name or
    manifest of one shipped for ``profile`` (default ``analytic``: the program is exact);
    ``time_limit_s`` (s) and ``rel_gap`` bound the solve; ``columns``: allow column halves;
    ``rowwise_comm``: the row-wise comm model of the fixed row blocks (as the model evaluator's);
    ``whole``: tables never split into halves (TorchRec constraints that forbid column-wise)."""

    name: str = "optimal"
    model: str | CostModelBundle = "analytic"
    profile: str = C.PLAN_PROFILE
    time_limit_s: float = TIME_LIMIT_S
    rel_gap: float = REL_GAP
    columns: bool = True
    rowwise_comm: Any = "shipped"
    whole: tuple[str, ...] = ()
    _bundle: CostModelBundle | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        try:
            check_limits(self.time_limit_s, self.rel_gap)
        except ShardlabError as e:
            raise ShardlabError(f"method '{self.name}': {str(e).split(': ', 1)[-1]}") from None

    def bundle(self) -> CostModelBundle:
        """The cost model (loaded once)."""
        if self._bundle is None:
            self._bundle = self.model if isinstance(self.model, CostModelBundle) else load_bundle(self.model, self.profile)
        return self._bundle

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """The best plan found, with ``metadata["optimality"]`` (module docstring)."""
        bundle = self.bundle()
        rowwise = load_rowwise_comm(self.rowwise_comm, self.profile, bundle.comm)
        began = time.monotonic()
        built, answer, solved = solve_task(task, bundle, rowwise, self.columns, self.time_limit_s, self.rel_gap,
                                           seed, self.whole)
        seconds = time.monotonic() - began
        plan = to_plan(task, built, answer.device, self.name, seed)
        model_cost = estimate_plan(task, plan, bundle, lower_bound=False, rowwise_comm=rowwise).cost_ms
        if built.exact and abs(model_cost - answer.cost) > 1e-6 * max(1.0, abs(model_cost)):
            raise ShardlabError(f"method '{self.name}': the program's cost {answer.cost:.6g} ms differs from the "
                                f"model's {model_cost:.6g} ms on its own plan (field 'model' is not the analytic "
                                "form the program assumes)")
        record = {"model": built.label, "bundle": bundle.source, "space": built.space, "columns": self.columns,
                  "whole": list(self.whole), "row_layouts": [{task.tables[i].name: [c.k, c.first] for i, c in lay.items()}
                                                             for lay in solved], "exact": built.exact, "cost_ms": answer.cost,
                  "bound_ms": answer.bound, "gap": answer.gap, "status": answer.status,
                  "seconds": round(seconds, 3), "time_limit_s": self.time_limit_s, "rel_gap": self.rel_gap,
                  "solver": solver_name(), "pairs": int(built.program.load.size), "model_cost_ms": model_cost}
        return replace(plan, metadata={"optimality": record})


def plan_bound(task: Task, plan: Plan, optimality: dict[str, Any], bundle: Any, rowwise_comm: Any = None
               ) -> tuple[float | None, str]:
    """The bound (ms) to quote beside ``plan`` and what it rests on: the larger of the model's
    floor over every plan and, when ``plan`` lies in the exact planner's space and its program
    was exact under this same model (``optimality`` of its plan's metadata), its bound; the floor
    alone otherwise (None where the model has none, and the label says so)."""
    floor = model_bound_ms(task, bundle, rowwise_comm)
    said = floor_label(bundle) if floor is not None else \
        f"none: {bundle.source} proves no bound (a learned model is not additive)"
    if (optimality.get("exact") and optimality.get("bundle") == bundle.source
            and in_space(task, plan, bool(optimality.get("columns")), tuple(optimality.get("whole", ())),
                         row_layouts(task, optimality))):
        exact = float(optimality["bound_ms"])
        if floor is None or exact >= floor:
            return exact, (f"the exact planner's bound ({optimality['status']}) over its space "
                           f"({optimality['space']}) under {bundle.source}")
    return floor, said


def row_layouts(task: Task, optimality: Mapping[str, Any]) -> list[dict[int, RowChoice]] | None:
    """The row layouts an exact planner's record says it solved for (None: the default alone)."""
    said = optimality.get("row_layouts")
    if not said:
        return None
    index = {t.name: i for i, t in enumerate(task.tables)}
    return [{index[name]: RowChoice(int(k), int(first)) for name, (k, first) in lay.items()} for lay in said]


def exact_record(plans: Mapping[str, Plan]) -> dict[str, Any]:
    """The ``optimality`` record of the first exact planner's plan among ``plans`` ({} if none)."""
    return next((dict(p.metadata["optimality"]) for p in plans.values() if "optimality" in p.metadata), {})


def quoted_bounds(task: Task, plans: Mapping[str, Plan], evaluations: Mapping[str, Evaluation], bundle: Any,
                  rowwise_comm: Any = None) -> dict[str, Evaluation]:
    """``evaluations`` of ``plans`` by ``bundle`` (the model evaluator's) with each plan's own
    bound (:func:`plan_bound`, using the exact planner's plan among ``plans`` where there is
    one) and what it rests on. Measured evaluations keep their bound and gain, where the exact
    planner's plan is there and exact, its bound beside them labelled as a bound under the model
    it was solved with (``bound_source``), not a measurement."""
    record = exact_record(plans)
    out = {}
    for k, e in evaluations.items():
        if e.rounds_ms:
            if record.get("exact"):
                e = replace(e, bound_source=(e.bound_source or "no measured bound") + "; under the model "
                            f"{record['bundle']} the exact planner's bound is {record['bound_ms']:.4g} ms "
                            f"({record['status']}; a model's bound, not measured)")
            out[k] = e
            continue
        bound, said = plan_bound(task, plans[k], record, bundle, rowwise_comm)
        out[k] = replace(e, lower_bound_ms=bound, bound_source=said)
    return out


def skip_reason(task: Task, columns: bool = True) -> str | None:
    """One line saying why the main job leaves the exact planner out of ``task`` (its integer
    program over ``constants.MAX_EXACT_PAIRS`` item x device pairs), or None."""
    pairs = len(plan_items(task, columns)[0]) * task.ngpu
    if pairs <= C.MAX_EXACT_PAIRS:
        return None
    return (f"optimal: skipped: {pairs:,} item x device pairs, over the integer program's {C.MAX_EXACT_PAIRS:,} "
            "(constants.MAX_EXACT_PAIRS); run it alone for its bound and greedy plan")


register_sharder("optimal", OptimalSharder)
