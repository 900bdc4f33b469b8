"""The row-wise comm campaign's samples and the analytic row-wise comm model."""

import numpy as np
import pytest

from shardlab.costmodel.analytic import load_analytic, save_analytic
from shardlab.costmodel.rowwise_comm import INDEX_BYTES, RowWiseComm, rowwise_terms
from shardlab.profile.rowwise_campaign import rowwise_spec


def test_rowwise_terms_count_collective_and_off_diagonal_index_bytes():
    rw = {"dim": 16, "index_counts": [[5, 1, 2], [3, 7, 0], [4, 4, 9]]}
    t = rowwise_terms(3, 100, 4, rw)                       # b = 34 rows per slice
    assert np.allclose(t[:, 0], 3 * 34 * 16 * 4)
    assert np.allclose(t[:, 1], np.array([3, 3, 8]) * INDEX_BYTES)     # sent, diagonal excluded
    assert np.allclose(t[:, 2], np.array([7, 5, 2]) * INDEX_BYTES)     # received
    assert not rowwise_terms(3, 100, 4, None).any()


def test_rowwise_specs_are_deterministic_square_and_sized_by_pooling():
    a, b = rowwise_spec(4, 7, 0, 4096), rowwise_spec(4, 7, 0, 4096)
    assert a == b and a != rowwise_spec(4, 8, 0, 4096)
    counts = np.array(a["rowwise"]["index_counts"])
    assert counts.shape == (4, 4) and (counts >= 0).all()
    per_rank = 1024 * sum(a["rowwise_pooling"])
    assert np.allclose(counts.sum(axis=1), per_rank, atol=4)
    assert a["rowwise"]["dim"] == sum(a["rowwise_dims"])


def _rows(n, rng, fw_coef, bw_coef):
    """Synthetic samples whose times are exactly linear in the model's regressors."""
    model = RowWiseComm()
    out = []
    for i in range(n):
        g = 4
        spec = rowwise_spec(g, i, 1, 4096)
        x = model._rows(spec["dim_sums"], spec["delays_ms"], spec["rowwise"], 4096, 4)
        out.append({"key": f"k{i}", "batch_size": 4096, "dtype": "torch.float32", "dim_sums": spec["dim_sums"],
                    "delays_ms": spec["delays_ms"], "rowwise": spec["rowwise"], "fw_comm_ms": list(x @ fw_coef),
                    "bw_comm_ms": list(x[:, [0, 1, 2, 3, 4, 6]] @ bw_coef), "provenance": {"profile": {"name": "syn"}}})
    return out


def test_the_model_recovers_a_linear_truth_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    fw = np.array([0.2, 0.05, 1e-7, 2e-7, 1e-7, 1.0, 3e-8, 1e-6, 1e-6])
    bw = np.array([0.1, 0.02, 2e-7, 1e-7, 1e-7, 5e-8])
    rows = _rows(40, rng, fw, bw)
    m = RowWiseComm().fit(rows[:30])
    test = rows[30:]
    pred = m.predict([r["dim_sums"] for r in test], [r["delays_ms"] for r in test], [r["rowwise"] for r in test])
    assert np.allclose(pred[:, :, 0], [r["fw_comm_ms"] for r in test], rtol=1e-6)
    assert np.allclose(pred[:, :, 1], [r["bw_comm_ms"] for r in test], rtol=1e-6)
    without = m.predict([r["dim_sums"] for r in test], [r["delays_ms"] for r in test], None)
    assert (without[:, :, 0] < pred[:, :, 0]).all()          # row-wise traffic costs time
    save_analytic(m, str(tmp_path / "m.json"))
    back = load_analytic(str(tmp_path / "m.json"))
    assert isinstance(back, RowWiseComm) and np.allclose(back.coef_fw_, m.coef_fw_)
    assert "analytic" in back.source


def test_fitting_nothing_is_refused():
    with pytest.raises(Exception, match="no samples"):
        RowWiseComm().fit([])
