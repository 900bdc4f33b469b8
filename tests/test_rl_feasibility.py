"""DreamShard and AutoShard never fail where a plan exists: on memory-tight random
tasks where ``size_greedy`` finds a plan, both shipped policies find one too; an impossible task
is the one-line infeasibility error naming the table and the GB short."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab import constants as C
from shardlab.data.tasks import pool_tables
from shardlab.errors import InfeasibleError
from shardlab.plan import validate_plan
from shardlab.search import get_sharder, run_sharder
from shardlab.search.feasibility import FeasibleMask, pack
from shardlab.tables import Task


def tight_task(seed: int) -> Task:
    """A random task whose cap is barely above its tables' share of the devices (1.00-1.15x),
    and never below its largest table."""
    rng = np.random.default_rng([seed, 16])
    pool = pool_tables(C.DEFAULT_POOL, "test")
    n, g = int(rng.integers(5, 31)), int(rng.integers(2, 9))
    dims = rng.choice([8, 16, 32, 64], size=n)
    tables = [pool[i].with_dim(int(d)) for i, d in zip(rng.choice(len(pool), size=n, replace=False), dims)]
    probe = Task(f"tight-{seed}", g, 1.0, tuple(tables), batch_size=4096)
    sizes = [probe.table_bytes(t) for t in tables]
    cap = max(max(sizes), sum(sizes) / g * rng.uniform(1.0, 1.15))
    return Task(f"tight-{seed}", g, cap / C.GB, tuple(tables), batch_size=4096)


def test_both_policies_find_a_plan_on_every_tight_task_size_greedy_solves():
    sharders = {m: get_sharder(m) for m in ("dreamshard", "autoshard")}
    solved = 0
    for seed in range(200):
        task = tight_task(seed)
        try:
            run_sharder(get_sharder("size_greedy"), task)
        except InfeasibleError:
            continue
        solved += 1
        for name, sharder in sharders.items():
            validate_plan(task, run_sharder(sharder, task))      # memory cap included
    assert solved >= 150, "the random tasks must mostly be solvable for the property to mean much"


def test_an_impossible_task_is_one_line_naming_the_table_and_the_gb_short():
    """A table larger than a device is cut into row blocks, so impossible means: a table whose
    row blocks fit no device even one per device, or more bytes than all devices hold."""
    task = tight_task(3)
    big = max(task.tables, key=task.table_bytes)
    blocks = Task(task.name, task.ngpu, task.table_bytes(big) / task.ngpu * 0.9 / C.GB, task.tables,
                  batch_size=task.batch_size)
    total = sum(task.table_bytes(t) for t in task.tables)
    full = Task(task.name, task.ngpu, total / task.ngpu * 0.95 / C.GB, task.tables, batch_size=task.batch_size)
    assert task.table_bytes(big) / task.ngpu <= full.mem_cap_bytes     # the big one splits; the sum cannot fit
    for name in ("dreamshard", "autoshard"):
        with pytest.raises(InfeasibleError, match=rf"table '{big.name}' fits no device even in {task.ngpu} row "
                                                  r"blocks: each needs [\d.]+ GB, [\d.]+ GB over") as e:
            run_sharder(get_sharder(name), blocks)
        assert "\n" not in str(e.value) and e.value.table == big.name
        with pytest.raises(InfeasibleError, match=r"tables need [\d.]+ GB in all, [\d.]+ GB over") as e:
            run_sharder(get_sharder(name), full)
        assert "\n" not in str(e.value)


def test_the_mask_keeps_a_witness_so_no_random_episode_is_stranded():
    """Uniformly random choices among the allowed devices always complete, on a task where the
    plain fit mask strands most random episodes."""
    task = tight_task(7)
    order = list(range(len(task.tables)))
    n = 64
    guard = FeasibleMask(task, order, n)
    mem = np.zeros((n, task.ngpu))
    rng = np.random.default_rng(0)
    for t in range(len(order)):
        ok = guard.allowed(t, mem)
        assert ok.any(axis=1).all()
        a = np.array([rng.choice(np.flatnonzero(row)) for row in ok])
        guard.chose(t, a)
        mem[np.arange(n), a] += guard.sizes[t]
    assert (mem <= task.mem_cap_bytes).all()
    stranded = 0
    for b in range(n):       # the same random walk with the fit mask alone
        free = np.full(task.ngpu, float(task.mem_cap_bytes))
        for s in guard.sizes:
            fit = np.flatnonzero(free >= s)
            if not len(fit):
                stranded += 1
                break
            free[rng.choice(fit)] -= s
    assert stranded > 0, "pick a tighter task: the fit mask alone never failed on this one"


def test_best_fit_decreasing_packs_or_says_it_cannot():
    assert pack(np.array([10.0, 6.0]), np.array([6.0, 5.0, 5.0])) is not None
    assert pack(np.array([10.0, 6.0]), np.array([6.0, 6.0, 5.0])) is None
    got = pack(np.array([10.0, 6.0]), np.array([5.0, 6.0, 5.0]))
    assert np.bincount(got, weights=[5.0, 6.0, 5.0], minlength=2).tolist() == [10.0, 6.0]
