"""Polishing placed states by moves (shardlab/search/polish.py), the beam's "moved" costing
(shardlab/search/column_beam.py) and the batched plan costs they rest on: never worse than where
a polish starts, each polished cost the model's own from scratch, memory and pinned blocks
respected, every scorer's ratio lowered, the same seed the same plan; and NeuroShard's default
search, which polishes, never worse under its own model than the seed's search on 40 drawn
tasks and on the saved-plan tasks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardlab.costmodel.base import plan_costs, simulate_many
from shardlab.costmodel.bundle import load_bundle
from shardlab.costmodel.topology_comm import TopologyComm
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.search import sharder_for
from shardlab.search.blocks import Block, ShardCoster, split_block, whole_blocks
from shardlab.search.column_beam import ColumnBeam
from shardlab.search.grid_placer import GridPlacer
from shardlab.search.neuroshard import DEFAULT_CAPS, NeuroShardSharder
from shardlab.search.polish import Polisher, Scorer
from shardlab.search.stages import State
from shardlab.tables import Task
from tests.saved_plans import PATH

SAVED_TASKS = [Task.from_dict(t) for t in json.loads(PATH.read_text())["tasks"]]


@pytest.fixture(scope="module")
def bundle():
    return load_bundle("neuroshard", "h100")


def _tasks(n: int, seed: int) -> list[Task]:
    rng = np.random.default_rng(seed)
    return [generate_task(ntables=int(rng.integers(8, 31)), ngpu=int(rng.choice([2, 4, 8])),
                          mem_cap_gb=float(rng.choice([1.0, 4.0, 80.0])), seed=int(rng.integers(0, 10**6)))
            for _ in range(n)]


def _placed(task: Task, bundle) -> tuple[State, ShardCoster, object]:
    coster, comm = ShardCoster(bundle.compute), bundle.comm_for(task.ngpu)[0]
    blocks = whole_blocks(task)
    devices, sim = GridPlacer(coster, DEFAULT_CAPS).place_many(task, [blocks], comm)[0]
    return State(blocks, devices, sim), coster, comm


def _from_scratch(task: Task, state: State, bundle, comm) -> float:
    """The plan's cost from its devices' summed table encodings (each table encoded alone, as the
    search encodes them: a float32 encoder's batched rows differ in their last bits)."""
    coster = ShardCoster(bundle.compute)
    emb = coster.embed(state.blocks)
    sums, counts = np.zeros((task.ngpu, emb.shape[1])), np.zeros(task.ngpu)
    dims = np.zeros(task.ngpu)
    for row, b, d in zip(emb, state.blocks, state.devices):
        sums[d] += row
        counts[d] += 1
        dims[d] += b.out_dim
    ms = np.where(counts[:, None] > 0, bundle.compute.predict_sums(sums, counts), 0.0)
    return simulate_many(ms[None], dims[None], comm)[0].cost_ms


def test_plan_costs_are_the_simulations_costs_exactly():
    rng = np.random.default_rng(0)
    comm = TopologyComm(gpus_per_host=4, latency_us=2.0)
    for g in (1, 3, 8, 12):
        ms, dims = rng.uniform(0, 5, size=(9, g, 2)), rng.integers(0, 900, size=(9, g)).astype(float)
        assert plan_costs(ms, dims, comm).tolist() == [s.cost_ms for s in simulate_many(ms, dims, comm)]


def test_the_topology_models_closed_form_plan_cost_is_the_simulated_one():
    rng = np.random.default_rng(4)
    for per_host in (1, 4, 8):
        m = TopologyComm(gpus_per_host=per_host, latency_us=3.0)
        for g in (1, 2, 7, 16):
            ms, dims = rng.uniform(0, 5, size=(11, g, 2)), rng.integers(0, 2000, size=(11, g)).astype(float)
            np.testing.assert_allclose(m.plan_ms(ms, dims), plan_costs(ms, dims, m), rtol=1e-12, atol=0)


def test_the_topology_all_to_all_by_host_sums_is_the_peer_matrix_one():
    rng = np.random.default_rng(1)
    for per_host in (1, 3, 8):
        for g in (2, 5, 8, 13):
            m = TopologyComm(gpus_per_host=per_host, latency_us=1.5)
            chunk = rng.uniform(0, 1e7, size=(6, g))
            sent, received = np.repeat(chunk[:, :, None], g, axis=2), np.repeat(chunk[:, None, :], g, axis=1)
            np.testing.assert_allclose(m._pooled_ms(chunk), m._ms(sent, received), rtol=1e-13, atol=0)


def test_a_polish_is_never_worse_and_its_cost_is_the_models_own(bundle):
    moved = 0
    for task in _tasks(8, 2):
        state, coster, comm = _placed(task, bundle)
        got, moves = Polisher([Scorer(coster, comm)]).polish(task, state)
        moved += moves > 0
        assert got.simulated.cost_ms <= state.simulated.cost_ms
        if moves == 0:
            assert got is state
            continue
        assert got.simulated.cost_ms < state.simulated.cost_ms
        assert got.simulated.cost_ms == pytest.approx(_from_scratch(task, got, bundle, comm), rel=1e-9)
        mem = np.zeros(task.ngpu)
        for b, d in zip(got.blocks, got.devices):
            mem[d] += task.hbm_bytes(b.table, b.table.rows, b.cols)
        assert (mem <= task.mem_cap_bytes).all()
    assert moved >= 4                                # the greedy leaves something to move on most draws


def test_a_polish_moves_no_pinned_block_and_stops_at_its_move_limit(bundle):
    task = _tasks(1, 10)[0]                          # a draw the polish makes 3 moves on
    state, coster, comm = _placed(task, bundle)
    free = Polisher([Scorer(coster, comm)]).polish(task, state)[1]
    assert free >= 2
    assert Polisher([Scorer(coster, comm)], max_moves=1).polish(task, state)[1] == 1
    assert Polisher([Scorer(coster, comm)], max_moves=0).polish(task, state) == (state, 0)
    pinned = tuple(Block(b.table, b.parent, 0, 0, d) for b, d in zip(state.blocks, state.devices))
    stuck = State(pinned, state.devices, state.simulated)
    assert Polisher([Scorer(coster, comm)]).polish(task, stuck) == (stuck, 0)


def test_a_guarded_polish_lowers_every_scorers_ratio(bundle):
    judge = load_bundle("analytic", "h100")
    for task in _tasks(6, 7):
        state, coster, comm = _placed(task, bundle)
        jc, jcomm = ShardCoster(judge.compute), judge.comm_for(task.ngpu)[0]
        ref = _from_scratch(task, state, judge, jcomm)
        got, moves = Polisher([Scorer(coster, comm, 1.0, state.simulated.cost_ms),
                               Scorer(jc, jcomm, 1.0, ref)]).polish(task, state)
        if moves:
            assert got.simulated.cost_ms < state.simulated.cost_ms
            assert _from_scratch(task, got, judge, jcomm) < ref * (1 + 1e-9)


def test_moved_children_keep_the_parent_placement_but_for_the_halves(bundle):
    task = generate_task(ntables=20, ngpu=4, mem_cap_gb=80.0, seed=11)
    state, coster, comm = _placed(task, bundle)
    idx = ColumnBeam(coster).candidates(state.blocks)
    kids = Polisher([Scorer(coster, comm)]).children(task, state, idx)
    assert len(kids) == len(idx) and all(k is not None for k in kids)
    for i, kid in zip(idx, kids):
        assert kid.blocks == split_block(state.blocks, i)
        assert list(kid.devices[:i]) + list(kid.devices[i + 2:]) == list(state.devices[:i]) + list(state.devices[i + 1:])
        assert kid.simulated.cost_ms == pytest.approx(_from_scratch(task, kid, bundle, comm), rel=1e-9)


def test_both_costings_make_the_same_first_round_candidates_and_answer_the_same_twice(bundle):
    task = generate_task(ntables=24, ngpu=4, mem_cap_gb=80.0, seed=12)
    firsts = []
    for costing in ("grid", "moved"):
        s = NeuroShardSharder(model=bundle, portfolio=(), beam_costing=costing, max_splits=1)
        ranked = s._search(task)[0]
        firsts.append(sorted({tuple(sorted((b.parent, b.col_offset, b.cols) for b in r.state.blocks))
                              for r in ranked}))
        again = s._search(task)[0]
        assert [r.state.devices for r in again] == [r.state.devices for r in ranked]
    assert firsts[0] == firsts[1]


def test_the_polish_options_are_checked():
    with pytest.raises(ShardlabError, match="field 'beam_costing'") as e:
        sharder_for("neuroshard[beam_costing=fast]", "h100")
    assert "\n" not in str(e.value)
    with pytest.raises(ShardlabError, match="field 'polish_moves'"):
        sharder_for("neuroshard[polish_moves=-1]", "h100")
    with pytest.raises(ShardlabError, match="'child_moves' = 1.5 must be int"):
        sharder_for("neuroshard[child_moves=1.5]", "h100")
    with pytest.raises(ShardlabError, match="field 'child_moves'"):
        NeuroShardSharder(child_moves=-2)


@pytest.mark.parametrize("which", ["drawn", "saved"])
def test_the_polished_search_is_never_worse_than_the_seeds(which):
    """The default search (grid costing, cheapest states polished) against the seed's
    (``polish_moves=0``): the plan each chooses, under the search's own model, on 40 drawn
    tasks on the default profile and on the saved-plan tasks on the cpu profile they were saved
    with."""
    tasks, profile = (_tasks(40, 13), "h100") if which == "drawn" else (SAVED_TASKS, "cpu")
    polished = NeuroShardSharder(profile=profile, portfolio=())
    seed = NeuroShardSharder(profile=profile, portfolio=(), polish_moves=0)
    better = 0
    for task in tasks:
        try:
            old = seed._search(task)[0][0].state.simulated.cost_ms
        except ShardlabError:
            continue
        new = polished._search(task)[0][0].state.simulated.cost_ms
        assert new <= old + 1e-9, task.name
        better += new < old - 1e-9
    assert better >= (10 if which == "drawn" else 1)
