"""Table and Task: validation with one-line errors, memory accounting, JSON round trips."""

from __future__ import annotations

import json

import pytest

from shardlab import InfeasibleError, ShardlabError, Table, Task
from shardlab.constants import GB
from shardlab.io import load_task, read_json, save_task
from tests.conftest import UNIFORM_BINS, make_table


def test_valid_table_and_size():
    t = make_table("a", rows=100, dim=8)
    assert t.size == 800
    assert t.rows == 100 and isinstance(t.rows, int)


@pytest.mark.parametrize("kwargs, field", [
    (dict(dim=30), "dim"),
    (dict(dim=0), "dim"),
    (dict(rows=-5), "rows"),
    (dict(rows=10.5), "rows"),
    (dict(pooling_factor=-1.0), "pooling_factor"),
    (dict(pooling_factor=float("nan")), "pooling_factor"),
    (dict(reuse_bins=(0.5,) * 17), "reuse_bins"),
    (dict(reuse_bins=(1.0,) + (0.0,) * 15), "reuse_bins"),
    (dict(reuse_bins=(-0.1, 1.1) + (0.0,) * 15), "reuse_bins"),
    (dict(name=""), "name"),
])
def test_invalid_table_names_the_field(kwargs, field):
    args = dict(name="t17", rows=100, dim=8, pooling_factor=1.0, reuse_bins=UNIFORM_BINS)
    args.update(kwargs)
    with pytest.raises(ShardlabError) as e:
        Table(**args)
    msg = str(e.value)
    assert f"'{field}'" in msg and "\n" not in msg
    if field != "name":
        assert "t17" in msg


def test_empty_table_may_have_zero_bins_only_with_zero_pooling():
    Table("idle", 100, 4, 0.0, (0.0,) * 17)
    with pytest.raises(ShardlabError, match="reuse_bins"):
        Table("busy", 100, 4, 1.0, (0.0,) * 17)


def test_task_validation_names_field():
    t = make_table("a")
    with pytest.raises(ShardlabError, match="'ngpu'"):
        Task("x", 0, 1.0, (t,))
    with pytest.raises(ShardlabError, match="'mem_cap_gb'"):
        Task("x", 2, 0.0, (t,))
    with pytest.raises(ShardlabError, match="'weights_precision'"):
        Task("x", 2, 1.0, (t,), weights_precision="bf16")
    with pytest.raises(ShardlabError, match="'optimizer'"):
        Task("x", 2, 1.0, (t,), optimizer="adam")
    with pytest.raises(ShardlabError, match="table 'a' appears twice"):
        Task("x", 2, 1.0, (t, t))


def test_memory_accounting_precisions_and_optimizers():
    t = Table("m", 1000, 64, 1.0, UNIFORM_BINS)
    assert t.memory_bytes("fp32", "exact_sgd") == 1000 * 64 * 4
    assert t.memory_bytes("fp16", "exact_sgd") == 1000 * 64 * 2
    assert t.memory_bytes("fp32", "exact_rowwise_adagrad") == 1000 * 64 * 4 + 1000 * 4
    assert t.memory_bytes("fp16", "exact_adagrad") == 1000 * 64 * (2 + 4)
    task = Task("m", 2, 1.0, (t,), weights_precision="fp16", optimizer="exact_rowwise_adagrad")
    assert task.table_bytes(t) == 1000 * 64 * 2 + 1000 * 4
    assert task.block_bytes(500, 32) == 500 * 32 * 2 + 500 * 4


def test_infeasible_task_names_table_and_excess_gb():
    big = Table("huge", 10_000_000, 128, 1.0, UNIFORM_BINS)  # 4.77 GB in fp32
    task = Task("inf", 4, 4.0, (make_table("ok"), big))
    with pytest.raises(InfeasibleError) as e:
        task.check_feasible()
    excess = (10_000_000 * 128 * 4 - 4 * GB) / GB
    assert e.value.table == "huge"
    assert e.value.excess_gb == pytest.approx(excess)
    assert "huge" in str(e.value) and f"{excess:.3f} GB over" in str(e.value)
    task.check_feasible(column_wise=True)  # halves of 2.4 GB fit


def test_infeasible_in_total():
    tables = tuple(Table(f"t{i}", 2_000_000, 128, 1.0, UNIFORM_BINS) for i in range(5))  # 0.95 GB each
    with pytest.raises(InfeasibleError, match="in all"):
        Task("tot", 2, 2.0, tables).check_feasible()


def test_task_json_round_trip(tmp_path):
    t1 = Table("t1", 2500000, 64, 12.3, tuple([0.42, 0.15] + [0.43 / 15] * 15), source="x",
               index_seed=7, distribution={"model": "zipf-nb-v1", "alpha": 1.1})
    task = Task("rt", 4, 4.0, (t1, make_table("t2")), 65536, "fp16", "exact_rowwise_adagrad")
    path = save_task(task, tmp_path / "task.json")
    assert load_task(path) == task
    raw = read_json(path)
    assert raw["tables"][0]["distribution"] == {"alpha": 1.1, "model": "zipf-nb-v1"}
    assert set(raw) == {"name", "ngpu", "mem_cap_gb", "batch_size", "weights_precision",
                        "optimizer", "tables"}


def test_task_json_errors_name_field(tmp_path):
    good = Task("j", 2, 1.0, (make_table("a"),)).to_dict()
    bad = json.loads(json.dumps(good))
    del bad["tables"][0]["dim"]
    with pytest.raises(ShardlabError, match="table 'a': field 'dim' is missing"):
        Task.from_dict(bad)
    bad = json.loads(json.dumps(good))
    bad["tables"][0]["colour"] = "red"
    with pytest.raises(ShardlabError, match="'colour' is not a Table field"):
        Task.from_dict(bad)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ShardlabError, match="not valid JSON"):
        load_task(tmp_path / "broken.json")
    with pytest.raises(ShardlabError, match="no such file"):
        load_task(tmp_path / "absent.json")


def test_tables_are_immutable():
    t = make_table("a")
    with pytest.raises(AttributeError):
        t.dim = 8  # type: ignore[misc]
