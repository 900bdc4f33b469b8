"""The five heuristic sharders: valid, memory-feasible, deterministic by seed, and greedy as
specified (ALGORITHMS.md section 3)."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from shardlab import InfeasibleError, Table, Task, validate_plan
from shardlab.constants import HEURISTIC_METHODS
from shardlab.loads import device_loads
from shardlab.search import base, get_sharder, heuristics, run_sharder, run_sharders, sharder_names
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
    tables = (make_table("a", rows=3_000_000, dim=64), make_table("b", rows=3_000_000, dim=64))
    task = Task("inf", 2, 0.5, tables)  # each table is 0.72 GB
    with pytest.raises(InfeasibleError, match="table 'a'.*GB over"):
        run_sharder(get_sharder("size_greedy"), task)


def test_run_sharders_returns_every_method(small_task):
    plans = run_sharders(small_task, HEURISTICS, seed=1)
    assert list(plans) == HEURISTICS
