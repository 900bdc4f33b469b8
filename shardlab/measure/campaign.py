"""Campaigns that collect NeuroShard's pre-training data into a crash-safe store
(:class:`~shardlab.measure.store.SampleStore`).

**Compute campaign**: sample i draws (from ``seed`` and i alone) a random multiset of 1..max_tables
pool tables, each at a random dim of {4, ..., 128} (NeuroShard's dim augmentation), whose
memory fits ``mem_cap_gb``; measures its fused op; commits it under the key
``compute:<profile>:<pool>:<split>:s<seed>:<i>``. Workers run in parallel (spawned processes);
the parent alone writes to the store, each sample in its own transaction, so a ``kill -9``
loses at most the samples in flight, and a rerun skips the keys already stored.

**Comm campaign** (:func:`comm_sample_spec`): sample i of world size G draws T random dims,
assigns them to ranks with NeuroShard's randomised dim-greedy and draws a forward delay per rank;
kind ``comm:<G>``.

**Row-wise comm campaign**: all-to-alls *with* row-wise traffic, measured between G real ranks,
for a model of row-wise comm to learn. Sample i of world size G is a comm campaign sample plus
a row-wise pattern drawn from its own stream (``[seed, G, i, 0x2C0]``): 1-3 tables split by rows
over all ranks, each of a dim from the seeds' set and a mean pooling in [1, 20]; every rank
sends its batch slice's lookups of them (b x pooling indices per table) to the owners, spread by
Dirichlet(1) weights (skewed owners: rows are not equally hot). Committed as kind
``rowcomm:<G>``, key ``rowcomm:<G>:<profile>:s<seed>:<i>``; resumable like the other campaigns.
The **wide** space (``space="wide"``, keys ``rowcomm:<G>:<profile>:wide:s<seed>:<i>``, stream
``[seed, G, i, 0x2C1]``) reaches real plans' traffic and gives the model a contrast within one
sitting: a quarter of its samples have no row-wise traffic at all (the all-to-all alone), a
quarter only the index all-to-all (tables split by rows over some devices: their partial sums
travel in the all-to-all), half both; 1-12 row-split tables, mean pooling log-uniform in [1, 60].
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import time
from contextlib import ExitStack
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.data.tasks import pool_tables
from shardlab.errors import ShardlabError, field_error
from shardlab.processes import ignore_sigint, sigint_ignored
from shardlab.measure.comm import CommBench, randomized_dim_assignment
from shardlab.measure.compute import measure_compute, run_jobs_prefetched
from shardlab.measure.hardware import HardwareProfile, environment, get_profile, measurable_profile
from shardlab.measure.records import single_key
from shardlab.measure.rowwise_comm import RowWise
from shardlab.measure.store import SampleStore
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
    the lookup batches ahead (:func:`~shardlab.measure.compute.run_jobs_prefetched`). ``deadline``
    (``time.monotonic()`` seconds): take no new job after it (results in flight are kept).
    ``jobs`` may be a generator (drawn as they are taken; ``total``: how many, for the bar)."""
    total = len(jobs) if total is None and hasattr(jobs, "__len__") else total
    it = iter(jobs)
    first = next(it, None)
    if first is None:
        return 0
    jobs = itertools.chain([first], it)
    if first[2]["device"] == "cuda":
        return run_jobs_prefetched(store, kind, ((k, t) for k, t, _ in jobs), HardwareProfile(**first[2]),
                                   provenance, workers, desc, progress, deadline, on_sample=on_sample, total=total)
    added = 0
    bar = tqdm(total=total, desc=desc, disable=not progress)
    if workers == 1:
        results = map(_measure, jobs)
        pool_ctx = None
    else:
        with sigint_ignored():
            pool_ctx = mp.get_context("spawn").Pool(workers, initializer=ignore_sigint)
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


def run_compute_campaign(store_path: str, n_samples: int, profile: str | HardwareProfile = C.MEASURE_PROFILE,
                         pool: str = C.DEFAULT_POOL, split: str = "train", max_tables: int = C.SAMPLE_MAX_TABLES,
                         mem_cap_gb: float = C.SAMPLE_MEM_GB, workers: int = 1, seed: int = 0,
                         progress: bool = True,
                         on_sample: Callable[[str, dict[str, Any]], None] | None = None,
                         deadline: float | None = None) -> int:
    """Measure the samples 0..n_samples-1 not yet in the store at ``store_path``; returns how
    many were added. ``workers`` processes measure in parallel (1 = in this process; on a CUDA
    profile they make lookup batches for the one GPU instead); ``deadline``: see :func:`run_jobs`."""
    prof = measurable_profile(profile)
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
        todo = [i for i in range(n_samples) if f"{prefix}{i}" not in done]

        def jobs() -> Iterator[tuple[str, list[dict[str, Any]], dict[str, Any]]]:
            for i in todo:        # drawn as they are taken, under the progress bar
                if deadline is not None and time.monotonic() > deadline:    # drawing jobs can be slow too
                    return
                chosen = compute_sample_tables(tables, i, seed, max_tables, mem, prof.weights_precision,
                                               prof.optimizer)
                yield f"{prefix}{i}", [t.to_dict() for t in chosen], prof.to_dict()

        added = run_jobs(store, "compute", jobs(), provenance, workers, f"compute samples ({prof.name})",
                         progress, on_sample, deadline, total=len(todo))
    return added


def run_single_table_costs(store_path: str, profile: str | HardwareProfile = C.MEASURE_PROFILE, workers: int = 1,
                           max_samples: int | None = None, progress: bool = True,
                           deadline: float | None = None) -> int:
    """Measure, alone, every (table, dim) that appears in the store's compute samples of
    ``profile`` (the first ``max_samples`` of them by key order, or all) and is not measured
    yet (kind ``"single"``); returns how many were added. These are the "sum of single-table
    costs" the seeds compare fused costs against; resumable like the campaigns."""
    prof = measurable_profile(profile)
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
                     max_delay_ms: float = C.COMM_DELAY_MS) -> dict[str, Any]:
    """Sample ``index`` of a comm campaign: T random dims, assigned to ranks by the randomised
    dim-greedy (p drawn per sample), and a random forward delay per rank, uniform in
    [0, max_delay_ms] ms. Deterministic in (world_size, index, seed)."""
    rng = np.random.default_rng([seed, world_size, index, 0xC3])
    n = int(rng.integers(world_size, max_tables_per_rank * world_size + 1))
    dims = [int(d) for d in rng.choice(C.SEED_DIMS, size=n)]
    dim_sums, p = randomized_dim_assignment(dims, world_size, rng)
    delays = [float(x) for x in rng.uniform(0.0, max_delay_ms, size=world_size)]
    return {"dims": dims, "dim_sums": list(dim_sums), "p": float(p), "delays_ms": delays}


def run_comm_campaign(store_path: str, n_samples: int, world_size: int,
                      profile: str | HardwareProfile = C.MEASURE_PROFILE, seed: int = 0, max_delay_ms: float = C.COMM_DELAY_MS,
                      progress: bool = True, bench: Any | None = None, deadline: float | None = None) -> int:
    """Measure comm samples 0..n_samples-1 for ``world_size`` real ranks (one bench, reused)
    that are not yet in the store (kind ``comm:<G>``); returns how many were added; no sample is
    started after ``deadline`` (``time.monotonic()``; spawned ranks only). The
    profile's batch size, backend, repeats and warm-ups apply. Callers that are scripts need a
    ``if __name__ == "__main__":`` guard (ranks are spawned).

    ``bench``: a :class:`~shardlab.measure.group_bench.GroupBench` when the ranks were started by
    torchrun (``python -m shardlab.dist measure-comm``): every rank then calls this function,
    rank 0 alone opens the store and tells the others which samples are missing, and the
    launcher (world, local world, nodes) joins each sample's provenance."""
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
    spawned = CommBench.for_profile(world_size, prof) if bench is None else None   # checked before the store opens
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
            bench = stack.enter_context(spawned)
        for i in tqdm(todo, desc=f"comm samples G={world_size} ({prof.name})", disable=not progress or not lead):
            if deadline is not None and spawned is not None and time.monotonic() > deadline:
                break
            spec = comm_sample_spec(world_size, i, seed, max_delay_ms=max_delay_ms)
            sample = bench.measure(spec["dim_sums"], spec["delays_ms"], repeats=prof.repeats, warmup=prof.warmup)
            if lead:
                added += store.add(kind, f"{prefix}{i}", {**sample.payload(), **spec}, provenance)
    return added


#: The spaces a row-wise comm sample is drawn from (module docstring: row-wise comm campaign).
SPACES = ("narrow", "wide")


def rowwise_spec(world_size: int, index: int, seed: int, batch_size: int, space: str = "narrow") -> dict[str, Any]:
    """Sample ``index``'s comm spec with its row-wise pattern (module docstring); deterministic."""
    if space not in SPACES:
        raise field_error("row-wise comm campaign", "space", space, f"must be one of {', '.join(SPACES)}")
    spec = comm_sample_spec(world_size, index, seed)
    wide = space == "wide"
    rng = np.random.default_rng([seed, world_size, index, 0x2C1 if wide else 0x2C0])
    mode = str(rng.choice(["none", "index", "full"], p=[0.25, 0.25, 0.5])) if wide else "full"
    n = int(rng.integers(1, 13 if wide else 4))
    dims = [int(d) for d in rng.choice(C.SEED_DIMS, size=n)]
    pooling = np.exp(rng.uniform(0.0, np.log(60.0), size=n)) if wide else rng.uniform(1.0, 20.0, size=n)
    slice_ = -(-batch_size // world_size)
    per_rank = int(round(slice_ * pooling.sum()))
    counts = [[int(x) for x in np.round(per_rank * rng.dirichlet(np.ones(world_size)))] for _ in range(world_size)]
    rowwise = {"dim": int(sum(dims)) if mode == "full" else 0, "index_counts": counts if mode != "none" else []}
    return {**spec, "rowwise": rowwise, "rowwise_dims": dims, "rowwise_pooling": [float(p) for p in pooling],
            **({"rowwise_mode": mode} if wide else {})}


def run_rowwise_comm_campaign(store_path: str, n_samples: int, world_size: int,
                              profile: str | HardwareProfile = C.MEASURE_PROFILE, seed: int = 0, progress: bool = True,
                              space: str = "narrow") -> int:
    """Measure row-wise comm samples 0..n_samples-1 of ``space`` not yet in the store (kind
    ``rowcomm:<G>``); returns how many were added. Scripts calling it need a ``__main__`` guard
    (ranks are spawned)."""
    prof = get_profile(profile)
    kind = f"rowcomm:{world_size}"
    prefix = f"{kind}:{prof.name}:{'wide:' if space == 'wide' else ''}s{seed}:"
    provenance = {**environment("cuda" if prof.comm_backend == "nccl" else "cpu"), "profile": prof.to_dict(),
                  "campaign": {"kind": "rowcomm", "seed": seed, "world_size": world_size, "space": space}}
    added = 0
    spawned = CommBench.for_profile(world_size, prof)      # checked before the store opens
    with SampleStore(store_path) as store:
        done = store.keys(kind)
        todo = [i for i in range(n_samples) if f"{prefix}{i}" not in done]
        if not todo:
            return 0
        with spawned as bench:
            for i in tqdm(todo, desc=f"row-wise comm G={world_size} {space} ({prof.name})", disable=not progress):
                spec = rowwise_spec(world_size, i, seed, prof.batch_size, space)
                rw = RowWise(spec["rowwise"]["dim"], tuple(tuple(r) for r in spec["rowwise"]["index_counts"]))
                sample = bench.measure(spec["dim_sums"], spec["delays_ms"], repeats=prof.repeats,
                                       warmup=prof.warmup, rowwise=rw)
                added += store.add(kind, f"{prefix}{i}", {**sample.payload(), **spec}, provenance)
    return added
