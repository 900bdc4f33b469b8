"""Compute profiler: real fbgemm TBE timings on CPU with lookups from each table's generator;
the timers (perf_counter on CPU, CUDA events on a GPU) checked with fake clocks and events."""

from __future__ import annotations

import pytest
import torch

import shardlab.measure.compute as compute
from shardlab.data.generator import generate_tables
from shardlab.errors import ShardlabError
from shardlab.measure.compute import CudaEventTimer, PerfCounterTimer, fused_inputs, measure_compute, timer_for
from shardlab.measure.hardware import PROFILES, HardwareProfile, get_profile
from shardlab.measure.records import ComputeRecord
from tests.conftest import make_table

FAST = HardwareProfile("test-fast", "cpu", batch_size=512, warmup=1, repeats=5, input_batches=2)


@pytest.fixture(scope="module")
def tables():
    ts = [t for t in generate_tables("dlrm2021", 40, seed=3, dim=32) if t.rows < 500_000 and t.pooling_factor > 2]
    assert len(ts) >= 8
    return ts[:8]


def test_sample_is_measured_and_consistent(tables):
    s = measure_compute(tables[:2], FAST)
    assert s.fw_ms > 0 and s.bw_ms > 0
    p25, p75, lo, hi = s.total_spread_ms
    assert lo <= p25 <= s.total_ms <= p75 <= hi
    assert s.profile["name"] == "test-fast" and s.profile["repeats"] == 5
    assert ComputeRecord.from_dict(s.to_dict()) == s
    assert s.tables == tuple(tables[:2]) and s.key == ""
    assert s.provenance == {"compute_timing": "perf_counter"}


def test_more_tables_cost_more(tables):
    one = measure_compute(tables[:1], FAST)
    eight = measure_compute(tables, FAST)
    assert eight.total_ms > 2 * one.total_ms


@pytest.mark.parametrize("precision, optimizer", [("fp16", "exact_sgd"), ("fp32", "exact_rowwise_adagrad")])
def test_precisions_and_optimizers(tables, precision, optimizer):
    prof = HardwareProfile("p", "cpu", batch_size=256, weights_precision=precision, optimizer=optimizer,
                           warmup=1, repeats=3)
    s = measure_compute(tables[:2], prof)
    assert s.total_ms > 0 and s.profile["optimizer"] == optimizer


def test_inputs_follow_each_table(tables):
    indices, offsets = fused_inputs(tables[:3], 128, 0)
    assert offsets.numel() == 3 * 128 + 1 and int(offsets[-1]) == indices.numel()
    for k, t in enumerate(tables[:3]):
        block = indices[int(offsets[k * 128]):int(offsets[(k + 1) * 128])]
        assert int(block.max()) < t.rows


def test_errors_name_the_field(tables):
    with pytest.raises(ShardlabError, match="'distribution'"):
        measure_compute([make_table("plain")], FAST)
    with pytest.raises(ShardlabError, match="over max_gb"):
        measure_compute(tables[:1], FAST, max_gb=1e-6)
    with pytest.raises(ShardlabError, match="'optimizer'"):
        HardwareProfile("bad", "cpu", 64, optimizer="adam")
    with pytest.raises(ShardlabError, match="unknown"):
        get_profile("tpu")
    assert PROFILES["cpu"].batch_size == 4096 and PROFILES["h200"].comm_backend == "nccl"


# ----------------------------------------------------------------------------- timers, no GPU needed

class FakeEvent:
    """A CUDA event on a fake stream: ``record`` stamps the stream's time (ms); reading an
    elapsed time before the device was synchronised fails, as it does on a GPU."""

    def __init__(self, stream):
        self.stream, self.at = stream, None

    def record(self):
        self.at = self.stream["now"]
        self.stream["recorded"] += 1

    def elapsed_time(self, end):
        assert self.stream["synced"], "elapsed_time read before synchronize"
        return end.at - self.at


def test_timer_follows_the_device():
    assert isinstance(timer_for("cpu"), PerfCounterTimer) and timer_for("cpu").method == "perf_counter"
    for dev in ("cuda", "cuda:0", torch.device("cuda", 1)):
        t = timer_for(dev)                       # built without touching a GPU
        assert isinstance(t, CudaEventTimer) and t.method == "cuda_events"


def test_cuda_event_timer_reads_the_events_after_one_sync_per_run():
    stream = {"now": 0.0, "recorded": 0, "synced": False}
    syncs = []

    def sync():
        syncs.append(stream["now"])
        stream["synced"] = True

    timer = CudaEventTimer(event=lambda: FakeEvent(stream), synchronize=sync)
    for run, (fw, bw) in enumerate([(1.25, 3.5), (0.5, 2.0)]):
        stream["synced"] = False
        timer.start()
        stream["now"] += fw                      # the forward's kernels
        timer.mark()
        stream["now"] += bw                      # the backward's kernels and optimizer
        assert timer.stop() == pytest.approx((fw, bw, fw + bw))
        assert len(syncs) == run + 1 and stream["recorded"] == 3 * (run + 1)


def test_perf_counter_timer_is_host_seconds_in_ms():
    ticks = iter([10.0, 10.002, 10.0065])
    syncs = []
    timer = PerfCounterTimer(sync=lambda: syncs.append(1), clock=lambda: next(ticks))
    timer.start()
    timer.mark()
    assert timer.stop() == pytest.approx((2.0, 4.5, 6.5))
    assert len(syncs) == 3                        # synchronised before each reading


def test_measure_compute_times_with_the_devices_timer(tables, monkeypatch):
    """The record is the median over the timed runs of what the timer said, warm-ups left out,
    and its provenance names the timer."""
    runs = iter([(100.0, 100.0, 200.0)] + [(float(i), 2.0 * i, 3.0 * i) for i in range(1, 6)])
    seen = []

    class Scripted:
        method = "scripted"

        def start(self):
            seen.append("start")

        def mark(self):
            seen.append("mark")

        def stop(self):
            seen.append("stop")
            return next(runs)

    monkeypatch.setattr(compute, "timer_for", lambda device: Scripted() if torch.device(device).type == "cpu" else None)
    s = measure_compute(tables[:2], FAST)           # warmup 1, repeats 5
    assert seen == ["start", "mark", "stop"] * 6
    assert (s.fw_ms, s.bw_ms, s.total_ms) == (3.0, 6.0, 9.0)
    assert s.fw_spread_ms == (2.0, 4.0, 1.0, 5.0)
    assert s.provenance == {"compute_timing": "scripted"}
