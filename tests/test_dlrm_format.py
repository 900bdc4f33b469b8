"""Loader of the DLRM synthetic dataset format: features computed exactly as specified on
small files written by the test in that format (plain and gzipped)."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest
import torch

from shardlab.data.dlrm_format import (DlrmLookups, check_lookups, load_dlrm_file,
                                       tables_from_dlrm_file)
from shardlab.data.features import reuse_bin_of_counts, reuse_histograms, table_features
from shardlab.errors import ShardlabError


def _write(path, indices, lengths, gz):
    lengths = torch.tensor(lengths, dtype=torch.int32)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths.reshape(-1), 0)])
    buf = io.BytesIO()
    torch.save((torch.tensor(indices, dtype=torch.int64), offsets, lengths), buf)
    path.write_bytes(gzip.compress(buf.getvalue()) if gz else buf.getvalue())


@pytest.mark.parametrize("gz", [False, True])
def test_features_from_a_small_file(tmp_path, gz):
    # 2 tables, batch 3. Table 0 bags: [5, 5], [5], [7, 300]: row 5 x3, 7 x1, 300 x1.
    # Table 1 bags: [], [1, 1], [2]: row 1 x2, row 2 x1.
    lengths = [[2, 1, 2], [0, 2, 1]]
    indices = [5, 5, 5, 7, 300, 1, 1, 2]
    path = tmp_path / ("f.pt.gz" if gz else "f.pt")
    _write(path, indices, lengths, gz)
    t0, t1 = tables_from_dlrm_file(path, dims=[8, 16])
    assert (t0.name, t0.rows, t0.dim) == ("t0", 301, 8)  # max index + 1 > 100
    assert t0.pooling_factor == pytest.approx(5 / 3)
    # unique rows: 5 (3 accesses -> bin 2), 7 and 300 (1 access -> bin 0)
    assert t0.reuse_bins[0] == pytest.approx(2 / 3) and t0.reuse_bins[2] == pytest.approx(1 / 3)
    assert (t1.rows, t1.dim) == (100, 16)  # max(100, 3)
    assert t1.pooling_factor == pytest.approx(1.0)
    assert t1.reuse_bins[1] == pytest.approx(0.5) and t1.reuse_bins[0] == pytest.approx(0.5)
    feats = table_features([t0, t1])
    assert feats.shape == (2, 21)
    assert list(feats[0, :4]) == [8, 301, pytest.approx(5 / 3), 301 * 8]


def test_table_slices_follow_offsets(tmp_path):
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 5, size=(3, 50))
    indices = rng.integers(0, 1000, size=int(lengths.sum()))
    _write(tmp_path / "r.pt", indices.tolist(), lengths.tolist(), False)
    data = load_dlrm_file(tmp_path / "r.pt")
    assert (data.n_tables, data.batch_size) == (3, 50)
    idx1, off1 = data.table_lookups(1)
    start = lengths[0].sum()
    assert np.array_equal(idx1, indices[start:start + lengths[1].sum()])
    assert off1[0] == 0 and off1[-1] == idx1.size and off1.size == 51


def test_bin_edges():
    counts = np.array([1, 2, 3, 4, 5, 1024, 1025, 32768, 32769, 10**9])
    assert reuse_bin_of_counts(counts).tolist() == [0, 1, 2, 2, 3, 10, 11, 15, 16, 16]
    u, a, n = reuse_histograms(np.array([9, 9, 9, 9, 4]))
    assert n == 2 and u[0] == 0.5 and u[2] == 0.5 and a[0] == 0.2 and a[2] == 0.8


def test_bad_files_give_one_line_errors(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ShardlabError, match="not a torch-saved file"):
        load_dlrm_file(tmp_path / "junk.pt")
    buf = io.BytesIO()
    torch.save({"a": 1}, buf)
    (tmp_path / "dict.pt").write_bytes(buf.getvalue())
    with pytest.raises(ShardlabError, match="expected a tuple"):
        load_dlrm_file(tmp_path / "dict.pt")
    with pytest.raises(ShardlabError, match="'lengths' disagrees"):
        check_lookups(np.arange(3), np.array([0, 1, 3]), np.array([[2, 1]]))
    with pytest.raises(ShardlabError, match="'offsets' must have"):
        check_lookups(np.arange(3), np.array([0, 3]), np.array([[2, 1]]))


def test_dlrm_lookups_index_range():
    data = DlrmLookups(np.arange(2), np.array([0, 1, 2]), np.array([[1, 1]]))
    with pytest.raises(ShardlabError, match="out of range"):
        data.table_lookups(1)
