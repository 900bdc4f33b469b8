"""Row-wise sharding's collectives with real gloo ranks: indices go to
the owners of their rows, partial sums are reduce-scattered, slice gradients all-gathered; the
measured sample records the pattern; bad patterns are one-line errors naming the field."""

from __future__ import annotations

import pytest

from shardlab import ShardlabError
from shardlab.measure.comm import CommBench, check_rowwise_exchange
from shardlab.measure.records import CommRecord
from shardlab.measure.rowwise_comm import RowWise, owner_counts, rowwise_of


def test_the_pattern_is_checked():
    assert RowWise().empty and not RowWise(8).empty and not RowWise(0, ((0, 1), (2, 0))).empty
    for bad, field in ((RowWise, {"dim": -1}), (RowWise, {"index_counts": ((1, 2),)}),
                       (RowWise, {"index_counts": ((0, -1), (0, 0))})):
        with pytest.raises(ShardlabError, match=f"'{next(iter(field))}'") as e:
            bad(**field)
        assert "\n" not in str(e.value)
    with pytest.raises(ShardlabError, match="'index_counts'"):
        RowWise(4, ((0, 1), (1, 0))).check(3)
    assert rowwise_of(RowWise(4, ((0, 1), (1, 0))).to_dict()) == RowWise(4, ((0, 1), (1, 0)))
    assert owner_counts(2, [3, 2], [(1, 2.0)]) == [[0, 6], [0, 4]]


def test_rowwise_collectives_move_what_they_should_and_are_timed():
    rw = RowWise(16, ((3, 5), (7, 2)))
    with CommBench(2, 64, timeout_s=60) as bench:
        got = check_rowwise_exchange(bench, rw)
        for rank, g in enumerate(got):
            assert g["summed"] == [3.0]                     # (0 + 1) + (1 + 1): summed over ranks
            assert g["gathered"] == [[0.0], [1.0]]          # every rank's slice gradient, in rank order
            assert g["index_sources"] == [0, 1]
            assert g["indices_received"] == sum(row[rank] for row in rw.index_counts)
        s = bench.measure([8, 8], None, repeats=3, warmup=1, rowwise=rw)
        plain = bench.measure([8, 8], None, repeats=3, warmup=1)
    assert s.rowwise == rw.to_dict() and plain.rowwise is None
    assert all(x > 0 for x in s.fw_comm_ms + s.bw_comm_ms)
    assert CommRecord.from_dict(s.to_dict()) == s


def test_comm_pattern_of_table_row_and_table_row_wise_plans():
    from shardlab import Placement, Plan
    from shardlab.data.tasks import generate_task
    from shardlab.evaluate import device_tables
    from shardlab.evaluate.exchange import comm_pattern

    task = generate_task(ntables=4, ngpu=3, mem_cap_gb=1.0, seed=3, dims=[8, 16])
    a, b, *rest = task.tables
    tw = Plan.table_wise(task, [0, 1, 2, 0], "tw")
    dims, rw = comm_pattern(task, tw, 96)
    assert dims == [a.dim + rest[1].dim, b.dim, rest[0].dim] and rw.empty      # no row-wise traffic
    third = a.rows // 3
    row_wise = [Placement(a.name, 0, a.dim, k * third, third if k < 2 else a.rows - 2 * third, k) for k in range(3)]
    group = [Placement(b.name, 0, b.dim, 0, 5, 1), Placement(b.name, 0, b.dim, 5, b.rows - 5, 2)]
    whole = [Placement(t.name, 0, t.dim, 0, t.rows, 0) for t in rest]
    plan = Plan(task.name, "mixed", 3, tuple(row_wise + group + whole))
    dims, rw = comm_pattern(task, plan, 96)
    assert rw.dim == a.dim                                   # a: row-wise over all 3 ranks
    assert dims == [sum(t.dim for t in rest), b.dim, b.dim]  # b: each holder's partial sums to all
    pooling = {x.name: x.pooling_factor for d in device_tables(task, plan) for x in d}
    blocks_of_a = [n for n in pooling if n.startswith(f"{a.name}[r")]
    assert len(blocks_of_a) == 3
    # rank r sends ~ pooling(block on o) x its 32 samples to every owner o of a row block
    a0 = pooling[f"{a.name}[r0:{third}]"]
    assert rw.index_counts[2][0] == round(a0 * 32)
    assert rw.index_counts[0][1] >= round(pooling[f"{b.name}[r0:5]"] * 32)
