"""Row-range blocks (issue 18, must-show 1): a block's lookups are exactly its parent's that
fall in its rows, re-numbered; its load is measured; it survives Task JSON; bad ranges and
tables without lookups are one-line errors naming the field."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab import ShardlabError
from shardlab.data.lookups import describe, lookup_origin, row_block, table_lookups
from shardlab.data.tasks import generate_task
from shardlab.tables import Table


@pytest.fixture(scope="module")
def table():
    task = generate_task(ntables=8, ngpu=2, seed=4)
    return max(task.tables, key=lambda t: t.pooling_factor * (t.rows > 1000))


def test_blocks_partition_the_parents_lookups(table):
    cuts = [0, 7, table.rows // 3, table.rows]
    blocks = [row_block(table, a, b - a, 1024) for a, b in zip(cuts, cuts[1:])]
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
    block = row_block(table, 100, 500, 512)
    again = Table.from_dict(block.to_dict())
    assert again == block and hash(again) == hash(block)
    a, b = table_lookups(block, 256, 1), table_lookups(again, 256, 1)
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
    assert lookup_origin(block) == "row-block"
    info = describe(block)
    assert (info["row_offset"], info["parent"], info["parent_rows"]) == (100, table.name, table.rows)
    assert info["parent_origin"]["origin"] == "generated"
    assert row_block(table, 0, table.rows, 512) is table
    assert row_block(block, 10, 20, 512).rows == 20          # a block of a block


@pytest.mark.parametrize("offset,rows,field", [(-1, 5, "row_offset"), (10**9, 5, "row_offset"), (0, 0, "rows"),
                                               (5, 10**9, "rows")])
def test_bad_ranges_name_the_field(table, offset, rows, field):
    with pytest.raises(ShardlabError, match=f"field '{field}'") as e:
        row_block(table, offset, rows, 256)
    assert "\n" not in str(e.value) and table.name in str(e.value)


def test_a_table_without_lookups_is_refused(table):
    bare = Table("bare", 1000, 16, 2.0, table.reuse_bins)
    with pytest.raises(ShardlabError, match="field 'distribution'"):
        row_block(bare, 0, 10, 256)
