"""Compute profiler: forward and backward time of ONE fused fbgemm TBE op holding a multiset
of (sub)tables (``SplitTableBatchedEmbeddingBagsCodegen``), on CUDA when the profile says so,
else on CPU with fbgemm-gpu-cpu (ALGORITHMS.md sections 1 and 7).

Each table's lookups come from :func:`shardlab.data.lookups.table_lookups` at the profile's
batch size: regenerated from its own generator, from a generator fitted to its reuse bins and
pooling factor (:mod:`shardlab.data.fit_lookups`), or replayed from its real trace;
``profile.input_batches`` distinct batches are rotated through the runs so that caches do not
flatter the result. After ``warmup`` untimed runs, ``repeats`` runs are timed with
``time.perf_counter`` after synchronisation; the cost is the median, and the spread
(25th/75th percentile, min, max) is recorded. The backward pass includes TBE's fused
optimizer update, as in training.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np
import torch

from shardlab import constants as C
from shardlab.data.lookups import table_lookups
from shardlab.errors import ShardlabError
from shardlab.profile.hardware import HardwareProfile, get_profile
from shardlab.profile.records import ComputeRecord, spread_ms
from shardlab.tables import Table

#: Refuse to allocate more than this for one fused op on CPU (GB); the machine has 24.
DEFAULT_MAX_GB = 8.0


@contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def build_tbe(tables: Sequence[Table], profile: HardwareProfile, device: torch.device) -> torch.nn.Module:
    """The fused TBE op for ``tables`` (rows x dim each) under the profile's optimizer and
    weight precision, on ``device``."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)

    on_cuda = device.type == "cuda"
    location = EmbeddingLocation.DEVICE if on_cuda else EmbeddingLocation.HOST
    compute = ComputeDevice.CUDA if on_cuda else ComputeDevice.CPU
    optimizer = {"exact_sgd": EmbOptimType.EXACT_SGD,
                 "exact_rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD,
                 "exact_adagrad": EmbOptimType.EXACT_ADAGRAD}[profile.optimizer]
    precision = {"fp32": SparseType.FP32, "fp16": SparseType.FP16}[profile.weights_precision]
    specs = [(t.rows, t.dim, location, compute) for t in tables]
    return SplitTableBatchedEmbeddingBagsCodegen(specs, optimizer=optimizer, weights_precision=precision,
                                                 learning_rate=0.01, pooling_mode=PoolingMode.SUM,
                                                 device=device)


def fused_inputs(tables: Sequence[Table], batch_size: int, batch_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """TBE inputs for one batch: ``indices`` int64 [N] (table after table) and ``offsets``
    int64 [len(tables) * batch_size + 1], each table's lookups from its own generator or
    trace (:func:`shardlab.data.lookups.table_lookups`)."""
    idx_parts, off_parts, base = [], [], 0
    for t in tables:
        idx, off = table_lookups(t, batch_size, batch_index)
        idx_parts.append(idx)
        off_parts.append(off[:-1] + base)
        base += idx.size
    offsets = np.concatenate(off_parts + [np.array([base], dtype=np.int64)])
    return torch.from_numpy(np.concatenate(idx_parts)), torch.from_numpy(offsets)


def measure_compute(tables: Sequence[Table], profile: str | HardwareProfile = "cpu",
                    max_gb: float = DEFAULT_MAX_GB, first_batch: int = 0,
                    inputs: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None) -> ComputeRecord:
    """Measure one fused op holding ``tables`` (module docstring). Refuses ops whose weights
    and optimizer state exceed ``max_gb`` GB, naming the largest table. The inputs are lookup
    batches ``first_batch`` .. ``first_batch + profile.input_batches - 1`` of every table (the
    same for every caller by default, so ops measured for different plans see the same lookups).
    ``inputs``: those batches made beforehand (:func:`fused_inputs` of ``tables``, on any device;
    a GPU campaign prepares them in other processes while it times), used instead."""
    profile = get_profile(profile)
    if not tables:
        raise ShardlabError("measure_compute: field 'tables' is empty")
    total = sum(t.memory_bytes(profile.weights_precision, profile.optimizer) for t in tables)
    if total > max_gb * C.GB:
        big = max(tables, key=lambda t: t.size)
        raise ShardlabError(f"measure_compute: tables need {total / C.GB:.2f} GB, over max_gb = {max_gb:g} "
                            f"(largest: table '{big.name}', {big.rows} x {big.dim})")
    device = torch.device("cuda" if profile.device == "cuda" else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ShardlabError(f"hardware profile '{profile.name}': field 'device' = 'cuda' but no GPU is visible")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if inputs is None:
        inputs = [fused_inputs(tables, profile.batch_size, k)
                  for k in range(first_batch, first_batch + profile.input_batches)]
    batches = [tuple(x.to(device) for x in batch) for batch in inputs]
    fw, bw, tot = [], [], []
    with _threads(profile.threads):
        op = build_tbe(tables, profile, device)
        grad = torch.ones(profile.batch_size, sum(t.dim for t in tables), device=device)
        for i in range(profile.warmup + profile.repeats):
            indices, offsets = batches[i % len(batches)]
            sync()
            t0 = time.perf_counter()
            out = op(indices, offsets)
            sync()
            t1 = time.perf_counter()
            out.backward(grad)
            sync()
            t2 = time.perf_counter()
            if i >= profile.warmup:
                fw.append((t1 - t0) * 1e3)
                bw.append((t2 - t1) * 1e3)
                tot.append((t2 - t0) * 1e3)
        del op
    return ComputeRecord("", tuple(tables), float(np.median(fw)), float(np.median(bw)), float(np.median(tot)),
                         profile.to_dict(), {}, spread_ms(fw), spread_ms(bw), spread_ms(tot))
