"""Task generator: seeds' settings, disjoint train/test tables, memory-feasible, deterministic."""

from __future__ import annotations

import pytest

from shardlab.constants import SEED_DIMS
from shardlab.data.tasks import generate_task, pool_tables
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.search import get_sharder, run_sharder


def _base(name: str) -> str:
    return name.split("@")[0]


def test_train_and_test_tasks_use_disjoint_tables():
    train = {_base(t.name) for s in range(5) for t in generate_task(ntables=60, split="train", seed=s).tables}
    test = {_base(t.name) for s in range(5) for t in generate_task(ntables=60, split="test", seed=s).tables}
    assert train and test and not train & test
    assert {t.name for t in pool_tables("dlrm-synth", "train")}.isdisjoint(
        t.name for t in pool_tables("dlrm-synth", "test"))


def test_task_follows_the_arguments():
    task = generate_task(ntables=40, ngpu=8, mem_cap_gb=2.0, batch_size=4096, seed=7)
    assert (len(task.tables), task.ngpu, task.mem_cap_gb, task.batch_size) == (40, 8, 2.0, 4096)
    assert {t.dim for t in task.tables} <= set(SEED_DIMS)
    assert len({t.dim for t in task.tables}) > 1
    assert all(task.table_bytes(t) <= task.mem_cap_bytes for t in task.tables)
    assert sum(task.table_bytes(t) for t in task.tables) <= 0.9 * 8 * task.mem_cap_bytes
    task.check_feasible()
    run_sharder(get_sharder("size_greedy"), task)


def test_same_seed_same_task_other_seed_other_task():
    assert generate_task(ntables=30, seed=4) == generate_task(ntables=30, seed=4)
    assert generate_task(ntables=30, seed=4) != generate_task(ntables=30, seed=5)


def test_dims_argument_and_errors():
    task = generate_task(ntables=10, dims=[16])
    assert {t.dim for t in task.tables} == {16}
    with pytest.raises(ShardlabError, match="'dims'"):
        generate_task(ntables=10, dims=[6])
    with pytest.raises(ShardlabError, match="'ntables'"):
        generate_task(ntables=10_000_000)                 # more than the split's copies at every dim
    with pytest.raises(ShardlabError, match="'ntables'"):
        generate_task(ntables=0)
    with pytest.raises(ShardlabError, match="'split'"):
        generate_task(ntables=10, split="validation")
    with pytest.raises(InfeasibleError, match="raise mem_cap_gb or ngpu"):
        generate_task(ntables=400, ngpu=1, mem_cap_gb=0.05, split="all")


def test_more_tables_than_the_split_holds_are_its_copies_and_say_so():
    """A pool task past the split's size draws the split's tables copied at other dims (lookups
    unchanged); the name and every copy's source say so; the same seed gives the same task."""
    n = len(pool_tables("dlrm-synth", "test"))
    task = generate_task(ntables=n + 200, ngpu=8, mem_cap_gb=16.0, seed=4)
    names = [t.name for t in task.tables]
    assert len(set(names)) == n + 200 and task.name.startswith("dlrm-synth-test-augmented-")
    assert all("@d" in t.name and t.source.startswith("augmented: dlrm-synth table ") for t in task.tables)
    base = {t.name: t for t in pool_tables("dlrm-synth", "test")}
    for t in task.tables[:50]:
        orig = base[t.name.split("@d")[0]]
        assert (t.rows, t.pooling_factor, t.reuse_bins, t.dim) == (orig.rows, orig.pooling_factor, orig.reuse_bins,
                                                                  int(t.name.split("@d")[1]))
    assert generate_task(ntables=n + 200, ngpu=8, mem_cap_gb=16.0, seed=4) == task
    small = generate_task(ntables=n, ngpu=8, mem_cap_gb=16.0, seed=4)        # at the split's size: no copies
    assert "augmented" not in small.name and not any("@d" in t.name for t in small.tables)
