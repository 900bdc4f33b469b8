"""The five heuristic sharders: valid, memory-feasible, deterministic by seed, and greedy as
specified (docs/methods.md)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest

from shardlab import InfeasibleError, Table, Task, validate_plan
from shardlab.constants import HEURISTIC_METHODS
from shardlab.loads import device_loads
from shardlab.torchrec.export import export_torchrec, sharding_plan_from_export
from shardlab.search import get_sharder, registry as base, heuristics, run_sharder, run_sharders, sharder_names
from shardlab.search.heuristics import WEIGHTS
from shardlab.errors import ShardlabError
from tests.conftest import UNIFORM_BINS, make_table

HEURISTICS = list(HEURISTIC_METHODS)


def test_registry_has_the_five():
    assert sharder_names()[:5] == HEURISTICS
    with pytest.raises(ShardlabError, match="'nope' is not a sharder"):
        get_sharder("nope")


def test_heuristics_module_registers_exactly_the_listed_methods(monkeypatch):
    """search/heuristics.py registers exactly constants.HEURISTIC_METHODS, in that order (run
    again on a copy of the module with registration recorded, the registry left untouched)."""
    seen = []
    monkeypatch.setattr(base, "register_sharder", lambda name, *_, **__: seen.append(name))
    spec = importlib.util.spec_from_file_location("_heuristics_again", heuristics.__file__)
    again = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, again)   # its dataclasses look themselves up there
    spec.loader.exec_module(again)
    assert tuple(seen) == HEURISTIC_METHODS


@pytest.mark.parametrize("method", HEURISTICS)
def test_valid_feasible_and_deterministic(method, small_task):
    a = run_sharder(get_sharder(method), small_task, seed=5)
    b = run_sharder(get_sharder(method), small_task, seed=5)
    validate_plan(small_task, a)
    assert a.placements == b.placements
    assert a.method == method and a.seed == 5 and a.search_seconds >= 0


def test_random_depends_on_seed():
    task = Task("r", 4, 1.0, tuple(make_table(f"t{i}") for i in range(40)))
    plans = {run_sharder(get_sharder("random"), task, seed=s).placements for s in range(5)}
    assert len(plans) > 1


def test_greedy_balances_weight_like_lpt():
    # dims 32, 28, 24, 20, 16, 12 on 2 devices: LPT gives {32, 20, 16} = 68 vs {28, 24, 12} = 64.
    tables = tuple(make_table(f"t{d}", dim=d) for d in (12, 20, 32, 16, 28, 24))
    task = Task("lpt", 2, 1.0, tables)
    plan = run_sharder(get_sharder("dim_greedy"), task)
    sums = sorted(l.dim_sum for l in device_loads(task, plan))
    assert sums == [64, 68]
    dev = {p.table: p.device for p in plan.placements}
    assert dev["t32"] != dev["t28"] and dev["t24"] == dev["t28"]


def test_greedy_ties_go_to_less_memory():
    # Equal dims, so equal weights: after big -> 0 and s1 -> 1 the weights tie again, and s2
    # must go to the device with less memory (1, not next to the big table).
    big = make_table("big", rows=100_000, dim=8)
    tables = (big, make_table("s1", rows=10, dim=8), make_table("s2", rows=10, dim=8))
    plan = run_sharder(get_sharder("dim_greedy"), Task("tie", 2, 1.0, tables))
    dev = {p.table: p.device for p in plan.placements}
    assert dev["big"] == 0 and dev["s1"] == 1 and dev["s2"] == 1


def test_weights_follow_the_spec():
    t = Table("w", 1000, 16, 2.5, UNIFORM_BINS)
    assert WEIGHTS["size_greedy"](t) == 16000
    assert WEIGHTS["dim_greedy"](t) == 16
    assert WEIGHTS["lookup_greedy"](t) == 40
    assert WEIGHTS["size_lookup_greedy"](t) == pytest.approx(40 * math.log10(1000))


@pytest.mark.parametrize("method", HEURISTICS)
def test_memory_feasible_under_a_tight_cap(method):
    # 8 tables of 0.45 GB on 4 devices of 1 GB: every plan must put exactly 2 per device.
    tables = tuple(make_table(f"t{i}", rows=3_000_000, dim=40) for i in range(8))
    task = Task("tight", 4, 1.0, tables)
    for seed in range(3):
        plan = run_sharder(get_sharder(method), task, seed)
        assert all(len(l.tables) == 2 for l in device_loads(task, plan))


def test_infeasible_names_table():
    tables = (make_table("a", rows=6_000_000, dim=64), make_table("b", rows=300, dim=64))
    task = Task("inf", 2, 0.5, tables)  # a is 1.44 GB: even halved, 0.72 GB per 0.5 GB device
    for method in HEURISTICS:
        with pytest.raises(InfeasibleError, match="table 'a' fits no device even in 2 row blocks.*GB over") as e:
            run_sharder(get_sharder(method), task)
        assert "\n" not in str(e.value)
    both = Task("inf2", 2, 0.5, (make_table("a", rows=3_000_000, dim=64), make_table("b", rows=3_000_000, dim=64)))
    with pytest.raises(InfeasibleError, match="GB in all, .* GB over 2 x 0.5 GB"):   # each splits, not both
        run_sharder(get_sharder("size_greedy"), both)


@pytest.mark.parametrize("method", HEURISTICS)
def test_a_table_that_fits_no_device_is_split_into_the_fewest_equal_row_blocks(method):
    big = make_table("big", rows=10_000_001, dim=64)          # 2.4 GB: 3 blocks of 0.8 GB on 1 GB devices
    small = tuple(make_table(f"s{i}", rows=100_000, dim=32) for i in range(6))
    task = Task("rows", 4, 1.0, (big, *small))
    plan = run_sharder(get_sharder(method), task, seed=2)
    blocks = sorted((p.row_offset, p.rows, p.device) for p in plan.placements if p.table == "big")
    assert [b[1] for b in blocks] == [3_333_334, 3_333_334, 3_333_333]
    assert [b[0] for b in blocks] == [0, 3_333_334, 6_666_668]
    assert [b[2] for b in blocks] == [0, 1, 2]                   # TorchRec's row-wise layout
    assert all(p.rows == 100_000 and p.row_offset == 0 for p in plan.placements if p.table != "big")
    validate_plan(task, plan)
    data = json.loads(json.dumps(export_torchrec(task, plan)))    # exports and rebuilds
    assert data["plan"]["big"]["sharding_type"] == "row_wise" and data["plan"]["big"]["ranks"] == [0, 1, 2, 3]
    shards = sharding_plan_from_export(data, task).plan["sparse.ebc"]["big"].sharding_spec.shards
    assert [list(x.shard_sizes) for x in shards] == [[3_333_334, 64], [3_333_334, 64], [3_333_333, 64], [0, 64]]


def test_row_blocks_go_elsewhere_when_the_first_devices_are_full():
    bigs = tuple(make_table(f"big{i}", rows=10_000_001, dim=64) for i in range(2))   # 2.4 GB each
    task = Task("rows2", 6, 1.0, bigs)
    plan = run_sharder(get_sharder("size_greedy"), task)
    homes = {name: sorted(p.device for p in plan.placements if p.table == name) for name in ("big0", "big1")}
    assert homes == {"big0": [0, 1, 2], "big1": [3, 4, 5]}
    validate_plan(task, plan)


def test_run_sharders_returns_every_method(small_task):
    plans = run_sharders(small_task, HEURISTICS, seed=1)
    assert list(plans) == HEURISTICS
