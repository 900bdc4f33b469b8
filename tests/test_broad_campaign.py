"""The broad compute campaign: tables over the space real models live in, column slices,
one-hot and fixed multi-hot bags, memory caps recorded, resumable measured samples."""

import numpy as np

from shardlab import constants as C
from shardlab.data.generator import generate_lookups
from shardlab.measure.broad_campaign import BroadSpace, broad_sample_tables, broad_table, column_slice, run_broad_campaign
from shardlab.measure.hardware import profile_with
from shardlab.measure.store import SampleStore

SPACE = BroadSpace()


def _samples(n, **kw):
    return [broad_sample_tables(i, 0, SPACE, 256, 6, int(2 * C.GB), "fp32", "exact_sgd", **kw) for i in range(n)]


def test_samples_are_deterministic_and_fit_memory():
    a, b = _samples(12), _samples(12)
    assert [[t.to_dict() for t in s] for s in a] == [[t.to_dict() for t in s] for s in b]
    for s in a:
        assert 1 <= len(s) <= 6
        assert sum(t.memory_bytes() for t in s) <= 2 * C.GB


def test_the_space_is_covered_slices_included():
    tables = [t for s in _samples(60) for t in s]
    rows = np.array([t.rows for t in tables])
    assert rows.min() < 1e4 and rows.max() > 1e6                # orders of magnitude apart
    assert {t.dim for t in tables} - set(SPACE.dims) <= {d // k for d in SPACE.dims for k in SPACE.split_ways}
    assert any("[cols 1/" in t.name for t in tables)             # column slices present
    assert any(t.pooling_factor > 20 for t in tables) and any(t.pooling_factor == 1.0 for t in tables)
    for t in tables:
        assert t.memory_bytes() <= SPACE.max_table_gb * C.GB + 1


def test_one_hot_and_fixed_bags_have_exact_lengths():
    rng = np.random.default_rng(3)
    one_hot = broad_table(rng, "oh", BroadSpace(one_hot=1.0, fixed_multi_hot=0.0), 512)
    idx, off = generate_lookups(one_hot, 512)
    assert (np.diff(off) == 1).all() and "one-hot" in one_hot.source
    fixed = broad_table(rng, "fx", BroadSpace(one_hot=0.0, fixed_multi_hot=1.0), 512)
    lengths = np.diff(generate_lookups(fixed, 512)[1])
    assert (lengths == lengths[0]).all() and lengths[0] == round(fixed.distribution_params["pooling"])
    free = broad_table(rng, "mh", BroadSpace(one_hot=0.0, fixed_multi_hot=0.0, pooling=(20.0, 30.0)), 512)
    assert np.diff(generate_lookups(free, 512)[1]).std() > 0     # variable bags otherwise


def test_rows_cap_is_recorded_in_the_source():
    space = BroadSpace(rows=(1e8, 1e8), max_table_gb=0.01)
    t = broad_table(np.random.default_rng(0), "big", space, 256)
    assert t.memory_bytes() <= 0.01 * C.GB and "rows capped 100000000 ->" in t.source


def test_column_slice_keeps_lookups_and_refuses_bad_widths():
    t = broad_table(np.random.default_rng(1), "t", BroadSpace(dims=(64,)), 256)
    part = column_slice(t, 4)
    assert part.dim == 16 and part.index_seed == t.index_seed and part.distribution == t.distribution
    assert column_slice(t.with_dim(12), 2) is None               # 6 columns: not a multiple of 4


def test_campaign_measures_and_resumes(tmp_path):
    store = str(tmp_path / "broad.db")
    fast = profile_with("cpu", batch_size=128, repeats=2, warmup=1)
    space = BroadSpace(rows=(1e2, 1e4))
    assert run_broad_campaign(store, 2, fast, space, max_tables=3, progress=False) == 2
    assert run_broad_campaign(store, 2, fast, space, max_tables=3, progress=False) == 0
    with SampleStore(store) as s:
        keys = sorted(s.keys("compute"))
        sample = next(iter(s.samples("compute")))
    assert keys == [f"compute:{fast.name}:broad:train:s0:{i}" for i in (0, 1)]
    assert sample["fw_ms"] > 0 and sample["bw_ms"] > 0


def test_row_blocks_join_only_when_asked_and_carry_their_share_of_lookups():
    from shardlab.data.lookups import lookup_origin, table_lookups

    plain = [broad_sample_tables(i, 0, BroadSpace(), 1024, 6, int(3 * C.GB), "fp32", "exact_sgd") for i in range(8)]
    zero = [broad_sample_tables(i, 0, BroadSpace(row_share=0.0), 1024, 6, int(3 * C.GB), "fp32", "exact_sgd")
            for i in range(8)]
    assert plain == zero                                     # earlier seeds draw what they drew
    rows = [t for i in range(12) for t in broad_sample_tables(i, 7, BroadSpace(row_share=1.0), 1024, 6,
                                                              int(3 * C.GB), "fp32", "exact_sgd")
            if lookup_origin(t) == "row-block"]
    assert len(rows) >= 12
    for t in rows[:5]:
        idx, off = table_lookups(t, 1024, 0)
        assert idx.min(initial=0) >= 0 and idx.max(initial=-1) < t.rows and len(off) == 1025


def test_space_from_json_takes_fields_and_names_the_bad_one():
    import pytest

    from shardlab.errors import ShardlabError
    from shardlab.measure.broad_campaign import space_from_json

    space = space_from_json('{"pooling": [1, 200], "dims": [4, 512], "one_hot": 0.35}', row_share=0.2)
    assert space.pooling == (1.0, 200.0) and space.dims == (4, 512) and space.one_hot == 0.35
    assert space.row_share == 0.2 and space.rows == BroadSpace().rows      # the rest at defaults
    assert space_from_json("") == BroadSpace()
    for text, field in (('{"poolng": [1, 2]}', "poolng"), ('{"pooling": [1]}', "pooling"),
                        ('{"dims": [4, 6]}', "dims"), ('{"one_hot": "a"}', "one_hot"),
                        ('{"one_hot": 2}', "one_hot"), ('[1, 2]', "--space"), ('{"rows": ', "--space")):
        with pytest.raises(ShardlabError, match=f"'{field}'"):
            space_from_json(text)
