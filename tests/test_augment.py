"""Augmentation: dims copies keep lookups; rows/pooling/distribution variants regenerate them."""

from __future__ import annotations

import pytest

from shardlab.data.generator import generate_lookups, generate_tables
from shardlab.data.tasks import Augmentation, augment_tables
from shardlab.errors import ShardlabError
from tests.conftest import make_table


@pytest.fixture(scope="module")
def base():
    return generate_tables("dlrm2021", 3, seed=11, dim=64)


def test_dims_copies(base):
    out = augment_tables(base, Augmentation())
    assert len(out) == 3 * 6
    assert sorted({t.dim for t in out}) == [4, 8, 16, 32, 64, 128]
    assert all(t.reuse_bins == base[i // 6].reuse_bins for i, t in enumerate(out))
    assert out[0].name == f"{base[0].name}@d128"


def test_switchable_variants_change_what_they_say(base):
    same = augment_tables(base, Augmentation(dims=None, rows=True, variants=2), seed=1, batch_size=4096)
    assert len(same) == 6
    for t, v in zip([b for b in base for _ in range(2)], same):
        assert v.rows != t.rows and v.distribution_params["alpha"] == t.distribution_params["alpha"]
        idx, _ = generate_lookups(v, 4096)
        assert idx.max() < v.rows
    pooled = augment_tables(base, Augmentation(dims=None, pooling=True), seed=2, batch_size=4096)
    assert all(p.rows == t.rows and p.distribution_params["pooling"] != t.distribution_params["pooling"]
               for p, t in zip(pooled, base))
    shifted = augment_tables(base, Augmentation(dims=(8,), distribution=True), seed=3, batch_size=4096)
    assert all(s.dim == 8 and s.distribution_params["alpha"] != t.distribution_params["alpha"]
               for s, t in zip(shifted, base))


def test_deterministic(base):
    aug = Augmentation(dims=(4, 8), rows=True, pooling=True, distribution=True)
    assert augment_tables(base, aug, seed=5, batch_size=2048) == augment_tables(base, aug, seed=5, batch_size=2048)
    assert augment_tables(base, aug, seed=5, batch_size=2048) != augment_tables(base, aug, seed=6, batch_size=2048)


def test_tables_without_generator_only_augment_dims():
    plain = make_table("plain")
    assert len(augment_tables([plain])) == 6
    with pytest.raises(ShardlabError, match="table 'plain': field 'distribution' is missing"):
        augment_tables([plain], Augmentation(rows=True))
