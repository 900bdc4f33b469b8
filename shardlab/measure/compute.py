"""Compute profiler: forward and backward time of ONE fused fbgemm TBE op holding a multiset
of (sub)tables (``SplitTableBatchedEmbeddingBagsCodegen``), on CUDA when the profile says so,
else on CPU with fbgemm-gpu-cpu; a device's compute cost in a plan is its fused op's time.

Each table's lookups come from :func:`shardlab.data.lookups.table_lookups` at the profile's
batch size: regenerated from its own generator, from a generator fitted to its reuse bins and
pooling factor (:mod:`shardlab.data.fit_lookups`), or replayed from its real trace;
``profile.input_batches`` distinct batches are rotated through the runs so that caches do not
flatter the result. After ``warmup`` untimed runs, ``repeats`` runs are timed; the cost is the
median (ms), and the spread (25th/75th percentile, min, max, ms) is recorded. The backward pass
includes TBE's fused optimizer update, as in training.

**Timers** (:func:`timer_for`). On CPU each pass is timed with ``time.perf_counter`` on the host
(:class:`PerfCounterTimer`). On CUDA, host clocks around ``torch.cuda.synchronize()`` would add
the host's launch and synchronisation latency (~0.5 ms on an H100) to every pass, so each pass
is timed with ``torch.cuda.Event(enable_timing=True)`` pairs recorded on the current stream
before the forward, between forward and backward, and after the backward, with one
synchronisation after each run (:class:`CudaEventTimer`): a pass's time is then what the
stream spent on it, its kernels plus any gap the host leaves between launches on an idle stream.
The method is in each record's provenance (``compute_timing``: ``"perf_counter"`` or
``"cuda_events"``) and in :func:`~shardlab.measure.hardware.environment`, which the campaigns
store with every sample.

**On one GPU** (:func:`run_jobs_prefetched`) lookup batches are made in CPU worker processes
while this process times the ops, one at a time, on the GPU. At the seeds' batch of 65536 a
fused op of 15 tables takes ~10 M indices per batch: making its batches (:func:`fused_inputs`,
numpy, ~1 s each) costs more than timing it on an H100, so ``workers`` spawned processes make
the batches of the next ``window`` jobs ahead, in order, while the GPU times. Only this process
touches the GPU, so timings are not shared with another kernel. Each sample is committed to
the store as it is measured (a crash loses only the op in flight); a ``deadline``
(``time.monotonic()`` seconds) stops taking new jobs, so a campaign fits a time limit and
resumes in the next call.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from shardlab import constants as C
from shardlab.data.lookups import table_lookups
from shardlab.errors import ShardlabError
from shardlab.processes import ignore_sigint
from shardlab.measure.hardware import TIMING_METHODS, HardwareProfile, measurable_profile
from shardlab.measure.op_cache import OpCache, op_bytes, op_key
from shardlab.measure.records import ComputeRecord, spread_ms
from shardlab.measure.store import SampleStore
from shardlab.tables import Table

#: Refuse to allocate more than this for one fused op on CPU (GB); the machine has 24.
DEFAULT_MAX_GB = 8.0

#: A campaign job: store key and the op's tables as Task JSON dicts.
Job = tuple[str, list[dict[str, Any]]]


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------- timers

class Timer(Protocol):
    """Times one run: :meth:`start` before the forward, :meth:`mark` between forward and
    backward, :meth:`stop` after the backward, which returns ``(fw_ms, bw_ms, total_ms)``."""

    method: str

    def start(self) -> None: ...

    def mark(self) -> None: ...

    def stop(self) -> tuple[float, float, float]: ...


class PerfCounterTimer:
    """Host wall clock (``time.perf_counter``), ``sync`` called before each reading (on CPU a
    no-op: the kernels have returned when the call does)."""

    method = TIMING_METHODS["cpu"]

    def __init__(self, sync: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.perf_counter):
        self.sync, self.clock = sync, clock
        self._t: list[float] = []

    def _read(self) -> None:
        self.sync()
        self._t.append(self.clock())

    def start(self) -> None:
        self._t = []
        self._read()

    def mark(self) -> None:
        self._read()

    def stop(self) -> tuple[float, float, float]:
        self._read()
        t0, t1, t2 = self._t
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t2 - t0) * 1e3


class CudaEventTimer:
    """CUDA events recorded on the current stream; one ``synchronize()`` after each run, then
    ``elapsed_time`` (ms) between the events. ``event`` makes a timing event and
    ``synchronize`` waits for the device (defaults: ``torch.cuda``'s, looked up when used, so
    the timer can be built, and tested with fakes, without a GPU)."""

    method = TIMING_METHODS["cuda"]

    def __init__(self, event: Callable[[], Any] | None = None, synchronize: Callable[[], None] | None = None):
        self.event = event or (lambda: torch.cuda.Event(enable_timing=True))
        self.synchronize = synchronize or torch.cuda.synchronize
        self._events: list[Any] = []

    def _record(self) -> None:
        e = self.event()
        e.record()
        self._events.append(e)

    def start(self) -> None:
        self._events = []
        self._record()

    def mark(self) -> None:
        self._record()

    def stop(self) -> tuple[float, float, float]:
        self._record()
        self.synchronize()
        e0, e1, e2 = self._events
        return float(e0.elapsed_time(e1)), float(e1.elapsed_time(e2)), float(e0.elapsed_time(e2))


def timer_for(device: torch.device | str) -> Timer:
    """The timer for ``device``: CUDA events on a ``cuda`` device, else ``perf_counter``."""
    return CudaEventTimer() if torch.device(device).type == "cuda" else PerfCounterTimer()


# ----------------------------------------------------------------------------- one fused op

def build_tbe(tables: Sequence[Table], profile: HardwareProfile, device: torch.device,
              pooled: bool = True) -> torch.nn.Module:
    """The fused TBE op for ``tables`` (rows x dim each) under the profile's optimizer and
    weight precision, on ``device``; ``pooled`` False: fbgemm's sequence op (no pooling: every
    looked-up row is returned, the tables of one op of one dim, as TorchRec groups them)."""
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
                                                 learning_rate=0.01,
                                                 pooling_mode=PoolingMode.SUM if pooled else PoolingMode.NONE,
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


def measure_compute(tables: Sequence[Table], profile: str | HardwareProfile = C.MEASURE_PROFILE,
                    max_gb: float = DEFAULT_MAX_GB, first_batch: int = 0,
                    inputs: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
                    ops: OpCache | None = None) -> ComputeRecord:
    """Measure one fused op holding ``tables`` (module docstring). Refuses ops whose weights
    and optimizer state exceed ``max_gb`` GB, naming the largest table. The inputs are lookup
    batches ``first_batch`` .. ``first_batch + profile.input_batches - 1`` of every table (the
    same for every caller by default, so ops measured for different plans see the same lookups).
    ``inputs``: those batches made beforehand (:func:`fused_inputs` of ``tables``, on any device;
    a GPU campaign prepares them in other processes while it times), used instead. Each pass is
    timed by :func:`timer_for` the device (ms); the record's provenance names the timer
    (``compute_timing``). Sequence tables (``pooled`` False) run as fbgemm's sequence ops, one
    per dim beside the pooled op, as TorchRec runs them; the shard's times are the ops' sums
    (provenance ``ops``). ``ops``: an :class:`OpCache` the op is taken from when it was built
    before with the same lookup batches (its weights as the earlier passes left them, as in
    training), and kept in when it fits."""
    profile = measurable_profile(profile)             # a CUDA profile with no GPU: one line
    check_op(tables, profile, max_gb)
    groups = op_groups(tables)
    if len(groups) > 1 or not groups[0][0]:
        if inputs is not None:
            raise ShardlabError("measure_compute: field 'inputs' is for one pooled op (sequence tables make their own)")
        parts = [timed_op(list(g), profile, pooled, first_batch, ops=ops) for pooled, g in groups]
        return ComputeRecord("", tuple(tables), sum(p.fw_ms for p in parts), sum(p.bw_ms for p in parts),
                             sum(p.total_ms for p in parts), profile.to_dict(),
                             {**parts[0].provenance, "ops": len(parts)}, None, None, None)
    return timed_op(list(tables), profile, True, first_batch, inputs, ops)


def check_op(tables: Sequence[Table], profile: HardwareProfile, max_gb: float = DEFAULT_MAX_GB) -> None:
    """Refuse, in one line, a shard that cannot be measured as fused ops here: no tables,
    weights and optimizer state over ``max_gb`` GB (naming the largest table), or an offloaded
    table."""
    if not tables:
        raise ShardlabError("measure_compute: field 'tables' is empty")
    total = sum(t.memory_bytes(profile.weights_precision, profile.optimizer) for t in tables)
    if total > max_gb * C.GB:
        big = max(tables, key=lambda t: t.size)
        raise ShardlabError(f"measure_compute: tables need {total / C.GB:.2f} GB, over max_gb = {max_gb:g} "
                            f"(largest: table '{big.name}', {big.rows} x {big.dim})")
    offloaded = [t for t in tables if t.offloaded]
    if offloaded:
        raise ShardlabError(f"measure_compute: table '{offloaded[0].name}' is offloaded (field 'hbm_share' = "
                            f"{offloaded[0].hbm_share:g}): fbgemm's CPU kernels have no host-memory mode (CPU "
                            "ops take EmbeddingLocation.HOST only) and its GPU mode is not measured yet; its "
                            "host-link cost is the analytic model's")


def op_groups(tables: Sequence[Table]) -> list[tuple[bool, list[Table]]]:
    """The fused ops a shard runs as: its pooled tables in one op, its sequence tables in one op
    per dim (fbgemm's sequence op returns rows of one width); (pooled, tables) each, pooled first."""
    pooled = [t for t in tables if t.pooled]
    dims = sorted({t.dim for t in tables if not t.pooled})
    return ([(True, pooled)] if pooled else []) + [(False, [t for t in tables if not t.pooled and t.dim == d])
                                                   for d in dims]


def prepared(tables: list[Table], profile: HardwareProfile, pooled: bool, first_batch: int,
              inputs: Sequence[tuple[torch.Tensor, torch.Tensor]] | None) -> tuple[Any, list, list]:
    """(op, lookup batches on the device, gradients) for one fused op of ``tables``."""
    device = torch.device("cuda" if profile.device == "cuda" else "cpu")
    if inputs is None:
        inputs = [fused_inputs(tables, profile.batch_size, k)
                  for k in range(first_batch, first_batch + profile.input_batches)]
    batches = [tuple(x.to(device) for x in batch) for batch in inputs]
    if pooled:
        grads = [torch.ones(profile.batch_size, sum(t.dim for t in tables), device=device)] * len(batches)
    else:
        grads = [torch.ones(len(idx), tables[0].dim, device=device) for idx, _ in batches]
    return build_tbe(tables, profile, device, pooled=pooled), batches, grads


def timed_pass(op: Any, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], grads: Sequence[torch.Tensor], i: int,
               timer: Timer) -> tuple[float, float, float]:
    """Pass ``i`` of ``op``: forward on lookup batch ``i % len(batches)``, backward (+ optimizer)
    with its gradient; (fw_ms, bw_ms, total_ms) by ``timer``."""
    indices, offsets = batches[i % len(batches)]
    timer.start()
    out = op(indices, offsets)
    timer.mark()
    out.backward(grads[i % len(grads)])
    return timer.stop()


def timed_op(tables: list[Table], profile: HardwareProfile, pooled: bool, first_batch: int,
              inputs: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
              ops: OpCache | None = None) -> ComputeRecord:
    """One fused op of ``tables`` (pooled, or fbgemm's sequence op: one dim, every looked-up row
    returned), timed as :func:`measure_compute` says: ``warmup`` then ``repeats`` passes over
    the lookup batches, forward and backward (+ optimizer) each by :func:`timer_for` the device;
    the gradient is ones of the output's shape (a row per sample, or per lookup). The op comes
    from ``ops`` when given (and no ``inputs``: those are the caller's)."""
    fw, bw, tot = [], [], []
    with torch_threads(profile.threads):
        make = lambda: prepared(tables, profile, pooled, first_batch, inputs)      # noqa: E731
        if ops is None or inputs is not None:
            op, batches, grads = make()
        else:
            op, batches, grads = ops.get(op_key(tables, profile, pooled, first_batch), op_bytes(tables, profile), make)
        timer = timer_for(batches[0][0].device)
        if profile.device == "cuda":
            torch.cuda.synchronize()      # the inputs' copies and the op's initialisation are done
        for i in range(profile.warmup + profile.repeats):
            f, b, t = timed_pass(op, batches, grads, i, timer)
            if i >= profile.warmup:
                fw.append(f)
                bw.append(b)
                tot.append(t)
    return ComputeRecord("", tuple(tables), float(np.median(fw)), float(np.median(bw)), float(np.median(tot)),
                         profile.to_dict(), {"compute_timing": timer.method}, spread_ms(fw), spread_ms(bw),
                         spread_ms(tot))


# ----------------------------------------------------------------------------- campaigns on one GPU

def make_inputs(tables: list[dict[str, Any]], batch_size: int, input_batches: int,
                first_batch: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """The op's lookup batches ``first_batch`` .. ``+ input_batches - 1`` as numpy int64
    (indices [N], offsets [T * batch_size + 1]); runs in a worker process."""
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
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=ignore_sigint) as pool:
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
    """Measure ``jobs`` here, in order, with their batches made ahead (module docstring: on one GPU), and
    commit each sample as it is measured; returns how many were added. Stops taking jobs once
    ``time.monotonic()`` passes ``deadline``. ``jobs`` may be a generator (drawn only as the
    window needs them); ``total``: how many, for the progress bar."""
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
