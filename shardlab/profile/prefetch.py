"""Compute campaigns on one GPU: lookup batches are made in CPU worker processes while this
process times the ops, one at a time, on the GPU.

At the seeds' batch of 65536 a fused op of 15 tables takes ~10 M indices per batch: making its
batches (:func:`~shardlab.profile.compute.fused_inputs`, numpy, ~1 s each) costs more than timing
it on an H100, so ``workers`` spawned processes make the batches of the next ``window`` jobs
ahead, in order, while the GPU times. Only this process touches the GPU, so timings are not
shared with another kernel. Each sample is committed to the store as it is measured (a crash
loses only the op in flight); a ``deadline`` (``time.monotonic()`` seconds) stops taking new jobs,
so a campaign fits a device call's time limit and resumes in the next call.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from shardlab.profile.hardware import HardwareProfile
from shardlab.profile.store import SampleStore
from shardlab.tables import Table

#: A campaign job: store key and the op's tables as Task JSON dicts.
Job = tuple[str, list[dict[str, Any]]]


def make_inputs(tables: list[dict[str, Any]], batch_size: int, input_batches: int,
                first_batch: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """The op's lookup batches ``first_batch`` .. ``+ input_batches - 1`` as numpy int64
    (indices [N], offsets [T * batch_size + 1]); runs in a worker process."""
    from shardlab.profile.compute import fused_inputs

    ops = [Table.from_dict(t) for t in tables]
    out = []
    for k in range(first_batch, first_batch + input_batches):
        idx, off = fused_inputs(ops, batch_size, k)
        out.append((idx.numpy(), off.numpy()))
    return out


def prefetched(jobs: Iterable[Job], batch_size: int, input_batches: int, workers: int,
               window: int) -> Iterator[tuple[str, list[dict[str, Any]], list[tuple[torch.Tensor, torch.Tensor]]]]:
    """``(key, tables, batches)`` for each job in order, the batches of up to ``window`` jobs
    being made ahead by ``workers`` processes (``workers`` = 0: made here, when asked for)."""
    if workers == 0:
        for key, tables in jobs:
            yield key, tables, _tensors(make_inputs(tables, batch_size, input_batches))
        return
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        ahead: deque[tuple[str, list[dict[str, Any]], Future]] = deque()
        it = iter(jobs)
        try:
            while True:
                while len(ahead) < window:
                    nxt = next(it, None)
                    if nxt is None:
                        break
                    ahead.append((nxt[0], nxt[1], pool.submit(make_inputs, nxt[1], batch_size, input_batches)))
                if not ahead:
                    return
                key, tables, fut = ahead.popleft()
                yield key, tables, _tensors(fut.result())
        finally:
            for _, _, fut in ahead:
                fut.cancel()


def _tensors(batches: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.from_numpy(i), torch.from_numpy(o)) for i, o in batches]


def run_jobs_prefetched(store: SampleStore, kind: str, jobs: Iterable[Job], profile: HardwareProfile,
                        provenance: dict[str, Any], workers: int, desc: str, progress: bool,
                        deadline: float | None = None, max_gb: float | None = None,
                        on_sample: Callable[[str, dict[str, Any]], None] | None = None,
                        total: int | None = None) -> int:
    """Measure ``jobs`` here, in order, with their batches made ahead (module docstring), and
    commit each sample as it is measured; returns how many were added. Stops taking jobs once
    ``time.monotonic()`` passes ``deadline``. ``jobs`` may be a generator (drawn only as the
    window needs them); ``total``: how many, for the progress bar."""
    from shardlab.profile.compute import DEFAULT_MAX_GB, measure_compute

    added = 0
    bar = tqdm(total=total, desc=desc, disable=not progress)
    try:
        for key, tables, batches in prefetched(jobs, profile.batch_size, profile.input_batches, workers,
                                               window=max(2, 2 * workers)):
            if deadline is not None and time.monotonic() > deadline:
                break
            sample = measure_compute([Table.from_dict(t) for t in tables], profile,
                                     max_gb=DEFAULT_MAX_GB if max_gb is None else max_gb, inputs=batches)
            payload = sample.payload()
            if store.add(kind, key, payload, provenance):
                added += 1
            if on_sample:
                on_sample(key, payload)
            bar.update(1)
    finally:
        bar.close()
    return added
