"""NeuroShard's search time, plan quality and memory as the task grows.

One *point* is one search on one task of N tables over G GPUs: :func:`scaling_task` draws the
task, :func:`time_search` runs the search and reports wall time (s), the plan's cost simulated
by the search's own model (ms; a simulation, labelled so), the splits kept, and the process's
resident memory before the search and at its peak (MB). Run each point in a fresh process
(``studies/search_scaling/run.py`` does) so that the peak belongs to that search alone.
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any

from shardlab.data.hardware_profiles import profile_folder
from shardlab.costmodel.bundle import load_bundle
from shardlab.data.tasks import Augmentation, augment_tables, generate_task, pool_tables
from shardlab.evaluate import estimate_plan
from shardlab.measure.hardware import get_profile
from shardlab.search.neuroshard import NeuroShardSharder
from shardlab.tables import Task

#: Tables from this pool (all of it: search sees no measurements, so no split is held out).
POOL = "dlrm-synth"
#: Dims of NeuroShard's augmentation when the pool has fewer tables than a task needs.
AUGMENT_DIMS = (16, 32, 64, 128)


def scaling_task(ntables: int, ngpu: int, mem_cap_gb: float = 16.0, seed: int = 0) -> tuple[Task, str]:
    """A task of ``ntables`` distinct tables over ``ngpu`` devices (``mem_cap_gb`` GB each) at
    the ``cpu`` profile's batch, and how its tables were drawn: from the pool (each at a
    random seed dim), or -- when the pool is too small -- from the pool's copies at each of
    :data:`AUGMENT_DIMS` that fit one device (NeuroShard's augmentation: a copy keeps its
    lookups), said so."""
    batch = get_profile("cpu").batch_size
    pool = pool_tables(POOL, "all")
    if ntables <= len(pool):
        return (generate_task(POOL, ntables, ngpu, mem_cap_gb, batch, seed, split="all",
                              name=f"scale-{ntables}x{ngpu}"), f"{POOL} pool ({len(pool)} tables)")
    probe = Task("probe", ngpu, mem_cap_gb, (pool[0],), batch)
    copies = [t for t in augment_tables(pool, Augmentation(dims=AUGMENT_DIMS))
              if probe.block_bytes(t.rows, t.dim) <= probe.mem_cap_bytes]
    task = generate_task(POOL, ntables, ngpu, mem_cap_gb, batch, seed, dims=None, tables=copies,
                         name=f"scale-{ntables}x{ngpu}")
    return task, (f"augmented: {POOL} pool ({len(pool)} tables) copied at dims {list(AUGMENT_DIMS)} "
                  f"({len(copies)} copies fit one device), {ntables} drawn")


def _status_mb(field: str) -> float | None:
    """A memory field of /proc/self/status (MB; Linux), or None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_mb() -> float:
    """The process's resident memory now (MB; Linux), or its peak where /proc is missing."""
    now = _status_mb("VmRSS")
    return peak_rss_mb() if now is None else now


def peak_rss_mb() -> float:
    """The process's peak resident memory so far (MB): the kernel's high-water mark (VmHWM,
    read with VmRSS from the same file so the two agree), else getrusage's (updated lazily)."""
    hwm = _status_mb("VmHWM")
    if hwm is not None:
        return hwm
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def time_search(ntables: int, ngpu: int, column_wise: bool, model: str = profile_folder("cpu").search_model,
                mem_cap_gb: float = 16.0, seed: int = 0) -> dict[str, Any]:
    """One point (module docstring): search time (s, the model already loaded), the plan's
    simulated cost under ``model`` (ms), splits, RSS before and at peak (MB), and how far the
    plan's largest per-device dim sum lies from the mean its neural comm model was trained on
    (``comm_trained_mean_dims``; None for the analytic comm model, which has no such range) and
    what of the plan's cost the search's labelled analytic fallback gave (``valid_range``: the
    plan's metadata, ``{}`` when everything was inside the model's valid range)."""
    task, tables = scaling_task(ntables, ngpu, mem_cap_gb, seed)
    bundle = load_bundle(model)
    sharder = NeuroShardSharder(model=bundle, columns=column_wise)
    before = rss_mb()
    t0 = time.perf_counter()
    plan = sharder.shard(task)
    seconds = time.perf_counter() - t0
    peak = peak_rss_mb()
    simulated = estimate_plan(task, plan, bundle, lower_bound=False).cost_ms
    dims = {t.name: t.dim for t in task.tables}
    splits = sum(p.cols != dims[p.table] for p in plan.placements)
    comm, label = bundle.comm_for(ngpu)
    trained = getattr(comm, "scales_", {}).get(ngpu, {}).get("dim")
    device_dims = [0] * ngpu
    for p in plan.placements:
        device_dims[p.device] += p.cols
    return {"tables": ntables, "gpus": ngpu, "search": "column-wise" if column_wise else "table-wise",
            "batched": True, "search_s": seconds, "simulated_ms": simulated, "column_blocks": splits,
            "rss_before_mb": before, "peak_rss_mb": peak, "table_source": tables, "model": model,
            "comm_model": type(comm).__name__ + label, "max_device_dims": max(device_dims),
            "comm_trained_mean_dims": trained, "valid_range": plan.metadata.get("valid_range", {}),
            "mem_cap_gb": mem_cap_gb, "seed": seed}
