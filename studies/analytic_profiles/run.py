#!/usr/bin/env python
"""How far does an analytic profile (a GPU nobody measured: the H100's fit with its byte terms
scaled by HBM bandwidth, :mod:`shardlab.workflows.hardware_derive`) land from a GPU's own
measurements, and does it rank plans as they measure? Judged on the one GPU where both exist:
the H200 of the first lease (``datasets/h200-events``, CUDA events). Nothing is measured here.

Compute models compared (fw + bw ms of a fused op):

- ``h100 fit``: ``datasets/h100/models/analytic`` (host-timed H100 ops): what the lease's plans
  were searched with;
- ``h200 from spec``: that fit, byte terms x 3.35 / 4.8 (the H100's and H200's HBM TB/s, cited in
  their hardware.json): what ``shardlab hardware derive`` makes of an H200;
- ``h200 fit``: ``datasets/h200/models/analytic``, fitted to the lease's 240 fused ops. On those
  ops only its held-out tenth is scored; the broad ops (column slices, row blocks) and the plans
  are ops it was not fitted to, though 64 of its 240 ops hold tables of the pool's test split,
  which the seeds' 6 tasks are drawn from (the H100 models never trained on test-split tables;
  the two model-family tasks are unseen by every model).
- ``h100 neuroshard``: the H100's learned bundle, what NeuroShard searched with (on the plans).

Sets: ``floor ops`` (the lease's 240 fused ops; ``h200 fit`` on its test split), ``broad ops``
(205 column-slice and row-block ops) and ``plans`` (every distinct plan of the 8 lease tasks: the
slowest device's measured fw + bw, median over both sittings' judged rounds, against the model's
prediction of the same device shards). Per set: MAPE, Spearman over all, and for plans the mean
per-task Kendall tau and how often the model's cheapest plan is the measured cheapest.

    .venv/bin/python studies/analytic_profiles/run.py

writes ``results/h200_check.{json,md}``.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from shardlab.costmodel.bundle import load_bundle, plain_model  # noqa: E402
from shardlab.costmodel.metrics import errors, kendall, split_of  # noqa: E402
from shardlab.data.hardware_profiles import profile_folder  # noqa: E402
from shardlab.evaluate.measured import measurable  # noqa: E402
from shardlab.data.lookups import device_tables  # noqa: E402
from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from shardlab.measure.hardware import git_revision  # noqa: E402
from shardlab.measure.records import as_compute_records  # noqa: E402
from shardlab.measure.store import load_measured  # noqa: E402
from shardlab.tables import Task  # noqa: E402
from shardlab.workflows.hardware_derive import derived_compute  # noqa: E402
from studies.gpu_compute.lease_plans import PLANS  # noqa: E402
from studies.gpu_compute.lease_report import read_rounds  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"
SITTINGS = (ROOT / "datasets/h200-events/plan_rounds.jsonl.gz",
            ROOT / "datasets/h200-events/plans-sitting-2/plan_rounds.jsonl.gz")


def models() -> dict:
    h100 = load_bundle("analytic", "h100")
    tbps = {p: profile_folder(p).facts["hbm_tbps"] for p in ("h100", "h200")}
    return {"h100 fit": plain_model(h100.compute),
            "h200 from spec": derived_compute(h100.compute, "h200-from-spec", tbps["h100"], tbps["h200"]),
            "h200 fit": plain_model(load_bundle("analytic", "h200").compute),
            "h100 neuroshard": load_bundle("neuroshard", "h100").compute}


def op_sets() -> dict[str, list]:
    floor = as_compute_records(list(load_measured("compute", "h200-events")), "floor")
    broad = as_compute_records(list(load_measured("compute", "h200-events/broad")), "broad")
    return {"floor ops": floor, "floor ops (test split)": [r for r in floor if split_of(r.key) == "test"],
            "broad ops": broad}


def plan_rows() -> list[dict]:
    """One row per (task, distinct plan): its device shards and measured slowest-device ms."""
    rounds = [r for path in SITTINGS for r in read_rounds(path)[1] if r["sitting"] == "judged"]
    rows = []
    for e in json.loads(PLANS.read_text())["tasks"]:
        task = measurable(Task.from_dict(e["task"]))[0]
        mine = [r for r in rounds if r["task"] == task.name]
        if not mine:
            continue
        for m, p in e["plans"].items():
            if any(m in r.get("same_as", {}) for r in mine):
                continue                                  # the same plan as another method's
            per_round = [max(sum(d) for d in r["compute_ms"][m]) for r in mine if m in r["compute_ms"]]
            rows.append({"task": task.name, "method": m, "measured_ms": float(np.median(per_round)),
                         "rounds": len(per_round), "shards": device_tables(task, Plan.from_dict(p))})
    return rows


def score_ops(model, records) -> dict:
    pred = np.asarray(model.predict([r.tables for r in records])).sum(axis=1)
    return errors(pred, [r.fw_ms + r.bw_ms for r in records])


def score_plans(model, rows) -> dict:
    pred = np.array([np.asarray(model.predict(r["shards"])).sum(axis=1).max() for r in rows])
    true = np.array([r["measured_ms"] for r in rows])
    out = errors(pred, true)
    taus, top = [], []
    for task in dict.fromkeys(r["task"] for r in rows):
        idx = [i for i, r in enumerate(rows) if r["task"] == task]
        taus.append(kendall(pred[idx], true[idx]))
        top.append(float(true[idx][int(np.argmin(pred[idx]))] <= true[idx].min() * (1 + 1e-9)))
    out.update(kendall_per_task_mean=float(np.mean(taus)), best_plan_found=float(np.mean(top)), tasks=len(taus))
    return out


def main() -> None:
    ms, sets, rows = models(), op_sets(), plan_rows()
    table = {name: {**{s: score_ops(m, recs) for s, recs in sets.items() if not (name == "h200 fit" and s == "floor ops")},
                    "plans": score_plans(m, rows)} for name, m in ms.items()}
    out = {"made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git": git_revision(),
           "sets": {s: len(r) for s, r in sets.items()} | {"plans": len(rows)},
           "sources": {n: getattr(m, "source", "?") for n, m in ms.items()}, "scores": table}
    RESULTS.mkdir(exist_ok=True)
    write_json_atomic(RESULTS / "h200_check.json", out)
    lines = ["# An analytic profile against a GPU's own measurements (`studies/analytic_profiles/run.py`)", "",
             f"Made {out['made']} (git {out['git']}); nothing measured here: the H200 lease's CUDA-event ops and "
             f"plans (`datasets/h200-events`, both sittings). Sets: " +
             ", ".join(f"{s} {n}" for s, n in out["sets"].items()) + ".", "",
             "| model | set | MAPE | Spearman | per-task Kendall (plans) | cheapest plan found (plans) |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for name, per in table.items():
        for s, sc in per.items():
            extra = (f"{sc['kendall_per_task_mean']:.3f} | {sc['best_plan_found']:.2f}" if s == "plans" else "- | -")
            lines.append(f"| {name} | {s} | {sc['mape']:.3f} | {sc['spearman']:.3f} | {extra} |")
    lines += ["", "Sources: " + "; ".join(f"`{n}`: `{s}`" for n, s in out["sources"].items()) + ".", ""]
    write_text_atomic(RESULTS / "h200_check.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
