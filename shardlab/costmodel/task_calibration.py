"""Task calibration: the user's own tables, measured first. Before a search, the task's tables
are timed on the hardware the plan is for, and the bundle's compute model is corrected to them.

Entry point::

    calibrate_to_task(bundle, task, profile, seed=0, budget_s=constants.TASK_CALIBRATION_BUDGET_S,
                      groups=constants.TASK_CALIBRATION_GROUPS, measure=None)
        -> (corrected bundle, record)
    replay_calibration(bundle, task, record)       # the same fit from a plan's record; nothing timed
        -> (corrected bundle, record)

**Measured** (:mod:`shardlab.measure.task_bench`): each table alone and ``groups`` fused groups
of about ``len(tables) / ngpu`` of them (drawn from ``seed``), under the profile's light
calibration settings, at the profile's batch size; no new op after ``budget_s`` seconds.

**The fit** (:func:`fit_correction`): per output (fw, bw), ``ms = scale x predicted ms **
exponent``, by weighted least squares in log space with a Huber loss over the measured ops
(singles and groups each weigh half in all; ops predicted or measured at ~0 ms left out), the
exponent kept within ``constants.TASK_CALIBRATION_EXPONENT``. A function of the predicted shard
ms, so the corrected model stays incremental: its ``embed`` rows are the model's, and
``predict_sums`` / ``predict_head`` of summed rows are the corrected ``predict`` of the shard.
A bundle with a valid range (:mod:`shardlab.costmodel.valid_range`) keeps it: the correction is
fitted to, and applied to, the model inside the range and the analytic fallback outside it
(before the guard's envelope ratio), so the guard and its reports still work.

**Or per-table levels** (:mod:`shardlab.costmodel.table_levels`): the model's prediction of a
shard scaled by sum(measured alone) / sum(predicted alone) over its tables, per output.

**Applied or not**: each op is predicted without its own measurement (leave-one-out: the power
fit without the op; levels without a single's own measurement, a group from its tables measured
alone); the form with the lower held-out error -- the groups' median relative error where groups
were measured, else the mean of the singles' and groups' -- is applied if that error is at least
``constants.TASK_CALIBRATION_MIN_GAIN`` below the uncorrected one (ties: the power fit) and the
uncorrected one is at least ``constants.TASK_CALIBRATION_MIN_ERROR`` (below it a gain is rounding);
otherwise, and where the profile cannot be measured here (e.g. ``h100`` on a CPU-only host) or
nothing could be measured, the bundle is returned as it is and the record says why.

**The record** (JSON-ready; the search keeps it as ``metadata.task_calibration``):
``applied`` (bool), ``reason`` (only when not applied), ``profile``, ``model`` (the bundle's
source), ``task`` (name, tables, ngpu, batch_size), ``seed``, ``budget_s``, ``seconds`` (s, the
whole call), and where measured: ``timing`` (``compute_timing``, ``batch_size``, ``warmup``,
``repeats``, ``input_batches``, ``hardware``), ``stopped_by_budget``, ``skipped`` (tables too
large to measure alone), ``ops`` (each: ``kind``, ``tables`` (names), ``measured_ms``,
``predicted_ms``, ``corrected_ms``, ``heldout_ms``: [fw, bw] ms), ``fit`` (``chosen``: ``power``,
``levels`` or None; ``power``: per output ``scale`` and ``exponent``; ``levels``) and ``error``: median relative error of fw+bw ms over ``singles``,
``groups`` and ``all`` ops, ``before`` (the model as it is), ``after`` (the fit, on the ops it was
fitted to) and ``heldout`` (leave-one-out). Nothing is written to disk.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.base import IncrementalComputeModel, LinearHeadComputeModel
from shardlab.costmodel.table_levels import TaskWrapped, levelled, table_ratios
from shardlab.costmodel.valid_range import GuardedCompute, guard_compute
from shardlab.errors import ShardlabError
from shardlab.measure.hardware import TIMING_METHODS, HardwareProfile, get_profile, hardware_name
from shardlab.measure.task_bench import (Measure, MeasuredOp, TaskOp, calibration_profile, measure_ops, task_ops,
                                         unmeasurable_reason)
from shardlab.tables import Table, Task

#: Smallest ms in an error's denominator.
FLOOR_MS = 1e-6
#: Ops predicted or measured at or below this (ms) are left out of the fit.
FIT_FLOOR_MS = 0.01
#: Huber threshold of the fit, in log(ms) (0.25: ops off the line by more than ~28% count linearly).
HUBER_LOG = 0.25
#: Reweighting steps of the Huber fit.
HUBER_STEPS = 20
FORM = "ms = scale x predicted_ms ** exponent, per output (fw, bw)"
LEVELS_FORM = "ms = predicted_ms x sum(measured alone) / sum(predicted alone) over the shard's tables, per output"


# ----------------------------------------------------------------------------- the corrected model

class TaskCalibratedCompute(TaskWrapped):
    """A compute model's fw/bw ms corrected to a task's measurements: ``scale`` (2,) and
    ``exponent`` (2,) per output (module docstring); a :class:`TaskWrapped` (predicts only)."""

    label = "+task-calibrated"

    def __init__(self, model: Any, scale: Sequence[float], exponent: Sequence[float]):
        self.model = model
        self.scale = np.asarray(scale, dtype=np.float64).reshape(2)
        self.exponent = np.asarray(exponent, dtype=np.float64).reshape(2)

    def correct(self, ms: np.ndarray) -> np.ndarray:
        """(m, 2) corrected fw/bw ms of (m, 2) predicted ms (0 stays 0)."""
        p = np.maximum(np.asarray(ms, dtype=np.float64).reshape(-1, 2), 0.0)
        return self.scale * p ** self.exponent

    def predict(self, shards: Sequence[Sequence[Table]]) -> np.ndarray:
        """(n, 2) corrected fw/bw ms per shard."""
        return self.correct(self.model.predict(shards))


class TaskCalibratedIncremental(TaskCalibratedCompute):
    """:class:`TaskCalibratedCompute` of an incremental model: the model's ``embed`` rows, and
    ``predict_sums`` corrected."""

    @property
    def embed_dim(self) -> int:
        """Width of :meth:`embed`'s rows (the model's)."""
        return int(self.model.embed_dim)

    def embed(self, tables: Sequence[Table]) -> np.ndarray:
        """(n, embed_dim) the model's rows."""
        return self.model.embed(tables)

    def predict_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) corrected fw/bw ms from summed rows (m, embed_dim) and counts (m,)."""
        return self.correct(self.model.predict_sums(sums, counts))


class TaskCalibratedLinearHead(TaskCalibratedIncremental):
    """:class:`TaskCalibratedIncremental` of a model with a linear first head layer."""

    def head_rows(self, rows: np.ndarray) -> np.ndarray:
        """(n, h) the model's head rows of ``embed`` rows (n, embed_dim)."""
        return self.model.head_rows(rows)

    def predict_head(self, pre: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) corrected fw/bw ms from summed head rows (m, h) and counts (m,)."""
        return self.correct(self.model.predict_head(pre, counts))


def corrected(model: Any, scale: Sequence[float], exponent: Sequence[float]) -> Any:
    """``model`` corrected (the wrapper of its kind); a guarded model is re-guarded with both
    its model and its fallback corrected, the range and envelope ratio as they were."""
    if isinstance(model, GuardedCompute):
        return guard_compute(corrected(model.model, scale, exponent), corrected(model.fallback, scale, exponent),
                             model.valid)
    cls = (TaskCalibratedLinearHead if isinstance(model, LinearHeadComputeModel) else
           TaskCalibratedIncremental if isinstance(model, IncrementalComputeModel) else TaskCalibratedCompute)
    return cls(model, scale, exponent)


# ----------------------------------------------------------------------------- the fit

def raw_predictions(model: Any, shards: Sequence[Sequence[Table]]) -> tuple[np.ndarray, np.ndarray]:
    """(n, 2) the ms the correction applies to -- the model's inside its valid range, the
    fallback's (unscaled) outside -- and (n, 2) the factor applied after it (the guard's ratio
    outside the range, else 1)."""
    n = len(shards)
    if not isinstance(model, GuardedCompute):
        return np.asarray(model.predict(list(shards)), dtype=np.float64).reshape(n, 2), np.ones((n, 2))
    inside = model.inside(shards)
    raw, after = np.zeros((n, 2)), np.ones((n, 2))
    if inside.any():
        raw[inside] = model.model.predict([shards[i] for i in np.flatnonzero(inside)])
    if (~inside).any():
        raw[~inside] = model.fallback.predict([shards[i] for i in np.flatnonzero(~inside)])
        after[~inside] = np.asarray(model.valid.ratio, dtype=np.float64)
    return raw, after


def fit_correction(raw: np.ndarray, after: np.ndarray, measured: np.ndarray,
                   weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(scale (2,), exponent (2,))`` fitting, per output, log(measured / after) = log(scale) +
    exponent x log(raw) (all (n, 2) ms; ``weights`` (n,)) by weighted least squares with a Huber
    loss (``HUBER_LOG``, iteratively reweighted: one op timed in a noisy moment does not tilt
    the line), over the ops whose raw and measured ms are both above ``FIT_FLOOR_MS`` (a model
    predicting ~0 ms says nothing a scale could correct); the exponent clipped to
    ``constants.TASK_CALIBRATION_EXPONENT`` (1 where the raw ms do not vary) and the scale
    refitted for it. Scale 1, exponent 1 for an output with fewer than 2 ops to fit."""
    lo, hi = C.TASK_CALIBRATION_EXPONENT
    scale, exponent = np.ones(2), np.ones(2)
    for k in range(2):
        ok = (raw[:, k] > FIT_FLOOR_MS) & (measured[:, k] > FIT_FLOOR_MS)
        if ok.sum() < 2:
            continue
        x = np.log(raw[ok, k])
        y = np.log(measured[ok, k]) - np.log(after[ok, k])
        w0 = np.asarray(weights, dtype=np.float64)[ok]
        w, b, c = w0, 1.0, 0.0
        for _ in range(HUBER_STEPS):
            wn = w / w.sum()
            mx, my = wn @ x, wn @ y
            var = wn @ (x - mx) ** 2
            b = float(np.clip((wn @ ((x - mx) * (y - my))) / var, lo, hi)) if var > 1e-12 else 1.0
            c = float(wn @ (y - b * x))
            w = w0 * np.minimum(1.0, HUBER_LOG / np.maximum(np.abs(y - c - b * x), 1e-12))
        exponent[k], scale[k] = b, float(np.exp(c))
    return scale, exponent


def _apply(raw: np.ndarray, after: np.ndarray, scale: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    return after * scale * np.maximum(raw, 0.0) ** exponent


def _weights(kinds: Sequence[str]) -> np.ndarray:
    """Singles and groups weigh half each in all (all of one kind: equal weights)."""
    kinds = np.asarray(kinds)
    present = [k for k in ("table", "group") if (kinds == k).any()]
    return np.array([1.0 / ((kinds == k).sum() * len(present)) for k in kinds])


def _mre(pred: np.ndarray, meas: np.ndarray, mask: np.ndarray) -> float | None:
    """Median relative error of fw+bw ms over the masked ops (None where none)."""
    if not mask.any():
        return None
    p, m = pred[mask].sum(axis=1), meas[mask].sum(axis=1)
    return float(np.median(np.abs(p - m) / np.maximum(m, FLOOR_MS)))


def _errors(pred: np.ndarray, meas: np.ndarray, kinds: np.ndarray) -> dict[str, float | None]:
    return {"singles": _mre(pred, meas, kinds == "table"), "groups": _mre(pred, meas, kinds == "group"),
            "all": _mre(pred, meas, np.ones(len(kinds), dtype=bool))}


def _score(err: dict[str, float | None]) -> float:
    """The mean of the singles' and groups' errors (the ones present)."""
    vals = [v for k, v in err.items() if k != "all" and v is not None]
    return float(np.mean(vals))


# ----------------------------------------------------------------------------- the entry point

def model_hardware(bundle: Any) -> list[str]:
    """The distinct hardware names (sorted) the bundle's training data were measured on, from its
    provenance (``data_provenance``); empty where it records none. A model trained on another
    machine than the one calibrating it is what the calibration corrects; the record says so."""
    prov = getattr(bundle, "provenance", None) or {}
    return sorted({str(p["hardware"]) for p in prov.get("data_provenance", ()) if isinstance(p, dict)
                   and p.get("hardware")})


def calibrate_to_task(bundle: Any, task: Task, profile: str | HardwareProfile, seed: int = 0,
                      budget_s: float = C.TASK_CALIBRATION_BUDGET_S, groups: int = C.TASK_CALIBRATION_GROUPS,
                      measure: Measure | None = None) -> tuple[Any, dict[str, Any]]:
    """Measure ``task``'s tables under ``profile`` and correct ``bundle``'s compute model to them
    (module docstring); returns ``(bundle, record)``: a copy of the bundle with the corrected
    compute model where applied, else ``bundle`` itself. ``measure(tables, profile) -> (fw ms,
    bw ms)`` replaces the timing (None: fbgemm's fused op on this machine, refused with a
    not-applied record where the profile's device is absent)."""
    start = time.monotonic()
    prof = get_profile(profile)
    record: dict[str, Any] = {"applied": False, "profile": prof.name, "model": bundle.source,
                              "task": _task_fields(task), "seed": int(seed), "budget_s": float(budget_s)}

    def done(out: Any, reason: str | None = None) -> tuple[Any, dict[str, Any]]:
        if reason is not None:
            record["reason"] = reason
        record["seconds"] = round(time.monotonic() - start, 3)
        return out, record

    why = None if measure is not None else unmeasurable_reason(prof)
    if why:
        return done(bundle, why)
    cal = calibration_profile(prof)
    ops, skipped = task_ops(task, prof, seed, groups)
    measured, stopped = measure_ops(task, ops, cal, budget_s, measure)
    here = hardware_name(cal.device) if measure is None else "injected"
    record.update(timing={"compute_timing": TIMING_METHODS[cal.device] if measure is None else "injected",
                          "batch_size": cal.batch_size, "warmup": cal.warmup, "repeats": cal.repeats,
                          "input_batches": cal.input_batches, "hardware": here},
                  model_hardware=model_hardware(bundle), stopped_by_budget=stopped, skipped=skipped)
    record["same_hardware"] = record["model_hardware"] == [here]
    if len(measured) < 3:
        return done(bundle, f"only {len(measured)} op(s) measured within budget_s = {budget_s:g} s; "
                            "a fit needs 3")
    return done(*_correct(bundle, task, measured, record))


def _task_fields(task: Task) -> dict[str, Any]:
    """The record's ``task``: name, tables, ngpu, batch_size."""
    return {"name": task.name, "tables": len(task.tables), "ngpu": task.ngpu, "batch_size": task.batch_size}


def _correct(bundle: Any, task: Task, measured: Sequence[MeasuredOp],
             record: dict[str, Any]) -> tuple[Any, str | None]:
    """Fit both corrections to ``measured`` (>= 3 ops) and apply the chosen one (module
    docstring, "Applied or not"); fills ``record``; returns (bundle or its corrected copy, the
    reason where none applied)."""
    fit, form = _fit_all(bundle.compute, task, measured, record)
    if form is None:
        return bundle, (f"no correction lowered the held-out (leave-one-out) error by "
                        f"{C.TASK_CALIBRATION_MIN_GAIN:.0%} of an uncorrected error of at least "
                        f"{C.TASK_CALIBRATION_MIN_ERROR:.1%}")
    out = copy.copy(bundle)                                # comm and its per-G cache as they were
    out.compute = corrected(bundle.compute, *fit) if form == "power" else levelled(bundle.compute, fit)
    record["applied"] = True
    return out, None


def replay_calibration(bundle: Any, task: Task, record: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The correction of ``bundle`` that :func:`calibrate_to_task` would make from the
    measurements a plan's ``metadata.task_calibration`` ``record`` holds (its ``ops``:
    ``kind``, ``tables``, ``measured_ms`` [fw, bw] ms); nothing is timed. Returns ``(bundle,
    record)`` as :func:`calibrate_to_task` does, the new record naming where its measurements
    came from (``replayed_from``: the original record's model, profile and timing). With the
    record's own model it gives the model the plan's search costed with (up to the record's
    0.1 us rounding); with another, that model corrected on the same measurements. A one-line
    error for an op naming a table the task lacks."""
    at = {t.name: i for i, t in enumerate(task.tables)}
    measured = []
    for op in record.get("ops") or ():
        missing = [n for n in op["tables"] if n not in at]
        if missing:
            raise ShardlabError(f"task calibration replay: field 'ops' names table '{missing[0]}' that task "
                                f"'{task.name}' lacks")
        fw, bw = (float(x) for x in op["measured_ms"])
        measured.append(MeasuredOp(TaskOp(op["kind"], tuple(sorted(at[n] for n in op["tables"]))), fw, bw, 0.0))
    out: dict[str, Any] = {"applied": False, "profile": record.get("profile"), "model": bundle.source,
                           "task": _task_fields(task),
                           "replayed_from": {k: record.get(k) for k in ("model", "profile", "timing", "seed")}}
    if len(measured) < 3:
        out["reason"] = f"the record holds {len(measured)} measured op(s); a fit needs 3"
        return bundle, out
    corrected_bundle, why = _correct(bundle, task, measured, out)
    if why is not None:
        out["reason"] = why
    return corrected_bundle, out


def _levels(model: Any, task: Task, measured: Sequence[MeasuredOp], meas: np.ndarray,
            before: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """The per-table levels (``costmodel/table_levels.py``) of the tables measured alone, each
    op's levelled prediction, and its held-out one: a single's own measurement left out (the
    model's level), a group's from its tables measured alone (never from the group itself)."""
    singles = [j for j, m in enumerate(measured) if m.op.kind == "table"]
    tables = [task.tables[measured[j].op.indices[0]] for j in singles]
    ratios = table_ratios(tables, meas[singles], before[singles]) if singles else {}
    lev = levelled(model, ratios)
    shards = [[task.tables[i] for i in m.op.indices] for m in measured]
    fitted = before * lev.level(np.stack([lev.extra(s).sum(axis=0) for s in shards]))
    heldout = fitted.copy()
    heldout[singles] = before[singles]
    return ratios, fitted, heldout


def _fit_all(model: Any, task: Task, measured: Sequence[MeasuredOp],
             record: dict[str, Any]) -> tuple[Any, str | None]:
    """Both corrections on every measured op, their leave-one-out predictions, and the record's
    ``ops``, ``fit`` and ``error``; returns the chosen correction's parameters and form
    (``"power"`` or ``"levels"``), or None where neither lowers the held-out error enough.
    The criterion is the groups' held-out error where groups were measured (shards are what
    a plan is made of), else the mean of singles' and groups'; ties go to ``power``."""
    shards = [[task.tables[i] for i in m.op.indices] for m in measured]
    kinds = np.array([m.op.kind for m in measured])
    meas = np.array([[m.fw_ms, m.bw_ms] for m in measured])
    before = np.asarray(model.predict(shards), dtype=np.float64).reshape(len(shards), 2)
    raw, after = raw_predictions(model, shards)
    scale, exponent = fit_correction(raw, after, meas, _weights(kinds))
    fitted = _apply(raw, after, scale, exponent)
    heldout = np.zeros_like(meas)
    for i in range(len(measured)):
        keep = np.arange(len(measured)) != i
        s, e = fit_correction(raw[keep], after[keep], meas[keep], _weights(kinds[keep]))
        heldout[i] = _apply(raw[i:i + 1], after[i:i + 1], s, e)[0]
    ratios, lev_fitted, lev_heldout = _levels(model, task, measured, meas, before)
    forms = {"power": _errors(heldout, meas, kinds), "levels": _errors(lev_heldout, meas, kinds)}
    key = (lambda e: e["groups"]) if (kinds == "group").any() else _score
    base = key(_errors(before, meas, kinds))
    form = min(forms, key=lambda f: key(forms[f]))
    gained = base >= C.TASK_CALIBRATION_MIN_ERROR and key(forms[form]) < (1.0 - C.TASK_CALIBRATION_MIN_GAIN) * base
    form = form if gained else None
    if form == "levels":
        fitted, heldout = lev_fitted, lev_heldout
    err = {"before": _errors(before, meas, kinds), "after": _errors(fitted, meas, kinds),
           "heldout": _errors(heldout, meas, kinds), "heldout_by_form": forms,
           "criterion": "groups' held-out error" if (kinds == "group").any() else "mean of singles' and groups'",
           "measure": "median |predicted - measured| / measured of fw+bw ms",
           "heldout_method": "leave-one-out over the measured ops (levels: a single's own measurement left out)"}
    record["ops"] = [{"kind": m.op.kind, "tables": [task.tables[i].name for i in m.op.indices],
                      "measured_ms": _r(meas[j]), "predicted_ms": _r(before[j]), "corrected_ms": _r(fitted[j]),
                      "heldout_ms": _r(heldout[j]), "seconds": round(m.seconds, 3)} for j, m in enumerate(measured)]
    record["fit"] = {"chosen": form, "form": FORM if form != "levels" else LEVELS_FORM,
                     "power": {"weights": "singles and groups weigh half each",
                               "fw": {"scale": float(scale[0]), "exponent": float(exponent[0])},
                               "bw": {"scale": float(scale[1]), "exponent": float(exponent[1])}},
                     "levels": {"tables": len(ratios), "ratio_fw_median": _median(ratios, 0),
                                "ratio_bw_median": _median(ratios, 1)}}
    record["error"] = err
    return ((scale, exponent) if form == "power" else ratios), form


def _median(ratios: dict, k: int) -> float | None:
    return float(np.median([v[k] for v in ratios.values()])) if ratios else None


def _r(v: np.ndarray) -> list[float]:
    return [round(float(x), 4) for x in v]
