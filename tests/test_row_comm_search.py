"""NeuroShard costing row layouts with a row-wise comm model (search/row_wise.py, ``row_aware_comm``): the pattern
the search charges is the one the evaluators measure and predict for the finished plan."""

import numpy as np

from shardlab.costmodel.rowwise_comm import RowWiseComm
from shardlab.costmodel.bundle import load_bundle, models_dir
from shardlab.evaluate.exchange import comm_pattern
from shardlab.plan import validate_plan
from shardlab.search import get_sharder, run_sharder
from shardlab.search.blocks import Block
from shardlab.costmodel.rowwise_comm import WithRowWise
from shardlab.schedule import batch_rows
from shardlab.search.row_wise import row_aware_comm, row_pattern
from shardlab.search.row_wise import RowBlocks, RowChoice, oversized
from tests.test_row_wise_search import _task


def _shipped():
    return RowWiseComm.load(str(models_dir("cpu") / "analytic_rowwise_comm.json"))


def test_slices_split_a_batch_as_the_profiler_does():
    from shardlab.measure.comm import batch_rows as profiler_rows

    for b, g in ((4096, 4), (4097, 8), (10, 3)):
        assert batch_rows(b, g) == profiler_rows(b, g)


def test_the_search_charges_the_pattern_the_evaluators_use():
    task = _task(ngpu=4, share=0.45)
    plan = run_sharder(get_sharder("neuroshard[rowwise_comm=shipped,profile=cpu]"), task)  # the cpu profile's row-wise comm model
    validate_plan(task, plan)
    assert plan.metadata["row_wise_comm"].startswith("analytic-rowwise")
    rows = RowBlocks(task, Block)
    choice = {i: RowChoice(plan.metadata["row_wise"][task.tables[i].name]["blocks"],
                           plan.metadata["row_wise"][task.tables[i].name]["first_device"]) for i in oversized(task)}
    offset, pattern = row_pattern(rows, choice, 4096)
    dims, rw = comm_pattern(task, plan, 4096)
    shard_dims = [sum(p.cols for p in plan.placements if p.device == g) for g in range(4)]
    assert np.allclose(np.array(shard_dims) - offset, dims)
    assert pattern == rw.to_dict()


def test_a_table_over_every_device_leaves_the_all_to_all_and_adds_the_collectives():
    task = _task(ngpu=4, share=0.45)
    i = oversized(task)[0]
    rows, model = RowBlocks(task, Block), _shipped()
    offset, pattern = row_pattern(rows, {i: RowChoice(4, 0)}, 4096)
    assert np.allclose(offset, task.tables[i].dim) and pattern["dim"] == task.tables[i].dim
    counts = np.array(pattern["index_counts"])
    assert counts.shape == (4, 4) and (counts > 0).all()            # every rank to every owner
    offset2, pattern2 = row_pattern(rows, {i: RowChoice(2, 0)}, 4096)
    assert not offset2.any() and pattern2["dim"] == 0
    assert not np.array(pattern2["index_counts"])[:, 2:].any()     # only the two holders get lookups
    base = load_bundle("analytic").comm_for(4)[0]
    comm = row_aware_comm(base, model, rows, {i: RowChoice(4, 0)})
    d = [[200, 180, 190, 210]]
    want = np.asarray(base.predict(np.array(d) - offset, None)) + model.increment(4, pattern)[None]
    assert np.allclose(comm.predict(d, None), want)
    assert np.allclose(WithRowWise(base, np.zeros((4, 2)), np.full(4, 1000)).predict(d, None),
                       base.predict([[0, 0, 0, 0]], None))              # dim sums floored at 0


def test_by_default_row_blocks_count_on_their_devices_all_to_all():
    task = _task(ngpu=4, share=0.45)
    plain = run_sharder(get_sharder("neuroshard"), task)
    assert "row_wise_comm" not in plain.metadata and plain.metadata["row_wise"]
    assert get_sharder("neuroshard").rowwise_model() is None
    h100 = get_sharder("neuroshard[rowwise_comm=shipped]", profile="h100")   # ships no row-wise model of its own:
    assert h100.rowwise_model() is h100.bundle().comm                       # its bundle's GPU-cluster comm costs them
    assert h100.rowwise_model().source.startswith("analytic:h100-nvlink4+ib400")
    fitted = _shipped()
    assert get_sharder("neuroshard", rowwise_comm=fitted).rowwise_model() is fitted
