"""NeuroShard's search (docs/methods.md): no hardware in the loop, only a cost model.

Steps, each detailed in its own module:

1. **Task calibration** (``costmodel/task_calibration.py``; option ``task_calibration``, unset:
   ``constants.TASK_CALIBRATION``, on): where this machine can measure the profile's hardware,
   the task's tables are measured (each alone, a few fused groups) and the compute model is
   corrected to them; everything below costs with the corrected model.
   ``metadata["task_calibration"]``: what was measured, the fit, its error, or why nothing was.
2. **Row blocks** (``search/row_wise.py``): tables that fit no device become pinned row blocks
   in TorchRec's layouts, chosen by the model; ``rowwise_comm`` (None: a block's columns count on
   its device's all-to-all, the measured-best default, ``studies/row_wise``) costs their collectives.
3. **Table-wise greedy grid** (the placer of ``search/grid_placer.py`` over ``search/greedy_grid.py``;
   the stages' contracts are in ``search/stages.py``): for each dim-balance cap s in ``caps``
   (11 values in [1.0, 1.5]) blocks go, by descending predicted single cost, to the feasible
   device (memory fits, dim sum + dim <= s x mean; else any that fits) whose predicted compute
   is lowest after adding the block (``greedy_rule="after"``) or before (``"before"``, the
   original authors' code); ties: less memory, lower id. The cheapest simulated cap wins.
4. **Column-wise beam search** (``columns``; the proposer of ``search/column_beam.py``): from each
   of ``beam_width`` states, the top-``top_n`` blocks by size and by single cost (halves multiples
   of 4, not in ``whole``, none narrower than its table's ``min_cols`` entry) are halved and the
   grid re-run, for up to ``max_splits`` rounds; every state of a round shares one grid call.
   ``beam_costing`` (default ``constants.BEAM_COSTING``, ``"grid"``) says how candidates are
   costed: re-run through the grid, or ``"moved"`` from the parent's placement (``child_moves``).
   Then the ``beam_width`` cheapest states and the table-wise one are **polished**
   (``search/polish.py``, ``polish_moves``; 0: off): blocks moved off the straggler while the
   split guard's score drops, never worse under the search's own model.
   The **split guard** (``search/split_guard.py``, ``split_guard``, ``guard_models``) keeps a split
   plan only if every judge predicts it faster than the table-wise plan
   (``metadata["split_guard"]``).
5. **Portfolio** (``search/portfolio.py``, ``portfolio``; default ``constants.PORTFOLIO_METHODS``):
   the answer is the cheapest, under the same model, of the search's plan and every
   baseline's (``metadata["portfolio"]``: each candidate's predicted ms and the winner).

The compute model must be incremental (``embed``/``predict_sums``: a table added to a device adds
a row). A bundle with a valid range costs what lies outside it by its analytic fallback
(``costmodel/valid_range.py``; ``metadata["valid_range"]``). Where no cap and no split fits a
tight task, the search's plan is the first heuristic plan that does (``metadata["fallback"]``).
``profile`` (default ``constants.PLAN_PROFILE``) picks the shipped models (``model`` empty: the
``search_model`` of the profile's folder). Bounds: column-wise search refuses
``ngpu > constants.MAX_NEUROSHARD_GPUS`` and tables x GPUs over ``constants.MAX_NEUROSHARD_WORK``
at once, unless given a time budget (``search_budget_s``, s): then it runs the table-wise pass
whatever the size, costs each beam round's states in pieces that fit what is left (each piece
sized by the last one's seconds per state), and answers with the best plan so far
(``metadata["search_budget"]``: rounds run, seconds, whether the budget stopped it; a budgeted
search depends on the machine's speed). ``columns=false`` answers up to ``constants.MAX_SEARCH_GPUS``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardlab import constants as C
from shardlab.bounds import check_bounds
from shardlab.costmodel.bundle import CostModelBundle, load_bundle
from shardlab.costmodel.neural_base import one_torch_thread
from shardlab.costmodel.task_calibration import calibrate_to_task
from shardlab.costmodel.rowwise_comm import load_rowwise_comm
from shardlab.costmodel.valid_range import range_report
from shardlab.errors import ShardlabError, check_ranges
from shardlab.plan import Placement, Plan
from shardlab.data.hardware_profiles import FILE as PROFILE_FILE
from shardlab.data.hardware_profiles import profile_folder
from shardlab.search.blocks import Block, ShardCoster, whole_blocks
from shardlab.search.column_beam import BEAM_COSTINGS, ColumnBeam
from shardlab.search.greedy_grid import GREEDY_RULES
from shardlab.search.grid_placer import GridPlacer, fallback_state
from shardlab.search.polish import polish_cheapest, polisher_for
from shardlab.search.portfolio import choose_from_portfolio
from shardlab.search.registry import check_search_gpus, parse_method, register_sharder, sharder_for
from shardlab.search.row_wise import oversized, row_start
from shardlab.search.sharder_placer import SharderPlacer
from shardlab.search.split_guard import CostChooser, GuardChooser, guard_judges
from shardlab.search.stages import State
from shardlab.tables import Table, Task

#: The seed's 11 dim-balance caps.
DEFAULT_CAPS = tuple(float(x) for x in np.linspace(1.0, 1.5, 11))

#: Ranges of the search's other options: field -> (predicate, requirement); checked when built (the
#: numeric ones, beam_width, max_splits, top_n and host_size, are in shardlab.bounds).
OPTION_RANGES = {
    "caps": (lambda v: 1 <= len(v) <= 64 and all(isinstance(x, (int, float)) and 1.0 <= x <= 100.0 for x in v),
             "must be 1 to 64 dim-balance caps in [1, 100]"),
    "greedy_rule": (lambda v: v in GREEDY_RULES, f"must be one of {', '.join(GREEDY_RULES)}"),
    "beam_costing": (lambda v: v in BEAM_COSTINGS, f"must be one of {', '.join(BEAM_COSTINGS)}"),
    "place_with": (lambda v: isinstance(v, str) and (not v or parse_method(v)[0] != "neuroshard"),
                   "must be '' (the greedy grid) or a table-wise method spec other than neuroshard"),
    "search_budget_s": (lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                                and 0 < v <= C.MOST_SEARCH_BUDGET_S),
                        f"must be a number of seconds in (0, {C.MOST_SEARCH_BUDGET_S:g}]"),
    "portfolio": (lambda v: all(parse_method(m)[0] in C.PORTFOLIO_CANDIDATES for m in v),
                  f"must name methods of {', '.join(C.PORTFOLIO_CANDIDATES)} (options allowed; none: off)"),
}


@dataclass(frozen=True)
class Ranked:
    """One evaluated search state and its guarded ratio to the table-wise plan per judge (empty
    when the search is unguarded)."""

    state: State
    ratios: dict[str, float]


@dataclass
class NeuroShardSharder:
    """NeuroShard (module docstring) over a cost-model bundle: ``model`` names a shipped one of
    ``profile`` or a manifest path ("": the profile's default, its folder's ``search_model``)."""

    name: str = "neuroshard"
    model: str | CostModelBundle = ""
    columns: bool = True
    caps: tuple[float, ...] = DEFAULT_CAPS
    beam_width: int = 3
    max_splits: int = 10
    top_n: int = 10
    profile: str = C.PLAN_PROFILE
    split_guard: bool = True
    guard_models: tuple[str | CostModelBundle, ...] | None = None
    row_wise: bool = True
    host_size: int = C.DEFAULT_HOST_SIZE
    rowwise_comm: Any = None
    whole: tuple[str, ...] = ()
    no_rows: tuple[str, ...] = ()
    min_cols: tuple[tuple[str, int], ...] = ()
    greedy_rule: str = "after"
    place_with: str = ""
    portfolio: tuple[str, ...] = C.PORTFOLIO_METHODS
    task_calibration: bool | None = None
    search_budget_s: float | None = None
    beam_costing: str = C.BEAM_COSTING
    polish_moves: int = C.POLISH_MAX_MOVES
    child_moves: int = C.BEAM_CHILD_MOVES
    _bundle: CostModelBundle | None = field(default=None, repr=False)
    _budget_record: dict[str, Any] | None = field(default=None, repr=False)
    _task_bundle: CostModelBundle | None = field(default=None, repr=False)
    _placing: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_bounds(f"method '{self.name}'", self, "beam_width", "max_splits", "top_n", "host_size", "polish_moves",
                     "child_moves")
        check_ranges(f"method '{self.name}'", self, OPTION_RANGES)
        if self.place_with:                       # built once: an unknown method is one line now
            try:
                self._placing = sharder_for(self.place_with, self.profile)
            except ShardlabError as e:
                raise ShardlabError(f"method '{self.name}': field 'place_with' = {self.place_with!r}: {e}") from None

    def model_name(self) -> str:
        """The name or path of the cost model searched with: ``model``, or the profile's default;
        a one-line error for a profile with no shipped NeuroShard model."""
        if isinstance(self.model, CostModelBundle):
            return "search model"
        if self.model:
            return str(self.model)
        model = profile_folder(self.profile).search_model
        if model is None:
            raise ShardlabError(f"method '{self.name}': hardware profile '{self.profile}' names no search model "
                                f"(field 'search_model' of its {PROFILE_FILE}); name one with field 'model'")
        return model

    def judges(self) -> tuple[str | CostModelBundle, ...]:
        """The split guard's judges beside the search model: ``guard_models``, or the profile's."""
        if self.guard_models is not None:
            return self.guard_models
        return profile_folder(self.profile).split_guard_judges

    def bundle(self) -> CostModelBundle:
        """The cost model (loaded once); during a search, the task-calibrated one where
        calibration applied (:meth:`_calibrated`)."""
        if self._task_bundle is not None:
            return self._task_bundle
        if self._bundle is None:
            self._bundle = self.model if isinstance(self.model, CostModelBundle) else load_bundle(
                self.model_name(), self.profile)
        return self._bundle

    def coster(self) -> ShardCoster:
        """The shard coster of the bundle's compute model; a one-line :class:`ShardlabError` for a
        model without ``embed``/``predict_sums`` (the search adds tables to devices as rows)."""
        coster = ShardCoster(self.bundle().compute)
        if not coster.incremental:
            raise ShardlabError(f"method '{self.name}': field 'model' ({getattr(coster.model, 'source', 'given model')}) "
                                "has no embed/predict_sums; NeuroShard searches with an incremental compute model")
        return coster

    def rowwise_model(self) -> Any:
        """The row-wise comm model row layouts are costed with
        (:func:`~shardlab.costmodel.rowwise_comm.load_rowwise_comm`); ``"shipped"`` where the
        profile ships none: the bundle's own comm model if it costs row-wise collectives (the
        analytic GPU-cluster model does)."""
        own = self.bundle().comm if self.rowwise_comm == "shipped" else None
        return load_rowwise_comm(self.rowwise_comm, self.profile, own)

    def placer(self, coster: ShardCoster, seed: int = 0) -> GridPlacer | SharderPlacer:
        """The search's placer: the greedy grid over ``coster``'s model under this sharder's caps
        and greedy rule (``search/grid_placer.py``), or, where ``place_with`` names a table-wise
        method, that method placing each state, simulated with ``coster``'s model
        (``search/sharder_placer.py``, seeded ``seed``)."""
        if not self.place_with:
            return GridPlacer(coster, self.caps, self.greedy_rule)
        return SharderPlacer(self._placing, coster.model, seed)

    def shard(self, task: Task, seed: int = 0) -> Plan:
        """Calibrate to the task where on, search a plan and weigh it against the portfolio's
        (``search/portfolio.py``); the seed is recorded and draws the calibration's groups and
        the portfolio's random plan (a calibrated search depends on what was measured)."""
        return self.candidates(task, seed, 1)[0]

    def candidates(self, task: Task, seed: int = 0, k: int = 3) -> list[Plan]:
        """The ``k`` best distinct plans: :meth:`shard`'s first (the portfolio's choice), then
        the others this search evaluated (the table-wise plan and every beam state) by guarded
        cost ascending (the split guard, module docstring); each carries the calibration record."""
        record = self._calibrate(task, seed)
        try:
            ranked, guard, rows = self._search(task, seed)
            first = self._chosen(task, self._plan(task, ranked[0], seed, guard, rows), seed)
            if self._budget_record is not None:           # the portfolio's winner says what the budget did too
                first = replace(first, metadata={**first.metadata, "search_budget": self._budget_record})
            out: dict[tuple, Plan] = {_layout(first): first}
            for state in ranked:
                if len(out) == k:
                    break
                plan = self._plan(task, state, seed, guard, rows)
                out.setdefault(_layout(plan), plan)
        finally:
            self._task_bundle = None
        if record is None:
            return list(out.values())
        return [replace(p, metadata={**p.metadata, "task_calibration": record}) for p in out.values()]

    def _calibrate(self, task: Task, seed: int) -> dict[str, Any] | None:
        """Task calibration (``costmodel/task_calibration.py``) where ``task_calibration`` is on
        (unset: ``constants.TASK_CALIBRATION``): the corrected bundle is searched with until the
        search ends; returns the record for the plans' metadata, or None when off."""
        on = C.TASK_CALIBRATION if self.task_calibration is None else self.task_calibration
        if not on:
            return None
        self._task_bundle = None
        corrected, record = calibrate_to_task(self.bundle(), task, self.profile, seed)
        self._task_bundle = corrected if record.get("applied") else None
        return record

    def _chosen(self, task: Task, own: Plan, seed: int) -> Plan:
        """``own`` or the portfolio's plan the bundle predicts cheaper (``search/portfolio.py``)."""
        return choose_from_portfolio(task, own, self.portfolio, self.bundle(), self.profile, seed,
                                     self.rowwise_model(), self.columns, self.row_wise, self.whole,
                                     self.no_rows, self.min_cols)

    def _search(self, task: Task, seed: int = 0) -> tuple[list[Ranked], dict[str, Any], dict[str, Any]]:
        """:meth:`_search_all` on one torch thread: the search's torch calls are tiny (a head
        over a few hundred summed rows), so more threads only wait on each other -- and spin
        against any other process on the machine (100 x 8 column-wise beside two busy loops
        on this 2-core host: 21.7 s on torch's default threads, 2.2 s on one; 1.3 s quiet)."""
        with one_torch_thread():
            return self._search_all(task, seed)

    def _search_all(self, task: Task, seed: int = 0) -> tuple[list[Ranked], dict[str, Any], dict[str, Any]]:
        """Every evaluated state, cheapest guarded cost first (ties: the order evaluated, the
        table-wise plan first), what the split guard did (JSON-ready), and the row layouts
        chosen for tables that fit no device (``search/row_wise.py``; plan metadata)."""
        started = time.perf_counter()
        if self.columns and self.search_budget_s is None:
            check_column_work(task)
        coster = self.coster()
        placer = self.placer(coster, seed)
        comm = self.bundle().comm_for(task.ngpu)[0]
        blocks = whole_blocks(task)
        rows: dict[str, Any] = {}
        # sequence tables return rows, not partial sums: the row-wise comm model does not cost them
        big = [i for i in oversized(task) if task.tables[i].name not in self.no_rows and task.tables[i].pooled]
        if self.row_wise and big:
            blocks, rows, comm = row_start(task, blocks, lambda states, comms: placer.place_many(task, states, comms),
                                           comm, self.rowwise_model(), Block, self.host_size, only=big)
        else:
            task.check_feasible(column_wise=self.columns)
        best = placer.place_many(task, [blocks], comm)[0]
        evaluated = [] if best is None else [State(blocks, best[0], best[1])]
        self._budget_record = None
        if self.columns:
            judges = guard_judges(self.model_name(), self.bundle(), self.judges(), self.profile)[0] \
                if self.split_guard else None                   # polish as the guard will judge
            polisher = polisher_for(task, coster, comm, judges, evaluated[0] if evaluated else None,
                                    self.polish_moves, self.greedy_rule)
            beam = ColumnBeam(coster, self.beam_width, self.max_splits, self.top_n, self.whole, self.min_cols,
                              self.search_budget_s, started, self.beam_costing, polisher, self.child_moves)
            evaluated += beam.propose(task, blocks, best, lambda states: placer.place_many(task, states, comm))
            evaluated += polish_cheapest(task, evaluated, polisher, self.beam_width)
            self._budget_record = beam.budget_record()
        if not evaluated:                        # a tight task: a heuristic's plan, placed by the grid
            state, rows = fallback_state(task, GridPlacer(coster, self.caps, self.greedy_rule),
                                         self.bundle().comm_for(task.ngpu)[0])
            evaluated = [state]
        return (*self._guard(task, evaluated), rows)

    def _guard(self, task: Task, evaluated: list[State]) -> tuple[list[Ranked], dict[str, Any]]:
        """Rank the evaluated states (the search's chooser, ``search/stages.py``): by the split
        guard (``search/split_guard.py``) for a guarded column-wise search, else by predicted cost
        (ties: the order evaluated)."""
        if not (self.columns and self.split_guard):
            order, _ = CostChooser().rank(task, evaluated)
            return [Ranked(evaluated[k], {}) for k in order], {}
        judges, missing = guard_judges(self.model_name(), self.bundle(), self.judges(), self.profile)
        chooser = GuardChooser(judges)
        order, record = chooser.rank(task, evaluated)
        record["missing_judges"] = missing
        ratios = chooser.ratios_ or {}
        return [Ranked(evaluated[k], {n: float(r[k]) for n, r in ratios.items()}) for k in order], record

    def _plan(self, task: Task, state: Ranked, seed: int, guard: dict[str, Any], rows: dict[str, Any]) -> Plan:
        """The plan of one ranked state (:func:`state_plan`), with this search's metadata."""
        return state_plan(task, self.name, state, seed, guard, rows, self.bundle(),
                          self.rowwise_model() if rows else None, self._budget_record)


def state_plan(task: Task, name: str, state: Ranked, seed: int, guard: dict[str, Any], rows: dict[str, Any],
               bundle: CostModelBundle, rowwise_model: Any = None, budget: dict[str, Any] | None = None) -> Plan:
    """The plan of one ranked state. Column-wise plans carry the guard's record and their own
    predicted and guarded cost (ms) and number of splits in ``metadata["split_guard"]``; row-split
    tables their layouts (``rows``: ``torchrec_sharding_types``, ``row_wise``) and the row-wise
    comm model's label; a budgeted search what the budget did; and where the bundle's fallback
    costed part of the plan (devices, all-to-alls outside the models' valid range), how much
    (``metadata["valid_range"]``, :func:`~shardlab.costmodel.valid_range.range_report`)."""
    s = state.state
    placements = tuple(Placement(b.parent, b.col_offset, b.cols, b.row_offset, b.table.rows, d)
                       for b, d in zip(s.blocks, s.devices))
    metadata = {"split_guard": {**guard, "splits": s.splits, "predicted_ms": s.simulated.cost_ms,
                                "guarded_ratios": state.ratios}} if guard else {}
    metadata.update(rows)
    if budget is not None:
        metadata["search_budget"] = budget
    shards: list[list[Table]] = [[] for _ in range(task.ngpu)]
    for b, d in zip(s.blocks, s.devices):
        shards[d].append(b.table)
    outside = range_report(bundle.compute, bundle.comm_for(task.ngpu)[0], shards)
    if outside:
        metadata["valid_range"] = outside
    if rowwise_model is not None:
        metadata["row_wise_comm"] = rowwise_model.source
    return Plan(task.name, name, task.ngpu, placements, seed, metadata=metadata)


def check_column_work(task: Task) -> None:
    """The column-wise search's size bounds without a time budget (``constants.MAX_NEUROSHARD_GPUS``,
    ``constants.MAX_NEUROSHARD_WORK`` tables x GPUs): a one-line error naming the way out."""
    check_search_gpus(task, C.MAX_NEUROSHARD_GPUS, "column-wise neuroshard (without a search budget)")
    work = len(task.tables) * task.ngpu
    if work > C.MAX_NEUROSHARD_WORK:
        raise ShardlabError(f"task '{task.name}': {len(task.tables):,} tables x {task.ngpu} GPUs = {work:,} is "
                            f"over column-wise neuroshard's bound of {C.MAX_NEUROSHARD_WORK:,} (hours of "
                            "search); give it a time budget (shard --budget 60s, or search_budget_s=60) or use "
                            "neuroshard[columns=false]")


def _layout(plan: Plan) -> tuple:
    """A plan's placements as a sorted tuple (two plans with the same layout are one candidate)."""
    return tuple(sorted((p.table, p.row_offset, p.col_offset, p.cols, p.device) for p in plan.placements))


register_sharder("neuroshard", NeuroShardSharder)
