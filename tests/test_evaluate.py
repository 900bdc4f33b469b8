"""Measured plan evaluation: per-device compute timed in turn, all-to-all with real gloo ranks,
forward waiting included, Evaluation JSON labelled with its source."""

from __future__ import annotations

import pytest

from shardlab import Placement, Plan
from shardlab.data.lookups import table_lookups
from shardlab.data.tasks import generate_task
from shardlab.evaluate import device_tables, measure_plan, measure_plans
from shardlab.measure.hardware import profile_with
from shardlab.search import get_sharder, run_sharder

FAST = profile_with("cpu", batch_size=256, repeats=3, warmup=1)


@pytest.fixture(scope="module")
def task():
    return generate_task(ntables=6, ngpu=2, mem_cap_gb=1.0, seed=3, dims=[8, 16, 32])


def test_measured_evaluation(task):
    plan = run_sharder(get_sharder("size_greedy"), task)
    ev = measure_plan(task, plan, FAST, lower_bound=False)
    d = ev.to_dict()
    assert d["source"] == "measured:cpu[batch_size=256,repeats=3,warmup=1]"
    assert len(d["per_device"]) == 2 and d["lower_bound_ms"] is None
    for dev in d["per_device"]:
        assert dev["fw_compute_ms"] > 0 and dev["bw_compute_ms"] > 0 and dev["bw_comm_ms"] > 0
        parts = dev["fw_compute_ms"] + dev["bw_compute_ms"] + dev["fw_comm_ms"] + dev["bw_comm_ms"]
        assert dev["total_ms"] == pytest.approx(parts)
    assert d["cost_ms"] == max(dev["total_ms"] for dev in d["per_device"])


def test_an_empty_device_waits_for_the_other(task):
    # Everything on device 0: device 1 computes nothing, so its forward all-to-all must wait
    # for device 0's compute (its delay is 0, device 0's is its compute + bw comm).
    plan = Plan.table_wise(task, [0] * len(task.tables), "all_on_0")
    # batch 2048: compute (~10 ms) dwarfs the all-to-all's noise (~1 ms), as the check needs
    ev = measure_plan(task, plan, profile_with("cpu", batch_size=2048, repeats=3, warmup=1), lower_bound=False)
    busy, idle = ev.per_device
    assert idle.fw_compute_ms == 0 and idle.bw_compute_ms == 0
    assert idle.fw_comm_ms > 0.5 * (busy.fw_compute_ms + busy.bw_compute_ms)


def test_column_blocks_and_row_blocks(task):
    t = task.tables[0]
    half = t.dim // 2
    placements = [Placement(t.name, 0, half, 0, t.rows, 0), Placement(t.name, half, half, 0, t.rows, 1)]
    placements += [Placement(x.name, 0, x.dim, 0, x.rows, 1) for x in task.tables[1:]]
    plan = Plan(task.name, "cw", 2, tuple(placements))
    tables = device_tables(task, plan)
    assert [x.dim for x in tables[0]] == [half] and tables[0][0].name == f"{t.name}[0:{half}]"
    rows = Plan(task.name, "rw", 2, (Placement(t.name, 0, t.dim, 0, 10, 0),
                                     Placement(t.name, 0, t.dim, 10, t.rows - 10, 1),
                                     *placements[2:]))
    blocks = device_tables(task, rows)
    (top,), low = blocks[0], blocks[1][0]
    assert (top.name, top.rows, low.name, low.rows) == (f"{t.name}[r0:10]", 10, f"{t.name}[r10:{t.rows}]", t.rows - 10)
    idx, off = table_lookups(t, task.batch_size, 0)           # the blocks split the parent's lookups
    assert top.pooling_factor + low.pooling_factor == pytest.approx(len(idx) / task.batch_size)
    assert 0 < top.pooling_factor < low.pooling_factor      # 10 rows of thousands serve few lookups
    ev = measure_plan(task, rows, FAST, lower_bound=False)   # row blocks measured like any shard
    assert all(d.fw_compute_ms > 0 and d.bw_compute_ms > 0 for d in ev.per_device)
    twrw = Plan(task.name, "twrw", 2, (Placement(t.name, 0, half, 0, 10, 0), Placement(t.name, 0, half, 10, t.rows - 10, 1),
                                       Placement(t.name, half, half, 0, t.rows, 0), *placements[2:]))
    mixed = device_tables(task, twrw)
    assert [x.name for x in mixed[0]] == [f"{t.name}[r0:10][0:{half}]", f"{t.name}[{half}:{2 * half}]"]


def test_measure_plans_shares_one_bound(task):
    plans = {m: run_sharder(get_sharder(m), task) for m in ("random", "size_greedy", "dim_greedy")}
    evs = measure_plans(task, plans, FAST, progress=False)
    assert list(evs) == list(plans) and [e.method for e in evs.values()] == list(plans)
    bounds = {e.lower_bound_ms for e in evs.values()}
    assert len(bounds) == 1 and next(iter(bounds)) > 0            # one measured bound for all plans
    for m, e in evs.items():
        assert e.source == "measured:cpu[batch_size=256,repeats=3,warmup=1]" and len(e.per_device) == task.ngpu
        assert all(d.fw_compute_ms > 0 or not device_tables(task, plans[m])[d.device] for d in e.per_device)
