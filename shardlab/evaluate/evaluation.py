"""The values every evaluator returns: :class:`Evaluation` (the cost of one plan, per device and,
when measured in paired rounds, per round and sitting), :class:`DeviceCost` (one device's
part) and :class:`Comparison` (a plan against the reference plan), each with its JSON form
(``docs/formats.md``, "Evaluation JSON")."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np

from shardlab import constants as C
from shardlab.errors import ShardlabError, check_fields
from shardlab.evaluate.stats import OLD_VERDICTS, VERDICTS, check_margin, read_verdict
from shardlab.data.hardware_profiles import known_profiles
from shardlab.measure.hardware import base_profile_name, sitting_spread


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
    rests on, in one line (the model and the plans it bounds), or None. ``sitting_log_sd``: the
    between-sitting spread (log-sd, dimensionless) of the hardware profile it was measured
    under, from that profile's data (``sitting_log_sd`` of its folder, or the evaluator's own
    ``sitting_sd``): what a comparison against this plan adds to the ratio's interval
    (:func:`~shardlab.evaluate.reference.compare_to_reference`); None for predictions and
    TorchRec steps (no spread added)."""

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
    sitting_log_sd: float | None = None

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
        if self.sitting_log_sd is not None or self.rounds_ms is not None:
            out["sitting_log_sd"] = self.sitting_log_sd         # null: measured, no spread known
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
        ``sittings_ms``, when present, must hold exactly the rounds of ``rounds_ms``, in order.
        A file without the field ``sitting_log_sd`` (one of earlier versions; evaluations in
        rounds now always write it, null where no spread is known) gets the spread of the
        shipped profile its ``source`` names (:func:`_spread_of_earlier_file`)."""
        owner = check_fields(d, "evaluation", "method", ("task", "method", "source", "per_device"),
                             ("task", "method", "source", "cost_ms", "lower_bound_ms", "per_device", "rounds_ms",
                              "ci95_ms", "reference", "ratio_to_reference", "ratio_ci95", "verdict",
                              "equivalence_margin", "reference_chosen", "sittings_ms", "bound_source",
                              "ratio_ci_confidence", "stopped", "sitting_log_sd"))
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
        bound, spread = d.get("lower_bound_ms"), d.get("sitting_log_sd")
        if "sitting_log_sd" not in d:
            spread = _spread_of_earlier_file(str(d["source"]))
        elif spread is not None and (isinstance(spread, bool) or not isinstance(spread, (int, float))
                                     or not 0.0 <= float(spread) < 1.0):
            raise ShardlabError(f"{owner}: field 'sitting_log_sd' = {spread!r} must be a number in [0, 1)")
        return cls(str(d["task"]), str(d["method"]), str(d["source"]),
                   tuple(DeviceCost.from_dict(x) for x in d["per_device"]),
                   None if bound is None else float(bound), rounds, pair("ci95_ms"), comparison, sittings,
                   None if d.get("bound_source") is None else str(d["bound_source"]),
                   None if spread is None else float(spread))


def _spread_of_earlier_file(source: str) -> float | None:
    """For Evaluation JSON written before evaluations recorded ``sitting_log_sd``: the spread of
    the shipped profile a ``measured:<profile>...`` source names (its folder's
    ``sitting_log_sd``), else None. Used on loading such files only; evaluators record the
    spread of the profile they measure under."""
    if not source.startswith("measured:"):
        return None
    name = source.split(":", 1)[1].split(" ")[0]
    return sitting_spread(name) if base_profile_name(name) in known_profiles() else None
