"""Built ops kept from one round to the next: the same op (same tables, same lookup batches) is
built once and timed again, an op over the cache's size is built for each use, other lookup
batches are another op; a measured evaluator builds each distinct shard once per sitting; the
allocator setting that makes rebuilding cheap is in force inside its block and glibc's defaults
are set again after it, on an error too."""

from __future__ import annotations

import ctypes
import platform

import pytest

import shardlab.measure.compute as compute
from shardlab import Plan
from shardlab.evaluate import MeasuredEvaluator
from shardlab.measure.compute import OpCache, measure_compute
from shardlab.measure.hardware import HardwareProfile, kept_memory
from shardlab.data.generator import generate_tables


def _tables(n: int):
    """``n`` small generated tables with lookups of their own."""
    ts = [t for t in generate_tables("dlrm2021", 40, seed=3, dim=16) if t.rows < 200_000]
    return ts[:n]

FAST = HardwareProfile("test-fast", "cpu", batch_size=256, warmup=1, repeats=2, input_batches=2)


@pytest.fixture
def builds(monkeypatch):
    """Counts fbgemm ops built."""
    calls = []
    real = compute.build_tbe

    def counting(tables, profile, device, pooled=True):
        calls.append(tuple(t.name for t in tables))
        return real(tables, profile, device, pooled)

    monkeypatch.setattr(compute, "build_tbe", counting)
    return calls


def test_an_op_is_built_once_and_timed_again(builds):
    tables = _tables(2)
    ops = OpCache()
    first = measure_compute(tables, FAST, ops=ops)
    again = measure_compute(tables, FAST, ops=ops)
    assert len(builds) == 1 and (ops.built, ops.reused) == (1, 1)
    assert first.total_ms > 0 and again.total_ms > 0
    assert ops.held_bytes == sum(t.memory_bytes("fp32", "exact_sgd") for t in tables)
    measure_compute(tables, FAST, first_batch=2, ops=ops)         # other lookups: another op
    assert len(builds) == 2 and ops.built == 2


def test_an_op_over_the_cache_size_is_built_for_each_use(builds):
    tables = _tables(1)
    ops = OpCache(max_gb=tables[0].memory_bytes("fp32", "exact_sgd") / 2 / 2**30)
    for _ in range(3):
        measure_compute(tables, FAST, ops=ops)
    assert len(builds) == 3 and ops.held_bytes == 0 and ops.reused == 0


def test_without_a_cache_every_call_builds(builds):
    tables = _tables(1)
    measure_compute(tables, FAST)
    measure_compute(tables, FAST)
    assert len(builds) == 2


def test_a_sitting_builds_each_distinct_shard_once(builds):
    from shardlab import Task
    a, b, c = _tables(3)
    task = Task("t", 2, 1.0, (a, b, c), batch_size=256)
    plans = {"x": Plan.table_wise(task, [0, 0, 1], "x"), "y": Plan.table_wise(task, [0, 1, 1], "y")}
    MeasuredEvaluator(FAST, rounds=4, warmup_rounds=1, lower_bound=False, progress=False,
                      fresh_process=False).evaluate(task, plans)        # in process: the patched builder counts
    # four shards ({a,b}, {c}, {a}, {b,c}), each built once for 1 warm-up + 4 timed rounds
    assert sorted(builds) == sorted([(a.name, b.name), (c.name,), (a.name,), (b.name, c.name)])


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (``malloc.h``): ``hblkhd`` is the bytes held in mmap chunks."""
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def _mmapped_by_a_64_mb_block() -> int:
    """Bytes glibc serves from mmap for one 64 MB malloc (freed again)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(64 << 20)
    after = libc.mallinfo2().hblkhd
    libc.free(block)
    return after - before


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_inside_the_block_large_blocks_come_from_the_kept_heap():
    with kept_memory() as on:
        assert on and _mmapped_by_a_64_mb_block() == 0       # from the heap, kept for the next op
    with kept_memory(enabled=False) as on:
        assert not on


class _FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad):
        self.calls.append(("malloc_trim", pad))
        return 1


def test_the_defaults_are_restored_after_the_block_and_after_an_error(monkeypatch):
    import shardlab.measure.hardware as hardware
    fake = _FakeLibc()
    monkeypatch.setattr(hardware.ctypes, "CDLL", lambda name: fake)
    restored = [("mallopt", -1, 128 * 1024), ("mallopt", -4, 65536), ("malloc_trim", 0)]
    with kept_memory() as on:
        assert on and fake.calls == [("mallopt", -4, 0), ("mallopt", -1, 2**31 - 1)]
    assert fake.calls[2:] == restored
    fake.calls.clear()
    with pytest.raises(RuntimeError):
        with kept_memory():
            raise RuntimeError("boom")
    assert fake.calls[2:] == restored
    fake.calls.clear()
    with kept_memory(enabled=False):
        pass
    assert fake.calls == []


def test_a_sittings_cache_holds_the_most_or_half_the_memory_available_whichever_is_less(monkeypatch):
    import shardlab.measure.op_cache as op_cache
    from shardlab import constants as C
    monkeypatch.setattr(op_cache, "available_memory_bytes", lambda: 10 * C.GB)
    assert OpCache.for_this_host().max_gb == pytest.approx(10 * C.OP_CACHE_MEMORY_SHARE)
    monkeypatch.setattr(op_cache, "available_memory_bytes", lambda: 1000 * C.GB)
    assert OpCache.for_this_host().max_gb == C.OP_CACHE_GB
    monkeypatch.setattr(op_cache, "available_memory_bytes", lambda: None)
    assert OpCache.for_this_host().max_gb == C.OP_CACHE_GB


@pytest.mark.skipif(platform.system() != "Linux", reason="MemAvailable is Linux's")
def test_the_memory_available_is_read_from_the_os():
    from shardlab.measure.hardware import available_memory_bytes
    free = available_memory_bytes()
    assert free is not None and 0 < free


def test_lead_passes_time_each_op_after_itself(monkeypatch):
    import shardlab.measure.interleaved as interleaved
    from shardlab import constants as C
    passes = []
    real = interleaved.timed_pass

    def counting(op, batches, grads, i, timer):
        passes.append((id(op), i))
        return real(op, batches, grads, i, timer)

    monkeypatch.setattr(interleaved, "timed_pass", counting)
    shards = [[t] for t in _tables(2)]
    for lead in (0, 2):
        monkeypatch.setattr(C, "SWEEP_LEAD_PASSES", lead)
        passes.clear()
        interleaved.measure_interleaved(shards, FAST, OpCache(), 0, 0)
        assert len(passes) == (FAST.warmup + FAST.repeats) * len(shards) * (1 + lead)
        # every pass of the sweep comes in a run of 1 + lead passes of one op, on batches i - lead .. i
        for k in range(0, len(passes), 1 + lead):
            run = passes[k:k + 1 + lead]
            assert len({o for o, _ in run}) == 1 and [i for _, i in run] == list(range(run[-1][1] - lead, run[-1][1] + 1))


def test_op_spacers_are_drawn_by_the_cache_seed(monkeypatch):
    from shardlab import constants as C
    monkeypatch.setattr(C, "OP_SPACER_BYTES", 1 << 16)
    sizes = []
    for seed in (5, 5, 6):
        cache = OpCache(seed=[seed, 1])
        for k in range(3):
            cache.get(("op", k), 10, lambda: object())
        sizes.append([s.numel() for s in cache._spacers])
    assert sizes[0] == sizes[1] != sizes[2] and all(n % 64 == 0 and n <= 1 << 16 for n in sizes[0])
    monkeypatch.setattr(C, "OP_SPACER_BYTES", 0)
    cache = OpCache()
    cache.get(("op", 0), 10, lambda: object())
    assert cache._spacers == [None]
