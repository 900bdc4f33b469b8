"""Compute profiler: real fbgemm TBE timings on CPU with lookups from each table's generator."""

from __future__ import annotations

import pytest

from shardlab.data.generator import generate_tables
from shardlab.errors import ShardlabError
from shardlab.profile.compute import fused_inputs, measure_compute
from shardlab.profile.hardware import PROFILES, HardwareProfile, get_profile
from shardlab.profile.records import ComputeRecord
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
