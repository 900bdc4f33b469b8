"""Trace replay: tables loaded from a lookup trace are measured on exactly the trace's lookups,
re-batched to any batch size (wrapping around); a missing trace is a one-line error."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shardlab.data.dlrm_format import (check_lookups, save_dlrm_file, tables_from_dlrm_file,
                                       tables_from_lookups)
from shardlab.data.fit_lookups import fit_table_lookups
from shardlab.data.lookups import lookup_origin, rebatch, table_lookups
from shardlab.errors import ShardlabError
from shardlab.measure.compute import fused_inputs, measure_compute
from shardlab.measure.hardware import profile_with
from shardlab.tables import Table, Task

B = 8  # samples in the trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """2 tables x 8 samples, some empty bags, rows up to 999."""
    rng = np.random.default_rng(4)
    lengths = rng.integers(0, 5, size=(2, B))
    lengths[0, 3] = lengths[1, 0] = 0
    offsets = np.concatenate([[0], np.cumsum(lengths.reshape(-1))])
    lookups = check_lookups(rng.integers(0, 1000, size=int(offsets[-1])), offsets, lengths)
    path = save_dlrm_file(lookups, tmp_path_factory.mktemp("trace") / "trace.pt.gz")
    return lookups, path


def _expected(lookups, t, batch_size, batch_index):
    """Bag k of batch b is trace sample (b * n + k) mod B, built bag by bag."""
    idx, off = lookups.table_lookups(t)
    bags = [idx[off[s]:off[s + 1]] for s in (batch_index * batch_size + np.arange(batch_size)) % B]
    return np.concatenate(bags), np.concatenate([[0], np.cumsum([len(b) for b in bags])])


def test_tables_refer_to_their_trace(trace):
    lookups, path = trace
    tables = tables_from_dlrm_file(path, dims=8)
    for t, table in enumerate(tables):
        assert lookup_origin(table) == "trace"
        assert table.distribution_params == {"model": "trace", "path": str(path.resolve()),
                                             "table_index": t}
        assert fit_table_lookups(table, 4096) is table  # a trace is never replaced by a fit
    task = Task("tr", 1, 1.0, tuple(tables))
    assert Task.from_dict(task.to_dict()) == task  # Task JSON keeps the reference
    assert all(lookup_origin(t) == "none" for t in tables_from_lookups(lookups))  # no path


def test_op_sees_exactly_the_trace_at_its_batch_size(trace):
    lookups, path = trace
    indices, offsets = fused_inputs(tables_from_dlrm_file(path), B, 0)
    assert np.array_equal(indices.numpy(), lookups.indices)
    assert np.array_equal(offsets.numpy(), lookups.offsets)


@pytest.mark.parametrize("batch_size, batch_index", [(3, 0), (3, 2), (3, 5), (20, 0), (20, 1), (8, 1)])
def test_rebatching_wraps_around(trace, batch_size, batch_index):
    lookups, path = trace
    tables = tables_from_dlrm_file(path)
    indices, offsets = fused_inputs(tables, batch_size, batch_index)
    got_idx, got_off = indices.numpy(), offsets.numpy()
    for t, table in enumerate(tables):
        want_idx, want_off = _expected(lookups, t, batch_size, batch_index)
        lo, hi = t * batch_size, (t + 1) * batch_size
        assert np.array_equal(got_off[lo:hi + 1] - got_off[lo], want_off)
        assert np.array_equal(got_idx[got_off[lo]:got_off[hi]], want_idx)
        assert np.array_equal(table_lookups(table, batch_size, batch_index)[0], want_idx)


def test_rebatch_of_one_table():
    idx, off = np.array([5, 6, 7]), np.array([0, 2, 2, 3])  # bags [5, 6], [], [7]
    got_idx, got_off = rebatch(idx, off, 4, 1)  # samples 4, 5, 6, 7 mod 3 = 1, 2, 0, 1
    assert got_idx.tolist() == [7, 5, 6] and got_off.tolist() == [0, 0, 1, 3, 3]


def test_npz_file_with_one_table(trace, tmp_path):
    lookups, _ = trace
    idx, off = lookups.table_lookups(1)
    np.savez(tmp_path / "mine.npz", indices=idx, offsets=off)
    (table,) = tables_from_dlrm_file(tmp_path / "mine.npz", dims=16)
    got_idx, got_off = table_lookups(table, B, 0)
    assert np.array_equal(got_idx, idx) and np.array_equal(got_off, off)


def test_trace_tables_are_measurable(trace):
    _, path = trace
    prof = profile_with("cpu", batch_size=256, repeats=2, warmup=1)
    s = measure_compute(tables_from_dlrm_file(path, dims=8), prof)
    assert all(math.isfinite(x) and x > 0 for x in (s.fw_ms, s.bw_ms, s.total_ms))


def test_missing_or_wrong_trace_is_a_one_line_error(trace, tmp_path):
    _, path = trace
    table = tables_from_dlrm_file(path)[0]
    gone = Table(table.name, table.rows, table.dim, table.pooling_factor, table.reuse_bins,
                 distribution={**table.distribution_params, "path": str(tmp_path / "gone.pt")})
    with pytest.raises(ShardlabError, match="table 't0': field 'distribution' names trace") as e:
        table_lookups(gone, 4, 0)
    assert "\n" not in str(e.value) and "gone.pt" in str(e.value)
    far = Table("far", table.rows, 8, 1.0, table.reuse_bins,
                distribution={**table.distribution_params, "table_index": 5})
    with pytest.raises(ShardlabError, match="table 'far': field 'distribution' has 'table_index' = 5"):
        table_lookups(far, 4, 0)
    small = Table("small", 1, 8, 1.0, table.reuse_bins, distribution=table.distribution_params)
    with pytest.raises(ShardlabError, match="table 'small': field 'rows' = 1"):
        table_lookups(small, B, 0)
