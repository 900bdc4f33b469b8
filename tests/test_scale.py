"""Scale and bounds: O(1) table lookups, the search's ngpu bound, heuristics at 4096 GPUs,
and Plan JSON refusing unknown fields."""

from __future__ import annotations

import time

import pytest

from shardlab import constants as C
from shardlab import loads
from shardlab.errors import ShardlabError
from shardlab.plan import Plan, validate_plan
from shardlab.search import get_sharder, run_sharder
from shardlab.tables import Table, Task

BINS = (1.0,) + (0.0,) * 16


def big_task(n: int, ngpu: int = 128, cap_gb: float = 4.0) -> Task:
    """``n`` small tables built directly (rows 1000..51000, dim 4..128)."""
    tables = tuple(Table(f"t{i}", 1000 + (i * 7919) % 50000, 4 * (1 + i % 32), 1.0 + i % 5, BINS)
                   for i in range(n))
    return Task("big", ngpu, cap_gb, tables)


def test_task_indexes_tables_by_name():
    task = big_task(70_000)
    assert len(task._index) == 70_000
    assert task.table("t69999") is task.tables[-1] and task.table("t0") is task.tables[0]
    assert task.table_index("t69999") == 69_999 and task.has_table("t5") and not task.has_table("x")
    with pytest.raises(KeyError, match="no table 'x'"):
        task.table("x")
    # the index is not part of equality or repr
    assert task == big_task(70_000) and "_index" not in repr(big_task(2))

    def lookups(name: str) -> float:
        start = time.perf_counter()
        for _ in range(2000):
            task.table(name)
        return time.perf_counter() - start

    first, last = min(lookups("t0") for _ in range(3)), min(lookups("t69999") for _ in range(3))
    assert last < 20 * first + 1e-3  # a linear scan would be ~70,000x slower on the last table


def test_70k_tables_shard_validate_and_loads_in_seconds():
    task = big_task(70_000)
    start = time.perf_counter()
    plan = get_sharder("lookup_greedy").shard(task, 0)
    validate_plan(task, plan)
    got = loads.device_loads(task, plan)
    assert len(got) == 128 and sum(len(d.tables) for d in got) == 70_000
    assert time.perf_counter() - start < 30  # minutes before the index (device_loads alone 52 s)


def test_run_sharder_refuses_over_the_ngpu_bound_at_once():
    task = big_task(3, ngpu=C.MAX_SEARCH_GPUS + 1, cap_gb=1.0)
    start = time.perf_counter()
    with pytest.raises(ShardlabError) as err:
        run_sharder(get_sharder("size_greedy"), task)
    assert time.perf_counter() - start < 1.0
    msg = str(err.value)
    assert "'ngpu'" in msg and str(C.MAX_SEARCH_GPUS) in msg and "\n" not in msg


@pytest.mark.parametrize("method", ["random", "size_greedy", "dim_greedy", "lookup_greedy",
                                    "size_lookup_greedy"])
def test_heuristics_answer_at_4096_gpus(method):
    task = big_task(200, ngpu=C.MAX_SEARCH_GPUS, cap_gb=8.0)
    start = time.perf_counter()
    plan = run_sharder(get_sharder(method), task, 0)
    assert plan.ngpu == 4096 and len(plan.placements) == 200
    assert time.perf_counter() - start < 10


def _plan_json() -> dict:
    return {"task": "p", "method": "x", "ngpu": 2, "seed": 0, "search_seconds": None,
            "placements": [{"table": "a", "col_offset": 0, "cols": 4, "row_offset": 0, "rows": 10,
                            "device": 1}]}


def test_plan_json_round_trips_and_refuses_unknown_fields():
    assert Plan.from_dict(_plan_json()).to_dict() == _plan_json()
    bad = {**_plan_json(), "placement": []}
    with pytest.raises(ShardlabError, match="field 'placement' is not a Plan field"):
        Plan.from_dict(bad)
    bad = _plan_json()
    bad["placements"][0]["shard"] = 3
    with pytest.raises(ShardlabError, match="table 'a'.*field 'shard' is not a Placement field"):
        Plan.from_dict(bad)


@pytest.mark.parametrize("method,bound", [("neuroshard", C.MAX_NEUROSHARD_GPUS), ("torchrec", C.MAX_TORCHREC_GPUS),
                                          ("torchrec_free", C.MAX_TORCHREC_GPUS)])
def test_slow_sharders_refuse_over_their_bound_at_once(method, bound):
    task = big_task(20, ngpu=bound + 1, cap_gb=8.0)
    start = time.perf_counter()
    with pytest.raises(ShardlabError, match=f"field 'ngpu' = {bound + 1} is over .* bound of {bound} devices"):
        get_sharder(method).shard(task, 0)
    assert time.perf_counter() - start < 1.0
