"""Row-range blocks: a block's lookups are exactly its parent's that fall in its rows,
re-numbered; its load is measured; it survives Task JSON carrying its parent's generator
parameters (not the parent itself); blocks stored the older way still read; bad ranges and
a table with only the Task JSON fields is cut from lookups fitted to its bins."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardlab import ShardlabError
from shardlab.data.fit_lookups import fit_table_lookups
from shardlab.data.lookups import describe, lookup_origin, row_block_table, table_lookups
from shardlab.data.tasks import generate_task
from shardlab.tables import Table


@pytest.fixture(scope="module")
def table():
    task = generate_task(ntables=8, ngpu=2, seed=4)
    return max(task.tables, key=lambda t: t.pooling_factor * (t.rows > 1000))


def test_blocks_partition_the_parents_lookups(table):
    cuts = [0, 7, table.rows // 3, table.rows]
    blocks = [row_block_table(table, a, b - a, 1024) for a, b in zip(cuts, cuts[1:])]
    for batch in (0, 3):
        idx, off = table_lookups(table, 1024, batch)
        per_bag = np.zeros(1024, dtype=np.int64)
        got = []
        for (a, _), block in zip(zip(cuts, cuts[1:]), blocks):
            bi, bo = table_lookups(block, 1024, batch)
            assert len(bo) == 1025 and bi.min(initial=0) >= 0 and bi.max(initial=-1) < block.rows
            per_bag += np.diff(bo)
            got.append(bi + a)
        assert (per_bag == np.diff(off)).all()               # every bag keeps all its lookups
        assert sorted(np.concatenate(got).tolist()) == sorted(idx.tolist())
    assert sum(b.pooling_factor for b in blocks) == pytest.approx(len(table_lookups(table, 1024, 0)[0]) / 1024)
    assert all(sum(b.reuse_bins) == pytest.approx(1.0) for b in blocks if b.pooling_factor > 0)


def test_a_block_survives_task_json_and_says_where_it_came_from(table):
    block = row_block_table(table, 100, 500, 512)
    again = Table.from_dict(block.to_dict())
    assert again == block and hash(again) == hash(block)
    a, b = table_lookups(block, 256, 1), table_lookups(again, 256, 1)
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
    assert lookup_origin(block) == "row-block"
    info = describe(block)
    assert (info["row_offset"], info["parent"], info["parent_rows"]) == (100, table.name, table.rows)
    assert info["parent_origin"]["origin"] == "generated"
    assert row_block_table(table, 0, table.rows, 512) is table
    assert row_block_table(block, 10, 20, 512).rows == 20          # a block of a block


def test_a_block_carries_its_parents_generator_not_the_parent(table):
    block = row_block_table(table, 100, 500, 512)
    d = block.distribution_params
    assert d["parent"] == table.name and d["parent_rows"] == table.rows
    assert d["parent_index_seed"] == table.index_seed
    assert {k[len("parent."):]: v for k, v in d.items() if k.startswith("parent.")} == table.distribution_params
    assert all(isinstance(v, (int, float, str, bool)) for v in d.values())
    assert row_block_table(block, 10, 20, 512).distribution_params["row_offset"] == 110   # of the first parent


def test_blocks_stored_with_their_parents_task_json_still_read(table):
    block = row_block_table(table, 100, 500, 512)
    old = Table.from_dict({**block.to_dict(), "distribution": {
        "model": "row-block-v1", "row_offset": 100, "parent": json.dumps(table.to_dict(), sort_keys=True)}})
    assert lookup_origin(old) == "row-block" and describe(old) == describe(block)
    a, b = table_lookups(block, 256, 2), table_lookups(old, 256, 2)
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()


@pytest.mark.parametrize("offset,rows,field", [(-1, 5, "row_offset"), (10**9, 5, "row_offset"), (0, 0, "rows"),
                                               (5, 10**9, "rows")])
def test_bad_ranges_name_the_field(table, offset, rows, field):
    with pytest.raises(ShardlabError, match=f"field '{field}'") as e:
        row_block_table(table, offset, rows, 256)
    assert "\n" not in str(e.value) and table.name in str(e.value)


def test_a_table_without_lookups_is_cut_from_lookups_fitted_to_its_bins(table):
    bare = Table("bare", 1000, 16, 2.0, table.reuse_bins)
    block = row_block_table(bare, 0, 10, 256)
    fitted = fit_table_lookups(bare, 256)
    assert lookup_origin(bare) == "none" and lookup_origin(fitted) == "fitted"
    assert describe(block)["parent_origin"] == describe(fitted)            # the fit, recorded
    assert block == row_block_table(fitted, 0, 10, 256)                    # the same block, deterministic
    assert (table_lookups(block, 256, 1)[0] == table_lookups(row_block_table(bare, 0, 10, 256), 256, 1)[0]).all()
    with pytest.raises(ShardlabError, match="field 'distribution'") as e:   # whole, it still has none to measure
        table_lookups(bare, 256)
    assert "shardlab." not in str(e.value)
