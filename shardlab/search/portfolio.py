"""A model-based search's last step: never return a plan worse, under its own cost model, than
a plan it could have made another way.

The search's own plan and the plan of every portfolio method (default
``constants.PORTFOLIO_METHODS``: the five heuristics and TorchRec's planner) are costed by one
function, :func:`~shardlab.evaluate.model.estimate_plan`, with the search's bundle (the
task-calibrated one where calibration ran) and its row-wise comm model; the cheapest is returned
(ties: the search's own plan, then the portfolio's order). A method that cannot plan the task
(infeasible, over its bounds, TorchRec not installed, or any error of its own), or whose plan
lies outside the search's space (a column split where the search makes none or a table must stay
whole, a row split where row blocks are off), is skipped, and the record says why in one line.
TorchRec's planner is skipped, said the same way, above ``constants.PORTFOLIO_TORCHREC_MAX_TABLES``
tables: there it takes longer than the whole search.

A portfolio method that takes a cost model (the exact planner, ``optimal``) and names none plans
with the search's own bundle (for a learned one, on a linearisation of it around the task, as
its record says), and keeps whole the tables the search keeps whole; then the search's model
re-costs its plan like any other. It is not in the default portfolio (it spends its time limit
on every search); name it: ``neuroshard[portfolio=[...,optimal]]``.

The returned plan's ``metadata["portfolio"]``: ``chosen`` (``"search"`` or the method that made
the plan), ``predicted_ms`` (candidate -> predicted plan ms, the search's own plan under
``"search"``), ``skipped`` (method -> one-line reason), ``source`` (the cost model's label).
The winner keeps its own metadata beside it; a baseline's plan takes the search's method name.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from shardlab import constants as C
from shardlab.errors import ShardlabError
from shardlab.evaluate.model import estimate_plan
from shardlab.plan import Plan
from shardlab.search.registry import parse_method, run_sharder, sharder_for, sharder_options
from shardlab.tables import Task

#: The name the search's own plan has among the portfolio's candidates.
OWN = "search"


def outside_space(task: Task, plan: Plan, columns: bool = True, rows: bool = True,
                  whole: Sequence[str] = (), no_rows: Sequence[str] = (),
                  min_cols: Sequence[tuple[str, int]] = ()) -> str | None:
    """Why ``plan`` lies outside the search's space, in one line, or None: a table split by
    columns where ``columns`` is off or the table is in ``whole``, a column block narrower than
    its table's ``min_cols`` entry (columns), a table split by rows where ``rows`` is off or the
    table is in ``no_rows``."""
    dims = {t.name: t for t in task.tables}
    narrowest = dict(min_cols)
    for p in plan.placements:
        t = dims[p.table]
        if p.cols != t.dim and (not columns or p.table in whole):
            return f"splits table '{p.table}' by columns, which {'field whole' if columns else 'columns=false'} forbids"
        if p.cols != t.dim and p.cols < narrowest.get(p.table, 0):
            return (f"cuts table '{p.table}' into {p.cols}-column blocks, narrower than its min_cols "
                    f"{narrowest[p.table]}")
        if p.rows != t.rows and (not rows or p.table in no_rows):
            return f"splits table '{p.table}' by rows, which {'field no_rows' if rows else 'row_wise=false'} forbids"
    return None


def choose_from_portfolio(task: Task, own: Plan, methods: Sequence[str], bundle: Any, profile: str,
                          seed: int = 0, rowwise_comm: Any = None, columns: bool = True, rows: bool = True,
                          whole: Sequence[str] = (), no_rows: Sequence[str] = (),
                          min_cols: Sequence[tuple[str, int]] = ()) -> Plan:
    """The cheapest under ``bundle`` of ``own`` and the plans of ``methods`` for ``task``
    (module docstring) that lie in the search's space (:func:`outside_space`: ``columns``,
    ``rows``, ``whole``, ``no_rows``, ``min_cols`` as the search's options); ``own`` unchanged when ``methods`` is empty."""
    if not methods:
        return own
    plans: dict[str, Plan] = {OWN: own}
    skipped: dict[str, str] = {}
    for m in methods:
        if parse_method(m)[0] in ("torchrec", "torchrec_free") and len(task.tables) > C.PORTFOLIO_TORCHREC_MAX_TABLES:
            skipped[m] = (f"{len(task.tables):,} tables: over the portfolio's bound of "
                          f"{C.PORTFOLIO_TORCHREC_MAX_TABLES} for TorchRec's planner (it would take longer than the search)")
            continue
        try:
            config = {"model": bundle} if "model" in sharder_options(m) and "model" not in parse_method(m)[1] else {}
            if "whole" in sharder_options(m) and whole:
                config["whole"] = tuple(whole)
            plan = run_sharder(sharder_for(m, profile, **config), task, seed)
            why = outside_space(task, plan, columns, rows, whole, no_rows, min_cols)
            if why is None:
                plans[m] = plan
            else:
                skipped[m] = why
        except ShardlabError as e:       # infeasible, over its bounds, or not installed: said in the record
            skipped[m] = str(e).splitlines()[0]
        except Exception as e:           # noqa: BLE001 -- a comparator's own failure must not lose the search's plan
            skipped[m] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    predicted: dict[str, float] = {}
    sources: set[str] = set()
    for name, plan in plans.items():
        ev = estimate_plan(task, plan, bundle, lower_bound=False, rowwise_comm=rowwise_comm)
        predicted[name] = float(ev.cost_ms)
        sources.add(ev.source)
    order = list(plans)
    chosen = min(order, key=lambda n: (round(predicted[n], 9), order.index(n)))
    record = {"chosen": chosen, "predicted_ms": predicted, "skipped": skipped,
              "source": getattr(bundle, "source", "given model")}
    winner = plans[chosen]
    return replace(winner, method=own.method, seed=own.seed, search_seconds=None,
                   metadata={**winner.metadata, "portfolio": record})
