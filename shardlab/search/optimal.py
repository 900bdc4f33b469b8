"""``optimal``: the plan of least cost under a cost model, with a proven bound and the gap.

The task becomes the program of :mod:`shardlab.search.optimal_program` (its plan space:
tables whole or in two column halves, tables that fit no device row-wise over every device),
solved by :mod:`shardlab.search.exact` from a greedy start, by size (item x device pairs,
``constants.MAX_EXACT_PAIRS`` / ``MAX_RELAXED_PAIRS``):

- small: the integer program within ``time_limit_s``; status ``optimal`` (gap closed to
  ``rel_gap``) or ``time_limit`` (the best plan found, the solver's bound);
- medium: the LP relaxation gives the bound, the greedy start is the plan (status ``relaxation``);
- large: the bound is the program averaged over devices (status ``averaged``, below), the
  greedy start is the plan.

**The averaged bound** (:func:`~shardlab.search.optimal_program.averaged_bound`) needs no
solver and is linear in the tables; the integer program and its relaxation start from it.

A plan's ``metadata["optimality"]``: ``model`` (what the cost, bound and gap are under),
``space`` (the plan space the bound is over; ``columns`` whether it holds column halves), ``exact`` (False: the program is a linearisation
of a learned model, and the bound is the linearisation's, not the model's), ``cost_ms`` (the
program's cost of the plan), ``bound_ms``, ``gap`` ((cost - bound) / cost), ``status``,
``seconds``, ``time_limit_s``, ``rel_gap``, ``solver``, ``pairs`` (item x device pairs) and
``model_cost_ms`` (the bundle's own estimate of the plan; equal to ``cost_ms`` where exact,
checked to 1e-6). The bound is over the space only: a plan outside it (quarter columns, row
blocks of a table that fits) is bounded by the model's floor
(:func:`~shardlab.evaluate.model.model_bound_ms`), which :func:`plan_bound` returns for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.bundle import CostModelBundle, load_bundle
from shardlab.costmodel.rowwise_comm import load_rowwise_comm
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.evaluate.model import estimate_plan, model_bound_ms
from shardlab.plan import Plan
from shardlab.search.exact import REL_GAP, TIME_LIMIT_S, Assignment, check_limits, solve, solver_name
from shardlab.search.optimal_program import Built, build, greedy_start, in_space, to_plan
from shardlab.search.registry import register_sharder
from shardlab.tables import Task


def solve_task(task: Task, bundle: Any, rowwise_comm: Any = None, columns: bool = True,
               time_limit_s: float = TIME_LIMIT_S, rel_gap: float = REL_GAP, seed: int = 0
               ) -> tuple[Built, Assignment]:
    """The program of ``task`` and its answer by size (module docstring). Raises
    :class:`InfeasibleError` when no placement in the space meets the memory caps."""
    check_limits(time_limit_s, rel_gap)
    built = build(task, bundle, rowwise_comm, columns, seed)
    p = built.program
    pairs = p.load.size
    start = greedy_start(built)
    if columns and pairs <= C.MAX_EXACT_PAIRS and any(it.alt for it in built.items):
        whole, first = solve_task(task, bundle, rowwise_comm, False, time_limit_s / 2, rel_gap, seed)
        time_limit_s /= 2                        # the table-wise optimum starts the search with halves
        start = np.full(len(built.items), -1)
        at = {it.table: k for k, it in enumerate(built.items) if it.alt == 0}
        for it, d in zip(whole.items, first.device):
            start[at[it.table]] = d
    answer: Assignment | None
    if pairs <= C.MAX_EXACT_PAIRS:
        answer = solve(p, time_limit_s, rel_gap, seed, start=start)
    elif start is None:
        answer = None
    elif pairs <= C.MAX_RELAXED_PAIRS:
        answer = solve(p, time_limit_s, rel_gap, seed, start=start, relax=True)
    else:
        cost = p.cost(start)
        bound = min(p.floor_ms, cost)
        answer = Assignment(tuple(int(d) for d in start), cost, bound, (cost - bound) / cost if cost > 0 else 0.0,
                            "averaged", 0.0, float(rel_gap))
    if answer is None:
        raise InfeasibleError(f"task '{task.name}': the exact planner found no plan within field 'mem_cap_gb' "
                              f"= {task.mem_cap_gb:g} GB ({built.space})", None, 0.0)
    return built, answer


@dataclass
class OptimalSharder:
    """The exact planner (module docstring). ``model``: a cost-model bundle, or the name or
    manifest of one shipped for ``profile`` (default ``analytic``: the program is exact);
    ``time_limit_s`` (s) and ``rel_gap`` bound the solve; ``columns``: allow column halves;
    ``rowwise_comm``: the row-wise comm model of the fixed row blocks (as the model evaluator's)."""

    name: str = "optimal"
    model: str | CostModelBundle = "analytic"
    profile: str = C.PLAN_PROFILE
    time_limit_s: float = TIME_LIMIT_S
    rel_gap: float = REL_GAP
    columns: bool = True
    rowwise_comm: Any = "shipped"
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
        built, answer = solve_task(task, bundle, rowwise, self.columns, self.time_limit_s, self.rel_gap, seed)
        plan = to_plan(task, built, answer.device, self.name, seed)
        model_cost = estimate_plan(task, plan, bundle, lower_bound=False, rowwise_comm=rowwise).cost_ms
        if built.exact and abs(model_cost - answer.cost) > 1e-6 * max(1.0, abs(model_cost)):
            raise ShardlabError(f"method '{self.name}': the program's cost {answer.cost:.6g} ms differs from the "
                                f"model's {model_cost:.6g} ms on its own plan (field 'model' is not the analytic "
                                "form the program assumes)")
        record = {"model": built.label, "space": built.space, "columns": self.columns, "exact": built.exact, "cost_ms": answer.cost,
                  "bound_ms": answer.bound, "gap": answer.gap, "status": answer.status,
                  "seconds": round(answer.seconds, 3), "time_limit_s": self.time_limit_s, "rel_gap": self.rel_gap,
                  "solver": solver_name(), "pairs": int(built.program.load.size), "model_cost_ms": model_cost}
        return replace(plan, metadata={"optimality": record})


def plan_bound(task: Task, plan: Plan, optimality: dict[str, Any], bundle: Any, rowwise_comm: Any = None
               ) -> tuple[float | None, str]:
    """The bound (ms) to quote beside ``plan`` and what it rests on: the exact planner's
    (``optimality`` of its plan's metadata) when ``plan`` lies in its space and the program was
    exact, else the model's floor over every plan (None where the model has none)."""
    if optimality.get("exact") and in_space(task, plan, columns=bool(optimality.get("columns"))):
        return float(optimality["bound_ms"]), f"exact planner's bound ({optimality['status']}) under {optimality['model']}"
    floor = model_bound_ms(task, bundle, rowwise_comm)
    return floor, f"the model's floor over every plan under {bundle.source}"


register_sharder("optimal", OptimalSharder)
