"""Fitted lookups: a Task JSON with only the INTERFACES table fields becomes measurable, the
fitted generator reproduces the given bins and pooling, and the fit is recorded and repeatable."""

from __future__ import annotations

import json
import math
import zlib

import numpy as np
import pytest

from shardlab.data import calibration as CAL
from shardlab.data import fit_lookups as F
from shardlab.data import generator as G
from shardlab.data.lookups import lookup_origin, table_lookups
from shardlab.errors import ShardlabError
from shardlab.io import load_task
from shardlab.measure.compute import measure_compute
from shardlab.measure.hardware import profile_with

BATCH = 4096  # the task's batch: the bins below are measured at it
FIELDS = ("name", "rows", "dim", "pooling_factor", "reuse_bins")


def _plain_tables() -> list[dict]:
    """Task JSON table entries with no generator fields: bins and pooling measured on one
    batch of BATCH samples of pool-like tables (kept small for a fast measurement), plus a
    table with pooling factor 0 (all-zero bins)."""
    out = []
    for i, prm in enumerate(G.draw_params("dlrm2021", 40, seed=11)):
        if prm["rows"] > 200_000 or not 0.5 < prm["pooling"] < 30 or len(out) == 5:
            continue
        t, _ = G.table_from_params(f"f{i}", prm, 16, BATCH, prm["index_seed"])
        out.append({k: t.to_dict()[k] for k in FIELDS})
    out.append({"name": "empty", "rows": 500, "dim": 8, "pooling_factor": 0.0,
                "reuse_bins": [0.0] * 17})
    return out


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    path = tmp_path_factory.mktemp("fit") / "task.json"
    path.write_text(json.dumps({"name": "plain", "ngpu": 2, "mem_cap_gb": 4, "batch_size": BATCH,
                                "tables": _plain_tables()}))
    return load_task(path)


@pytest.fixture(scope="module")
def fitted(task):
    return F.with_lookups(task)


def _l1(table, batch_size):
    idx, off = G.generate_lookups(table, batch_size, 0)
    return G.l1_distance(G.lookup_stats(table.name, idx, off)["reuse_bins"], table.reuse_bins)


def test_plain_tables_have_no_lookups_until_fitted(task):
    assert all(lookup_origin(t) == "none" for t in task.tables)
    with pytest.raises(ShardlabError, match=r"table 'f\d+': field 'distribution'"):
        table_lookups(task.tables[0], 64, 0)


def test_fit_keeps_the_user_fields_and_records_the_fit(task, fitted):
    assert len(task.tables) == 6 and fitted.batch_size == BATCH
    for raw, t in zip(task.tables, fitted.tables):
        assert lookup_origin(t) == "fitted"
        assert {k: t.to_dict()[k] for k in FIELDS} == {k: raw.to_dict()[k] for k in FIELDS}
        assert t.index_seed == zlib.crc32(t.name.encode())
        d = t.distribution_params
        assert d["model"] == G.MODEL and d["fitted"] is True and d["fit_batch_size"] == BATCH
        assert d["pooling"] == pytest.approx(raw.pooling_factor, rel=1e-5)
        assert "fitted to its reuse_bins (L1 " in t.source
    assert F.with_lookups(fitted) == fitted  # idempotent: fitted tables are kept as they are
    assert type(fitted).from_dict(fitted.to_dict()) == fitted  # Task JSON round trip


def test_fitted_bins_match_the_given_ones(fitted):
    # The given bins were sampled from the same model family at this batch, so the best fit
    # reaches them up to one batch's sampling noise (on shipped pool tables the fit's median
    # L1 is ~0.01 and its max ~0.1 over 50 tables). 0.15 is the pool's own accesses bound.
    for t in fitted.tables:
        d = t.distribution_params
        assert d["fit_l1"] < 0.15, (t.name, d)
        assert d["fit_l1"] == pytest.approx(_l1(t, BATCH), rel=1e-3, abs=1e-6)  # as recorded
        assert d["fit_pooling_rel_err"] < 0.05
        idx, off = G.generate_lookups(t, BATCH, 0)
        assert idx.size / BATCH == pytest.approx(t.pooling_factor, rel=0.05, abs=1e-9)


def test_empty_table_gets_empty_bags(fitted):
    t = fitted.table("empty")
    idx, off = table_lookups(t, 128, 3)
    assert idx.size == 0 and off.shape == (129,) and not off.any()
    assert t.distribution_params["fit_l1"] == 0.0


def test_fitted_task_is_measurable(fitted):
    prof = profile_with("cpu", batch_size=256, repeats=2, warmup=1)
    s = measure_compute(fitted.tables, prof)
    assert all(math.isfinite(x) and x > 0 for x in (s.fw_ms, s.bw_ms, s.total_ms))
    assert [t.name for t in s.tables] == [t.name for t in fitted.tables]


def test_same_fit_twice_same_params(task, fitted):
    F._fit.cache_clear()
    again = F.with_lookups(task)
    assert again == fitted
    t = task.tables[0]
    assert F.fit_params(t.rows, t.pooling_factor, t.reuse_bins, BATCH) == \
        F.fit_params(t.rows, t.pooling_factor, t.reuse_bins, BATCH)


def test_fit_depends_on_the_batch_the_bins_refer_to(task):
    t = task.tables[0]
    small, big = F.fit_table_lookups(t, BATCH), F.fit_table_lookups(t, 16 * BATCH)
    assert small.distribution_params["alpha"] != big.distribution_params["alpha"]
    assert big.distribution_params["fit_batch_size"] == 16 * BATCH


def test_tables_with_lookups_are_returned_unchanged():
    gen = G.generate_tables("dlrm2021", 2, seed=0, dim=8)
    assert all(F.fit_table_lookups(t, BATCH) is t for t in gen)
    assert all(lookup_origin(t) == "generated" for t in gen)


def test_bad_inputs_name_the_field(task):
    with pytest.raises(ShardlabError, match="field 'batch_size'"):
        F.fit_table_lookups(task.tables[0], 0)
    with pytest.raises(ShardlabError, match="table 'odd': field 'distribution"):   # refused when read, before a fit
        F.fit_table_lookups(type(task.tables[0])("odd", 100, 8, 1.0, [1.0] + [0.0] * 16, distribution={"model": "x"}),
                            BATCH)


def test_fast_expected_unique_counts_equal_the_full_model():
    rng = np.random.default_rng(0)
    n = 64
    args = (np.round(10 ** rng.uniform(0, 7, n)), rng.uniform(0, 2.5, n), 10 ** rng.uniform(-1, 3, n),
            rng.uniform(0, 0.5, n), 10 ** rng.uniform(0, 7, n))
    uniq, _ = CAL.expected_table_counts(*args)
    assert np.allclose(CAL.expected_unique_counts(*args), uniq, rtol=1e-9, atol=1e-6)
