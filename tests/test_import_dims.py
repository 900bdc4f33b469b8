"""Imported tables keep their own dims unless dims are asked for; a table larger than one device
is kept (the sharders cut it into row blocks), one that does not fit even in a row block per
device is an InfeasibleError naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardlab.constants import SEED_DIMS
from shardlab.data.importers import load_table_list
from shardlab.data.tasks import generate_task, task_dims
from shardlab.errors import InfeasibleError

KAGGLE = Path(__file__).resolve().parents[1] / "datasets" / "criteo" / "criteo_kaggle_dac.json"


@pytest.fixture(scope="module")
def kaggle():
    return load_table_list(KAGGLE, batch_size=1024, assume_zipf=1.05)


def test_import_keeps_dims(kaggle):
    assert {t.dim for t in kaggle} == {16}
    dims, note = task_dims(None, imported=True)
    task = generate_task(ntables=len(kaggle), ngpu=2, mem_cap_gb=4, dims=dims, tables=kaggle)
    assert note == "dims kept" and dims is None
    assert sorted(task.tables, key=lambda t: t.name) == sorted(kaggle, key=lambda t: t.name)
    assert generate_task(ntables=10, ngpu=2, mem_cap_gb=4, dims=None, tables=kaggle, seed=3) == \
        generate_task(ntables=10, ngpu=2, mem_cap_gb=4, dims=None, tables=kaggle, seed=3)


def test_dims_drawn_when_asked(kaggle):
    dims, note = task_dims([8, 32], imported=True)
    assert note == "dims drawn from 8,32"
    task = generate_task(ntables=len(kaggle), ngpu=2, mem_cap_gb=4, dims=dims, tables=kaggle)
    assert {t.dim for t in task.tables} <= {8, 32}
    assert task_dims(None, imported=False) == (tuple(SEED_DIMS), "dims drawn from "
                                               + ",".join(map(str, SEED_DIMS)))


def test_table_too_big_at_its_dim_is_kept_for_row_blocks_or_named(kaggle):
    big = max(kaggle, key=lambda t: t.rows)  # ~10M rows x 16 x 4 B = 0.60 GB, the only one over 0.55
    task = generate_task(ntables=len(kaggle), ngpu=8, mem_cap_gb=0.55, dims=None, tables=kaggle)
    assert task.table(big.name) == big and task.table_bytes(big) > task.mem_cap_bytes   # the sharders cut it
    # 8 row blocks of 0.075 GB each fit no 0.07 GB device: named, with how it was tried
    with pytest.raises(InfeasibleError, match=f"table '{big.name}' does not fit at its own dim 16 even in 8 row "
                                              "blocks") as e:
        generate_task(ntables=len(kaggle), ngpu=8, mem_cap_gb=0.07, dims=None, tables=kaggle)
    assert e.value.table == big.name and "\n" not in str(e.value)
    with pytest.raises(InfeasibleError, match="at their own dims"):
        generate_task(ntables=len(kaggle), ngpu=1, mem_cap_gb=1.0, dims=None, tables=kaggle)
