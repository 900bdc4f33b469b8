"""The evaluation stage: one protocol, :class:`Evaluator`, that turns a task's plans into
Evaluations (values with a JSON form: ``docs/formats.md``), the reference-plan comparison every
evaluator attaches, and what every evaluator needs from a plan: its devices' (sub)tables and
the data its devices exchange.

Implementations: :class:`~shardlab.evaluate.model.ModelEvaluator` (a cost model's
prediction, or the analytic model), :class:`~shardlab.evaluate.measured.MeasuredEvaluator`
(real kernels and real ranks, in paired rounds) and
:class:`~shardlab.evaluate.torchrec_step.TorchRecEvaluator` (real training steps): anything that
costs plans -- the CLI, the notebooks, the benchmark -- takes an ``Evaluator`` and never
branches on how.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Protocol, runtime_checkable

import numpy as np

from shardlab import constants as C
from shardlab.data.lookups import device_tables, lookup_origin, placed_row_block  # noqa: F401  (device_tables: re-exported)
from shardlab.errors import ShardlabError, check_fields
from shardlab.evaluate.stats import (CONFIDENCE, MIN_ROUNDS, OLD_VERDICTS, VERDICTS, check_margin, paired_ratio_ci,
                                     read_verdict, verdict)
from shardlab.plan import Plan
from shardlab.data.hardware_profiles import known_profiles
from shardlab.measure.rowwise_comm import RowWise
from shardlab.schedule import batch_rows, owner_counts
from shardlab.tables import Table, Task


@dataclass(frozen=True)
class DeviceCost:
    """One device's costs (ms) and memory (GB)."""

    device: int
    fw_compute_ms: float
    bw_compute_ms: float
    fw_comm_ms: float
    bw_comm_ms: float
    mem_gb: float

    @property
    def total_ms(self) -> float:
        """Compute plus both all-to-alls (ms)."""
        return self.fw_compute_ms + self.bw_compute_ms + self.fw_comm_ms + self.bw_comm_ms

    def to_dict(self) -> dict[str, Any]:
        """Evaluation JSON's per-device entry."""
        return {"device": self.device, "fw_compute_ms": self.fw_compute_ms, "bw_compute_ms": self.bw_compute_ms,
                "fw_comm_ms": self.fw_comm_ms, "bw_comm_ms": self.bw_comm_ms, "total_ms": self.total_ms,
                "mem_gb": self.mem_gb}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DeviceCost":
        """Inverse of :meth:`to_dict` (``total_ms`` is recomputed)."""
        check_fields(d, "per_device entry", "device", ("device", "fw_compute_ms", "bw_compute_ms", "fw_comm_ms",
                                                      "bw_comm_ms"),
                     ("device", "fw_compute_ms", "bw_compute_ms", "fw_comm_ms", "bw_comm_ms", "total_ms", "mem_gb"))
        return cls(int(d["device"]), float(d["fw_compute_ms"]), float(d["bw_compute_ms"]), float(d["fw_comm_ms"]),
                   float(d["bw_comm_ms"]), float(d.get("mem_gb", 0.0)))


@dataclass(frozen=True)
class Comparison:
    """A plan against a reference plan, from paired rounds (measured) or from one prediction.

    ``reference``: the reference plan's method; ``ratio``: median over rounds of the per-round
    ratio plan cost / reference cost (a prediction: the one ratio); ``ratio_ci95``: its 95%
    confidence interval (bootstrap over rounds, :func:`~shardlab.evaluate.stats.paired_ratio_ci`;
    None for predictions); ``verdict``: one of :data:`VERDICTS` (None for predictions, which
    carry no uncertainty); ``margin``: the equivalence margin the verdict used (dimensionless,
    0.05 = 5%: :func:`~shardlab.evaluate.stats.verdict`; None without a verdict); ``chosen``:
    how the reference was chosen (:func:`choose_reference`; e.g. ``"named"`` or ``"best
    baseline in a separate selection sitting of 3 rounds"``; None in files of earlier versions);
    ``confidence``: the interval's coverage where it is not 0.95 (a comparison measured with a
    time budget looks after every sitting, each look at 1 - 0.05 / looks:
    :mod:`~shardlab.evaluate.sequential`), else None; ``stopped``: why measuring this plan
    stopped, in a few words (with a budget only; None otherwise)."""

    reference: str
    ratio: float
    ratio_ci95: tuple[float, float] | None = None
    verdict: str | None = None
    margin: float | None = None
    chosen: str | None = None
    confidence: float | None = None
    stopped: str | None = None


@dataclass(frozen=True)
class Evaluation:
    """The cost of one plan. ``source``: ``measured:<profile>``, ``model:<name>`` or
    ``analytic:<profile>`` -- never unlabelled.

    A single evaluation: ``cost_ms`` = max over devices of ``total_ms``. Measured in R paired
    rounds (:class:`~shardlab.evaluate.measured.MeasuredEvaluator`): ``rounds_ms`` holds the
    plan cost (the straggler's total) of each round, ``cost_ms`` is their median and
    ``ci95_ms`` its 95% bootstrap confidence interval; ``per_device`` then holds each
    component's median over rounds (so the max of ``per_device`` totals can differ slightly from
    ``cost_ms``). ``comparison``: against the reference plan, when one was named.
    ``sittings_ms``: the rounds grouped by sitting when there were several (``rounds_ms`` is
    then all of them, sitting after sitting, and ``ci95_ms`` comes from the hierarchical
    bootstrap over sittings); None for one sitting. ``bound_source``: what ``lower_bound_ms``
    rests on, in one line (the model and the plans it bounds), or None."""

    task: str
    method: str
    source: str
    per_device: tuple[DeviceCost, ...]
    lower_bound_ms: float | None = None
    rounds_ms: tuple[float, ...] | None = None
    ci95_ms: tuple[float, float] | None = None
    comparison: Comparison | None = field(default=None)
    sittings_ms: tuple[tuple[float, ...], ...] | None = None
    bound_source: str | None = None

    @property
    def sittings(self) -> tuple[tuple[float, ...], ...]:
        """The plan cost per round (ms), grouped by sitting: ``sittings_ms``, or ``rounds_ms`` as
        one sitting; empty when not measured in rounds."""
        if self.sittings_ms:
            return self.sittings_ms
        return (self.rounds_ms,) if self.rounds_ms else ()

    @property
    def cost_ms(self) -> float:
        """Plan cost (ms): the median over rounds when measured in rounds, else the straggler's total."""
        if self.rounds_ms:
            return float(np.median(self.rounds_ms))
        return max(d.total_ms for d in self.per_device)

    @property
    def verdict(self) -> str | None:
        """The comparison's verdict (None without a paired comparison)."""
        return self.comparison.verdict if self.comparison else None

    def with_comparison(self, comparison: Comparison | None) -> "Evaluation":
        """A copy carrying ``comparison``."""
        return replace(self, comparison=comparison)

    def to_dict(self) -> dict[str, Any]:
        """Evaluation JSON (the optional paired-round fields only when set)."""
        out: dict[str, Any] = {"task": self.task, "method": self.method, "source": self.source,
                               "cost_ms": self.cost_ms, "lower_bound_ms": self.lower_bound_ms,
                               "per_device": [d.to_dict() for d in self.per_device]}
        if self.rounds_ms is not None:
            out["rounds_ms"] = list(self.rounds_ms)
        if self.ci95_ms is not None:
            out["ci95_ms"] = list(self.ci95_ms)
        if self.sittings_ms is not None and len(self.sittings_ms) > 1:
            out["sittings_ms"] = [list(x) for x in self.sittings_ms]
        if self.bound_source is not None:
            out["bound_source"] = self.bound_source
        c = self.comparison
        if c is not None:
            out["reference"] = c.reference
            out["ratio_to_reference"] = c.ratio
            if c.ratio_ci95 is not None:
                out["ratio_ci95"] = list(c.ratio_ci95)
            if c.verdict is not None:
                out["verdict"] = c.verdict
            if c.margin is not None:
                out["equivalence_margin"] = c.margin
            if c.chosen is not None:
                out["reference_chosen"] = c.chosen
            if c.confidence is not None:
                out["ratio_ci_confidence"] = c.confidence
            if c.stopped is not None:
                out["stopped"] = c.stopped
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Evaluation":
        """Parse Evaluation JSON (files without the paired-round fields load too); one-line
        error naming the bad field. A verdict of earlier versions (``"within noise"``: an
        interval containing 1) is read as the verdict its ``ratio_ci95`` has now under the
        default margin (``equivalent`` or ``inconclusive``), ``inconclusive`` without one.
        ``sittings_ms``, when present, must hold exactly the rounds of ``rounds_ms``, in order."""
        owner = check_fields(d, "evaluation", "method", ("task", "method", "source", "per_device"),
                             ("task", "method", "source", "cost_ms", "lower_bound_ms", "per_device", "rounds_ms",
                              "ci95_ms", "reference", "ratio_to_reference", "ratio_ci95", "verdict",
                              "equivalence_margin", "reference_chosen", "sittings_ms", "bound_source",
                              "ratio_ci_confidence", "stopped"))
        pair = lambda k: tuple(float(x) for x in d[k]) if d.get(k) is not None else None  # noqa: E731
        comparison = None
        if d.get("reference") is not None:
            said, margin = d.get("verdict"), d.get("equivalence_margin")
            margin = None if margin is None else check_margin(margin, owner)
            if said in OLD_VERDICTS:
                margin = C.EQUIVALENCE_MARGIN if margin is None else margin
                said = read_verdict(said, pair("ratio_ci95"), margin)
            elif said is not None and said not in VERDICTS:
                raise ShardlabError(f"{owner}: field 'verdict' = {said!r} must be one of {list(VERDICTS)}")
            chosen, level, stopped = d.get("reference_chosen"), d.get("ratio_ci_confidence"), d.get("stopped")
            if level is not None and (isinstance(level, bool) or not isinstance(level, (int, float))
                                      or not 0.0 < float(level) < 1.0):
                raise ShardlabError(f"{owner}: field 'ratio_ci_confidence' = {level!r} must be a number in (0, 1)")
            comparison = Comparison(str(d["reference"]), float(d["ratio_to_reference"]), pair("ratio_ci95"),
                                    said, margin, None if chosen is None else str(chosen),
                                    None if level is None else float(level), None if stopped is None else str(stopped))
        rounds = tuple(float(x) for x in d["rounds_ms"]) if d.get("rounds_ms") is not None else None
        sittings = None
        if d.get("sittings_ms") is not None:
            sittings = tuple(tuple(float(x) for x in s) for s in d["sittings_ms"])
            if rounds is None or tuple(x for s in sittings for x in s) != rounds or not all(sittings):
                raise ShardlabError(f"{owner}: field 'sittings_ms' must group exactly the rounds of 'rounds_ms', "
                                    f"in order, each sitting with at least one round")
        bound = d.get("lower_bound_ms")
        return cls(str(d["task"]), str(d["method"]), str(d["source"]),
                   tuple(DeviceCost.from_dict(x) for x in d["per_device"]),
                   None if bound is None else float(bound), rounds, pair("ci95_ms"), comparison, sittings,
                   None if d.get("bound_source") is None else str(d["bound_source"]))


@runtime_checkable
class Evaluator(Protocol):
    """Costs every plan of one task. ``evaluate`` returns method -> Evaluation in ``plans``'
    order (keys are the caller's names for the plans); each Evaluation's ``source`` says how
    its numbers were obtained, and carries a comparison against the reference plan."""

    def evaluate(self, task: Task, plans: Mapping[str, Plan]) -> dict[str, Evaluation]:
        """Evaluations of ``plans`` (a non-empty mapping name -> Plan of ``task``)."""


def costs_label(evaluator: Any) -> str:
    """What an evaluator's costs are, for a report's reader: ``"predicted for profile h100 by
    neuroshard"`` for a cost model (it has ``model``), else ``"measured on this machine under
    profile cpu"`` (the measured and TorchRec evaluators)."""
    profile = getattr(evaluator, "profile", "?")
    profile = getattr(profile, "name", profile)
    model = getattr(evaluator, "model", None)
    if model is not None:
        name = model if isinstance(model, str) else getattr(model, "source", type(model).__name__)
        return f"predicted for profile {profile} by {name}"
    return f"measured on this machine under profile {profile}"


def row_lookup_note(task: Task, plans: Mapping[str, Plan]) -> str:
    """The ``source`` note of a predicted evaluation whose plans split by rows tables with only
    the Task JSON fields: their row blocks' loads come from lookups fitted to the tables' reuse
    bins (:func:`~shardlab.data.fit_lookups.fit_table_lookups`), e.g. ``" (row-block lookups fitted
    for 1/7 tables)"``; ``""`` when there are none."""
    split = {p.table for plan in plans.values() for p in plan.placements if p.rows != task.table(p.table).rows}
    fitted = [name for name in split if lookup_origin(task.table(name)) == "none"]
    return f" (row-block lookups fitted for {len(fitted)}/{len(task.tables)} tables)" if fitted else ""


def sequence_note(task: Task) -> str:
    """The ``source`` note of a predicted evaluation of a task with sequence tables: no model
    was fitted to sequence ops, so their outputs are extrapolated (the analytic models' write
    term; a learned model's range sends their devices to its analytic fallback), e.g.
    ``" (2/7 sequence tables: outputs extrapolated from pooled ops)"``; ``""`` when none."""
    n = sum(not t.pooled for t in task.tables)
    return f" ({n}/{len(task.tables)} sequence tables: outputs extrapolated from pooled ops)" if n else ""


def check_plans(task: Task, plans: Mapping[str, Plan]) -> None:
    """One-line errors for an empty mapping or a plan of another task / device count."""
    if not plans:
        raise ShardlabError("evaluate: field 'plans' is empty")
    for name, p in plans.items():
        if p.task != task.name:
            raise ShardlabError(f"evaluate: plan '{name}': field 'task' = {p.task!r} is not the task {task.name!r}")
        if p.ngpu != task.ngpu:
            raise ShardlabError(f"evaluate: plan '{name}': field 'ngpu' = {p.ngpu} is not the task's {task.ngpu}")


#: How the reference was chosen: the words a Comparison's ``chosen`` and the reports carry
#: (:func:`choose_reference`; :data:`SELECTED` by the measured evaluators, :func:`selects_reference`).
NAMED, CHEAPEST_BASELINE, FIRST_PLAN = ("named", "cheapest baseline by these same costs",
                                        "the first plan (no baseline among the plans)")
SELECTED = f"best baseline in a separate selection sitting of {C.SELECTION_ROUNDS} rounds"


def baseline_names(methods: Mapping[str, Any]) -> list[str]:
    """The keys of ``methods`` (name -> Plan or Evaluation) whose method is a baseline
    (:data:`~shardlab.constants.BASELINE_METHODS`), in order."""
    return [k for k, v in methods.items() if v.method in C.BASELINE_METHODS]


def selects_reference(reference: str | None, baselines: list[str], rounds: int) -> bool:
    """Whether a measuring evaluator picks its reference in a separate selection sitting first:
    none named, two or more (distinct) ``baselines`` to choose among, and enough ``rounds`` for
    verdicts (:data:`~shardlab.evaluate.stats.MIN_ROUNDS`)."""
    return reference is None and len(baselines) >= 2 and int(rounds) >= MIN_ROUNDS


def resolve_reference(evaluations: Mapping[str, Evaluation], reference: str | None) -> str:
    """The name of the reference plan (:func:`choose_reference`)."""
    return choose_reference(evaluations, reference)[0]


def choose_reference(evaluations: Mapping[str, Evaluation], reference: str | None) -> tuple[str, str]:
    """The name of the reference plan and how it was chosen: ``reference`` when given (one-line
    error if it is not among the plans; :data:`NAMED`), else the best baseline -- the cheapest
    plan whose method is one of :data:`~shardlab.constants.BASELINE_METHODS`
    (:data:`CHEAPEST_BASELINE`: for a measured comparison a winner's curse, which the measured
    evaluators avoid by naming the reference they picked in a separate selection sitting) --
    else the first plan (:data:`FIRST_PLAN`)."""
    if reference is not None:
        if reference not in evaluations:
            raise ShardlabError(f"evaluate: field 'reference' = {reference!r} is not one of the plans "
                                f"({', '.join(evaluations)})")
        return reference, NAMED
    base = baseline_names(evaluations)
    if base:
        return min(base, key=lambda k: evaluations[k].cost_ms), CHEAPEST_BASELINE
    return next(iter(evaluations)), FIRST_PLAN


def sitting_spread(source: str) -> float:
    """The between-sitting log-sd (dimensionless) of the profile an Evaluation's ``source``
    names (``measured:cpu...`` -> the ``sitting_log_sd`` of profile folder ``cpu``); 0 for a
    profile without one or unknown here, TorchRec steps and predictions."""
    if not source.startswith("measured:"):
        return 0.0
    name = source.split(":", 1)[1].split(" ")[0].split("[")[0]
    known = known_profiles()
    return known[name].sitting_log_sd if name in known else 0.0


def compare_to_reference(evaluations: Mapping[str, Evaluation], reference: str | None = None,
                         seed: int = 0, margin: float = C.EQUIVALENCE_MARGIN, sitting_sd: float | None = None,
                         chosen: str | None = None, confidence: float = CONFIDENCE) -> dict[str, Evaluation]:
    """Every evaluation with its :class:`Comparison` against the reference plan
    (:func:`choose_reference`; ``chosen`` replaces its word for how, e.g. when the caller
    picked ``reference`` in a selection sitting). Evaluations measured in rounds are compared
    round by round, sitting by sitting (paired ratios, hierarchical bootstrap interval widened
    by the between-sitting log-sd ``sitting_sd`` -- None: the reference's profile's,
    :func:`sitting_spread` -- and a verdict with equivalence ``margin``, both dimensionless:
    :func:`~shardlab.evaluate.stats.paired_ratio_ci`) at ``confidence`` (0.95 unless a sequential
    look asks for more); others by the ratio of their costs alone (no interval, no verdict). Same
    order as ``evaluations``."""
    margin = check_margin(margin)
    ref_name, how = choose_reference(evaluations, reference)
    how = chosen or how
    ref = evaluations[ref_name]
    sitting_sd = sitting_spread(ref.source) if sitting_sd is None else sitting_sd
    out = {}
    for k, e in evaluations.items():
        paired = e.sittings and [len(x) for x in e.sittings] == [len(x) for x in ref.sittings]
        if paired:
            ratio, ci = paired_ratio_ci(e.sittings, ref.sittings, seed=seed, sitting_sd=sitting_sd, confidence=confidence)
            said = verdict(ci, margin)
            comp = Comparison(ref_name, ratio, ci, said, margin if said is not None else None, how,
                              None if confidence == CONFIDENCE else float(confidence))
        else:
            comp = Comparison(ref_name, e.cost_ms / ref.cost_ms if ref.cost_ms > 0 else float("nan"), chosen=how)
        out[k] = e.with_comparison(comp)
    return out


def comm_pattern(task: Task, plan: Plan, batch_size: int) -> tuple[list[float], RowWise]:
    """What ``plan``'s devices exchange per batch of ``batch_size`` samples: the per-device dim
    sums of the pooled all-to-all, and the row-wise traffic (``profile/rowwise_comm.py``).

    - A whole table or column block: its columns on its device's dim sum (as before).
    - A column range split by rows over every device (row-wise): its columns reduce-scattered
      and all-gathered (``RowWise.dim``), not in any dim sum.
    - A column range split by rows over some devices (table-row-wise within a group): each
      holder's partial sums go to every rank, the all-to-all's data movement, so its columns
      count on each holder's dim sum.
    - Every row block's owner receives its rows' lookups from every rank's batch slice
      (``RowWise.index_counts``, from the block's measured pooling factor). Whole tables' index
      traffic is not counted here (the shipped comm samples carry none).
    - A sequence table has no partial sums to reduce: each block's owner sends back the rows
      its lookups hit, so every block counts its own output width (its lookups x columns,
      :attr:`~shardlab.tables.Table.out_dim` of the block) on its owner's dim sum.
    """
    g = plan.ngpu
    dims: list[float] = [0] * g
    rw_dim = 0
    counts = [[0] * g for _ in range(g)]
    ranges: dict[tuple[str, int, int], list[Any]] = {}
    for p in plan.placements:
        ranges.setdefault((p.table, p.col_offset, p.cols), []).append(p)
    slices = batch_rows(batch_size, g)
    for (name, _, cols), blocks in ranges.items():
        t = task.table(name)
        if len(blocks) == 1 and blocks[0].rows == t.rows:
            dims[blocks[0].device] += t.out_width(cols)
            continue
        made = [placed_row_block(t, b.row_offset, b.rows, task.batch_size) for b in blocks]
        if not t.pooled:
            for b, sub in zip(blocks, made):
                dims[b.device] += sub.out_width(cols)
        elif {b.device for b in blocks} == set(range(g)) and g > 1:
            rw_dim += cols
        else:
            for b in blocks:
                dims[b.device] += cols
        owners = [(b.device, sub.pooling_factor) for b, sub in zip(blocks, made)]
        for r, row in enumerate(owner_counts(g, slices, owners)):
            counts[r] = [a + c for a, c in zip(counts[r], row)]
    index = tuple(tuple(r) for r in counts) if any(any(r) for r in counts) else ()
    return dims, RowWise(rw_dim, index)
