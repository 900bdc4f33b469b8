"""NeuroShard's batched column-wise search: the lock-step greedy over every beam state and cap
makes the same decisions as the one-state-at-a-time search it replaced (whose plans were saved),
while it costs fewer (group, block) pairs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardlab.costmodel.base import LinearHeadComputeModel
from shardlab.costmodel.bundle import load_bundle
from shardlab.data.tasks import generate_task
from shardlab.evaluate import estimate_plan
from shardlab.plan import validate_plan
from shardlab.search.greedy_grid import greedy_grid
from shardlab.search.blocks import ShardCoster, split_block, whole_blocks
from shardlab.search.neuroshard import NeuroShardSharder


@pytest.fixture(scope="module")
def neural():
    # the model alone: these plans were saved before models had a valid range (tests/test_valid_range.py)
    return load_bundle("neuroshard_broad").unguarded()


@pytest.fixture(scope="module")
def analytic():
    return load_bundle("analytic")


def _tasks():
    # (tables, GPUs, memory cap GB, seed): roomy and tight (caps die, memory decides ties)
    return [generate_task(ntables=n, ngpu=g, mem_cap_gb=cap, batch_size=4096, seed=s)
            for n, g, cap, s in ((12, 2, 4.0, 1), (30, 4, 4.0, 3), (40, 8, 2.0, 5), (25, 4, 0.6, 7))]


def test_linear_head_equals_predict_sums(neural):
    model = neural.compute
    assert isinstance(model, LinearHeadComputeModel)
    task = generate_task(ntables=20, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=2)
    emb = model.embed(task.tables)
    groups = [emb[:3].sum(axis=0), emb[3:11].sum(axis=0), emb[11:].sum(axis=0), np.zeros(emb.shape[1])]
    counts = np.array([3, 8, 9, 0])
    want = model.predict_sums(np.stack(groups), counts)
    h = model.head_rows(emb)
    got = model.predict_head(np.stack([h[:3].sum(axis=0), h[3:11].sum(axis=0), h[11:].sum(axis=0),
                                       np.zeros(h.shape[1])]), counts)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert got[3].tolist() == [0.0, 0.0] and (got[:3] > 0).all()


#: Plans of the removed one-state-at-a-time greedy (``batched=False``), saved before it was removed:
#: "<bundle>|<tables>,<GPUs>,<cap GB>,<seed>|<column-wise>" -> sorted placement lists.
ONE_BY_ONE = json.loads((Path(__file__).parent / "data" / "one_by_one_plans.json").read_text())


@pytest.mark.parametrize("bundle", ["neural", "analytic"])
def test_batched_search_gives_the_removed_sequential_plans(bundle, request):
    model = request.getfixturevalue(bundle)
    name = {"neural": "neuroshard_broad", "analytic": "analytic"}[bundle]
    for (n, g, cap, s), task in zip(((12, 2, 4.0, 1), (30, 4, 4.0, 3), (40, 8, 2.0, 5), (25, 4, 0.6, 7)), _tasks()):
        for cw in (False, True):
            plan = NeuroShardSharder(model=model, columns=cw, max_splits=4, split_guard=False, portfolio=(),
                                     polish_moves=0).shard(task)       # the seed's search, saved before the polish
            validate_plan(task, plan)
            got = sorted([p.table, p.row_offset, p.rows, p.col_offset, p.cols, p.device] for p in plan.placements)
            assert got == ONE_BY_ONE[f"{name}|{n},{g},{cap},{s}|{cw}"], (task.name, cw)


def test_candidates_of_a_round_match_one_by_one(neural):
    """Every state of one beam round, costed together, gets the devices and simulated cost it
    gets alone -- whatever else shares the batch."""
    task = generate_task(ntables=30, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=3)
    sharder = NeuroShardSharder(model=neural)
    coster = ShardCoster(neural.compute)
    comm = neural.comm_for(task.ngpu)[0]
    base = whole_blocks(task)
    states = [base] + [split_block(base, i) for i in range(0, len(base), 3) if base[i].cols % 8 == 0]
    together = sharder.placer(coster).place_many(task, states, comm)
    for state, got in zip(states, together):
        alone = sharder.placer(coster).place_many(task, [state], comm)[0]
        assert got[0] == alone[0]
        assert got[1].cost_ms == pytest.approx(alone[1].cost_ms, rel=1e-9)


def test_grid_shares_identical_histories(neural):
    """Caps that have not bound yet, and a state beside its split child, are costed once per
    device content: fewer (content, block) pairs than rows x blocks x devices, and a state's
    result does not depend on its company."""
    task = generate_task(ntables=30, ngpu=4, mem_cap_gb=4.0, batch_size=4096, seed=3)
    sharder = NeuroShardSharder(model=neural)
    coster = ShardCoster(neural.compute)
    comm = neural.comm_for(task.ngpu)[0]
    base = whole_blocks(task)
    i = max(k for k, b in enumerate(base) if b.cols % 8 == 0)
    child = split_block(base, i)
    calls = []

    def spy(*args):
        got = greedy_grid(*args)
        calls.append(got)
        return got

    import shardlab.search.grid_placer as ns
    real, ns.greedy_grid = ns.greedy_grid, spy
    try:
        both = sharder.placer(coster).place_many(task, [base, child], comm)
        alone = [sharder.placer(coster).place_many(task, [st], comm)[0] for st in (base, child)]
    finally:
        ns.greedy_grid = real
    for a, b in zip(both, alone):
        assert a[0] == b[0] and a[1].cost_ms == pytest.approx(b[1].cost_ms, rel=1e-12)
    together, each = calls[0].costed, calls[1].costed + calls[2].costed
    assert together < each                       # the shared prefix was costed once
    assert together < 2 * 11 * len(base) * task.ngpu
