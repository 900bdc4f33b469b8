"""A Criteo-1TB-sized task end to end: the 26 tables of the Criteo 1TB
DLRM (``datasets/criteo/criteo_1tb.json``, dim 128, one-hot; the largest 45.8 M rows = 23.5 GB
in fp32) on G devices, sharded by every method that can place tables larger than a device,
and every plan measured in paired rounds.

On a machine whose memory cannot hold the model, ``row_scale`` divides every table's rows and
the per-device cap by the same factor: the task keeps its shape (the same tables fit no
device, each needs the same number of row blocks) while its memory shrinks; each table's
``source`` says it was scaled, and the record carries the factor. Lookups are one-hot and
assumed Zipf(``assume_zipf``) (no public Criteo trace is shipped), said in every table.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from shardlab import constants as C
from shardlab.data.importers import tables_from_records
from shardlab.data.stats import criteo_tables
from shardlab.errors import field_error
from shardlab.evaluate import Evaluation, MeasuredEvaluator
from shardlab.plan import Plan
from shardlab.search import run_sharder, sharder_for
from shardlab.search.row_wise import oversized
from shardlab.tables import Task

#: Methods that place tables larger than one device: the heuristics (fewest equal row blocks),
#: NeuroShard (row layouts chosen by its model) and TorchRec's planner.
METHODS = ("size_greedy", "lookup_greedy", "neuroshard[columns=false]", "neuroshard", "torchrec_free")


def scaled_task(records: Sequence[Mapping[str, Any]], name: str, ngpu: int, mem_cap_gb: float, row_scale: int = 1,
                batch_size: int = C.DEFAULT_BATCH_SIZE, assume_zipf: float = C.ASSUMED_ZIPF, seed: int = 0,
                origin: str = "") -> Task:
    """A task over table records (``name``, ``rows``, ``dim``, ``pooling_factor``, optional
    ``fixed_bags``) on ``ngpu`` devices of ``mem_cap_gb`` GB, rows and cap divided by
    ``row_scale`` (module docstring); lookups assumed Zipf(``assume_zipf``). One-line errors
    name a bad field."""
    if int(row_scale) < 1:
        raise field_error("scaled task", "row_scale", row_scale, "must be an integer >= 1")
    if not mem_cap_gb > 0:
        raise field_error("scaled task", "mem_cap_gb", mem_cap_gb, "must be > 0")
    scaled = f"; rows divided by {row_scale} (this machine's memory)" if row_scale > 1 else ""
    recs = [{"name": r["name"], "rows": max(1, int(r["rows"]) // int(row_scale)), "dim": int(r["dim"]),
             "pooling_factor": float(r.get("pooling_factor", 1.0)), "fixed_bags": bool(r.get("fixed_bags", False)),
             "source": f"{origin}{scaled}; lookups assumed Zipf({assume_zipf:g})"} for r in records]
    tables = tables_from_records(recs, batch_size, assume_zipf, seed)
    suffix = f"-rows1of{row_scale}" if row_scale > 1 else ""
    return Task(f"{name}-{ngpu}x{mem_cap_gb:g}gb{suffix}", ngpu, mem_cap_gb / row_scale, tuple(tables), batch_size)


def criteo_task(ngpu: int = 8, mem_cap_gb: float = 16.0, row_scale: int = 1, batch_size: int = C.DEFAULT_BATCH_SIZE,
                assume_zipf: float = C.ASSUMED_ZIPF, seed: int = 0) -> Task:
    """The Criteo 1TB tables (one-hot) as :func:`scaled_task` (module docstring)."""
    t = criteo_tables("criteo_1tb")
    records = [{"name": n, "rows": int(r), "dim": int(d), "pooling_factor": float(p), "fixed_bags": True}
               for n, r, d, p in zip(t["name"], t["rows"], t["dim"], t["pooling_factor"])]
    return scaled_task(records, "criteo1tb", ngpu, mem_cap_gb, row_scale, batch_size, assume_zipf, seed,
                       origin=f"criteo_1tb ({t['source'].split(' ')[0]})")


def criteo_plans(task: Task, methods: Sequence[str] = METHODS, seed: int = 0,
                 profile: str = C.PLAN_PROFILE) -> dict[str, Plan | str]:
    """Each method's plan (model-based methods with the shipped models of hardware ``profile``),
    or the one-line reason it has none (e.g. TorchRec's planner found no plan within the cap)."""
    out: dict[str, Plan | str] = {}
    for m in methods:
        try:
            out[m] = run_sharder(sharder_for(m, profile), task, seed=seed)
        except Exception as e:          # recorded, not hidden: the notebook prints it
            out[m] = f"{type(e).__name__}: {e}"
    return out


def row_layouts(task: Task, plan: Plan) -> dict[str, list[int]]:
    """Per table the plan cuts into row blocks: the devices of its blocks, in row order."""
    whole = {t.name: t.rows for t in task.tables}
    out: dict[str, list[tuple[int, int]]] = {}
    for p in plan.placements:
        if p.rows != whole[p.table]:
            out.setdefault(p.table, []).append((p.row_offset, p.device))
    return {k: [d for _, d in sorted(v)] for k, v in sorted(out.items())}


def measure_criteo(task: Task, plans: Mapping[str, Plan | str], profile: str = C.MEASURE_PROFILE, rounds: int = 3,
                   seed: int = 0, progress: bool = True, reference: str | None = None) -> dict[str, Evaluation]:
    """Every plan measured in ``rounds`` paired rounds (compute of each device's fused op and
    the all-to-alls with G real ranks, row-wise traffic included), compared to ``reference``
    (a method among the plans), or by default to the best baseline of a separate selection
    sitting (:class:`~shardlab.evaluate.MeasuredEvaluator`)."""
    ready = {m: p for m, p in plans.items() if isinstance(p, Plan)}
    return MeasuredEvaluator(profile, rounds=rounds, seed=seed, lower_bound=False, progress=progress,
                             reference=reference or None).evaluate(task, ready)


def summary(task: Task, row_scale: int) -> dict[str, Any]:
    """What the task is: tables, the ones that fit no device, memory (GB, as scaled and as the
    real model would need)."""
    big = oversized(task)
    total = sum(task.table_bytes(t) for t in task.tables) / C.GB
    return {"task": task.name, "tables": len(task.tables), "ngpu": task.ngpu, "mem_cap_gb": task.mem_cap_gb,
            "row_scale": row_scale, "oversized": [task.tables[i].name for i in big], "total_gb": total,
            "unscaled_total_gb": total * row_scale, "unscaled_mem_cap_gb": task.mem_cap_gb * row_scale}
