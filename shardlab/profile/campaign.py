"""Campaigns that collect NeuroShard's pre-training data into a crash-safe store
(ALGORITHMS.md section 4).

Compute campaign: sample i draws (from ``seed`` and i alone) a random multiset of 1..max_tables
pool tables, each at a random dim of {4, ..., 128} (NeuroShard's dim augmentation), whose
memory fits ``mem_cap_gb``; measures its fused op; commits it under the key
``compute:<profile>:<pool>:<split>:s<seed>:<i>``. Workers run in parallel (spawned processes);
the parent alone writes to the store, each sample in its own transaction, so a ``kill -9``
loses at most the samples in flight, and a rerun skips the keys already stored.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import time
from typing import Any, Callable, Iterable

import numpy as np
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.data.tasks import pool_tables
from shardlab.errors import ShardlabError
from shardlab.profile.hardware import HardwareProfile, get_profile
from shardlab.profile.provenance import environment
from shardlab.profile.store import SampleStore
from shardlab.tables import Table


def compute_sample_tables(tables: tuple[Table, ...], index: int, seed: int, max_tables: int,
                          mem_bytes: int, precision: str, optimizer: str,
                          dims: tuple[int, ...] = C.SEED_DIMS) -> list[Table]:
    """The tables of sample ``index``: 1..max_tables distinct tables, each at a random dim,
    added while the op's memory (bytes) stays within ``mem_bytes``. Deterministic."""
    rng = np.random.default_rng([seed, index, 0xC0])
    want = int(rng.integers(1, max_tables + 1))
    drawn = (tables[int(i)].with_dim(int(dims[int(rng.integers(len(dims)))])) for i in rng.permutation(len(tables)))
    return take_within(drawn, want, mem_bytes, precision, optimizer)


def take_within(candidates: Iterable[Table], want: int, mem_bytes: int, precision: str,
                optimizer: str) -> list[Table]:
    """The first candidates, in order, whose memory (bytes, weights + optimizer state) keeps the
    running total within ``mem_bytes``, until ``want`` are taken or the candidates run out.
    Candidates are drawn lazily: a generator's random draws stop where the taking stops."""
    chosen: list[Table] = []
    used = 0
    for t in candidates:
        need = t.memory_bytes(precision, optimizer)
        if used + need <= mem_bytes:
            chosen.append(t)
            used += need
        if len(chosen) == want:
            break
    return chosen


def _measure(job: tuple[str, list[dict[str, Any]], dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    from shardlab.profile.compute import measure_compute

    key, tables, profile = job
    sample = measure_compute([Table.from_dict(t) for t in tables], HardwareProfile(**profile))
    return key, sample.payload()


def run_jobs(store: SampleStore, kind: str, jobs: Iterable[tuple[str, list[dict[str, Any]], dict[str, Any]]],
              provenance: dict[str, Any], workers: int, desc: str, progress: bool,
              on_sample: Callable[[str, dict[str, Any]], None] | None = None,
              deadline: float | None = None, total: int | None = None) -> int:
    """Measure ``jobs`` (key, tables as dicts, profile as dict) with ``workers`` spawned
    processes (1 = here) and commit each result as it arrives; returns how many were added.
    On a CUDA profile this process times every op on the one GPU and ``workers`` processes make
    the lookup batches ahead (:mod:`shardlab.profile.prefetch`). ``deadline``
    (``time.monotonic()`` seconds): take no new job after it (results in flight are kept).
    ``jobs`` may be a generator (drawn as they are taken; ``total``: how many, for the bar)."""
    total = len(jobs) if total is None and hasattr(jobs, "__len__") else total
    it = iter(jobs)
    first = next(it, None)
    if first is None:
        return 0
    jobs = itertools.chain([first], it)
    if first[2]["device"] == "cuda":
        from shardlab.profile.prefetch import run_jobs_prefetched

        return run_jobs_prefetched(store, kind, ((k, t) for k, t, _ in jobs), HardwareProfile(**first[2]),
                                   provenance, workers, desc, progress, deadline, on_sample=on_sample, total=total)
    added = 0
    bar = tqdm(total=total, desc=desc, disable=not progress)
    if workers == 1:
        results = map(_measure, jobs)
        pool_ctx = None
    else:
        pool_ctx = mp.get_context("spawn").Pool(workers)
        results = pool_ctx.imap_unordered(_measure, jobs)
    try:
        for key, payload in results:
            if store.add(kind, key, payload, provenance):
                added += 1
            if on_sample:
                on_sample(key, payload)
            bar.update(1)
            if deadline is not None and time.monotonic() > deadline:
                break
    finally:
        bar.close()
        if pool_ctx is not None:
            pool_ctx.terminate()
            pool_ctx.join()
    return added


def run_compute_campaign(store_path: str, n_samples: int, profile: str | HardwareProfile = "cpu",
                         pool: str = C.DEFAULT_POOL, split: str = "train", max_tables: int = 15,
                         mem_cap_gb: float = 4.0, workers: int = 1, seed: int = 0,
                         progress: bool = True,
                         on_sample: Callable[[str, dict[str, Any]], None] | None = None,
                         deadline: float | None = None) -> int:
    """Measure the samples 0..n_samples-1 not yet in the store at ``store_path``; returns how
    many were added. ``workers`` processes measure in parallel (1 = in this process; on a CUDA
    profile they make lookup batches for the one GPU instead); ``deadline``: see :func:`run_jobs`."""
    prof = get_profile(profile)
    if n_samples < 0 or workers < 1 or max_tables < 1:
        raise ShardlabError("campaign: fields 'n_samples' >= 0, 'workers' >= 1, 'max_tables' >= 1 required")
    tables = pool_tables(pool, split)
    mem = int(mem_cap_gb * C.GB)
    provenance = {**environment(prof.device), "profile": prof.to_dict(), "pool": pool, "split": split,
                  "campaign": {"kind": "compute", "seed": seed, "max_tables": max_tables,
                               "mem_cap_gb": mem_cap_gb}}
    prefix = f"compute:{prof.name}:{pool}:{split}:s{seed}:"
    added = 0
    with SampleStore(store_path) as store:
        done = store.keys("compute")
        jobs = []
        for i in range(n_samples):
            key = f"{prefix}{i}"
            if key in done:
                continue
            if deadline is not None and time.monotonic() > deadline:    # drawing jobs can be slow too
                break
            chosen = compute_sample_tables(tables, i, seed, max_tables, mem, prof.weights_precision,
                                           prof.optimizer)
            jobs.append((key, [t.to_dict() for t in chosen], prof.to_dict()))
        added = run_jobs(store, "compute", jobs, provenance, workers, f"compute samples ({prof.name})",
                          progress, on_sample, deadline)
    return added


def single_key(profile_name: str, table: dict[str, Any]) -> str:
    """Store key of one table measured alone: ``single:<profile>:<name>@d<dim>``."""
    return f"single:{profile_name}:{table['name']}@d{table['dim']}"


def singles_of(sample: dict[str, Any], singles: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The single-table samples (from ``singles``, by :func:`single_key`) of every table of a
    measured compute sample, or None when one of its tables was not measured alone."""
    keys = [single_key(sample["profile"]["name"], t) for t in sample["tables"]]
    return [singles[k] for k in keys] if all(k in singles for k in keys) else None


def run_single_table_costs(store_path: str, profile: str | HardwareProfile = "cpu", workers: int = 1,
                           max_samples: int | None = None, progress: bool = True,
                           deadline: float | None = None) -> int:
    """Measure, alone, every (table, dim) that appears in the store's compute samples of
    ``profile`` (the first ``max_samples`` of them by key order, or all) and is not measured
    yet (kind ``"single"``); returns how many were added. These are the "sum of single-table
    costs" the seeds compare fused costs against; resumable like the campaigns."""
    prof = get_profile(profile)
    if workers < 1:
        raise ShardlabError("single tables: field 'workers' >= 1 required")
    provenance = {**environment(prof.device), "profile": prof.to_dict(), "campaign": {"kind": "single"}}
    with SampleStore(store_path) as store:
        done = store.keys("single")
        todo: dict[str, dict[str, Any]] = {}
        samples = sorted((s for s in store.samples("compute") if s["profile"]["name"] == prof.name),
                         key=lambda s: _key_order(s["key"]))
        for s in samples[:max_samples]:
            for t in s["tables"]:
                key = single_key(prof.name, t)
                if key not in done:
                    todo[key] = t
        jobs = [(key, [t], prof.to_dict()) for key, t in todo.items()]
        return run_jobs(store, "single", jobs, provenance, workers, f"single tables ({prof.name})", progress,
                        deadline=deadline)


def _key_order(key: str) -> tuple[str, int]:
    head, _, index = key.rpartition(":")
    return head, int(index) if index.isdigit() else -1


def comm_sample_spec(world_size: int, index: int, seed: int, max_tables_per_rank: int = 15,
                     max_delay_ms: float = 30.0) -> dict[str, Any]:
    """Sample ``index`` of a comm campaign (ALGORITHMS.md section 4): T random dims, assigned to
    ranks by the randomised dim-greedy (p drawn per sample), and a random forward delay per
    rank, uniform in [0, max_delay_ms] ms. Deterministic in (world_size, index, seed)."""
    from shardlab.profile.comm import randomized_dim_assignment

    rng = np.random.default_rng([seed, world_size, index, 0xC3])
    n = int(rng.integers(world_size, max_tables_per_rank * world_size + 1))
    dims = [int(d) for d in rng.choice(C.SEED_DIMS, size=n)]
    dim_sums, p = randomized_dim_assignment(dims, world_size, rng)
    delays = [float(x) for x in rng.uniform(0.0, max_delay_ms, size=world_size)]
    return {"dims": dims, "dim_sums": list(dim_sums), "p": float(p), "delays_ms": delays}


def run_comm_campaign(store_path: str, n_samples: int, world_size: int,
                      profile: str | HardwareProfile = "cpu", seed: int = 0, max_delay_ms: float = 30.0,
                      progress: bool = True, bench: Any | None = None) -> int:
    """Measure comm samples 0..n_samples-1 for ``world_size`` real ranks (one bench, reused)
    that are not yet in the store (kind ``comm:<G>``); returns how many were added. The
    profile's batch size, backend, repeats and warm-ups apply. Callers that are scripts need a
    ``if __name__ == "__main__":`` guard (ranks are spawned).

    ``bench``: a :class:`~shardlab.profile.group_bench.GroupBench` when the ranks were started by
    torchrun (``python -m shardlab.dist profile-comm``): every rank then calls this function,
    rank 0 alone opens the store and tells the others which samples are missing, and the
    launcher (world, local world, nodes) joins each sample's provenance."""
    from contextlib import ExitStack

    from shardlab.profile.comm import CommBench

    prof = get_profile(profile)
    kind = f"comm:{world_size}"
    prefix = f"{kind}:{prof.name}:s{seed}:"
    device = "cuda" if prof.comm_backend == "nccl" else "cpu"
    campaign = {"kind": "comm", "seed": seed, "world_size": world_size, "max_delay_ms": max_delay_ms}
    if bench is not None:
        if bench.world_size != world_size:
            raise ShardlabError(f"comm campaign: field 'world_size' = {world_size} but the group has "
                                f"{bench.world_size} ranks")
        campaign["launcher"] = bench.launcher
    provenance = {**environment(device), "profile": prof.to_dict(), "campaign": campaign}
    lead = bench is None or bench.rank == 0
    added = 0
    with ExitStack() as stack:
        store, todo = None, None
        if lead:
            store = stack.enter_context(SampleStore(store_path))
            done = store.keys(kind)
            todo = [i for i in range(n_samples) if f"{prefix}{i}" not in done]
        if bench is not None:
            todo = bench.share(todo)
        if not todo:
            return 0
        if bench is None:
            bench = stack.enter_context(CommBench.for_profile(world_size, prof))
        for i in tqdm(todo, desc=f"comm samples G={world_size} ({prof.name})", disable=not progress or not lead):
            spec = comm_sample_spec(world_size, i, seed, max_delay_ms=max_delay_ms)
            sample = bench.measure(spec["dim_sums"], spec["delays_ms"], repeats=prof.repeats, warmup=prof.warmup)
            if lead:
                added += store.add(kind, f"{prefix}{i}", {**sample.payload(), **spec}, provenance)
    return added
