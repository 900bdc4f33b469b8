"""The search in stages (shardlab/search/stages.py): the greedy grid and any table-wise sharder are
placers, the column beam proposes over either, and the choosers rank; NeuroShard's beam then
searches splits over a policy's, a heuristic's or the exact planner's placements."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab.costmodel.base import simulate
from shardlab.costmodel.bundle import load_bundle
from shardlab.data.tasks import generate_task
from shardlab.errors import InfeasibleError, ShardlabError
from shardlab.plan import Placement, Plan
from shardlab.search import get_sharder, run_sharder
from shardlab.search.blocks import Block, ShardCoster, whole_blocks
from shardlab.search.column_beam import ColumnBeam
from shardlab.search.grid_placer import GridPlacer
from shardlab.search.neuroshard import DEFAULT_CAPS
from shardlab.search.sharder_placer import SharderPlacer
from shardlab.search.split_guard import CostChooser, GuardChooser, Judge
from shardlab.search.stages import Chooser, Placer, Proposer, State


@pytest.fixture(scope="module")
def bundle():
    return load_bundle("analytic", "cpu")


@pytest.fixture(scope="module")
def task():
    return generate_task(ntables=12, ngpu=2, mem_cap_gb=0.5, batch_size=4096, seed=3)


def test_the_stages_meet_their_contracts(bundle):
    coster = ShardCoster(bundle.compute)
    assert isinstance(GridPlacer(coster, DEFAULT_CAPS), Placer)
    assert isinstance(SharderPlacer(get_sharder("size_greedy"), bundle.compute), Placer)
    assert isinstance(ColumnBeam(coster), Proposer)
    assert isinstance(CostChooser(), Chooser) and isinstance(GuardChooser([]), Chooser)


def test_a_sharder_places_each_state_as_it_places_that_tables_task(bundle, task):
    comm = bundle.comm_for(task.ngpu)[0]
    blocks = whole_blocks(task)
    sharder = get_sharder("size_greedy")
    [(devices, sim)] = SharderPlacer(sharder, bundle.compute).place_many(task, [blocks], comm)
    plan = sharder.shard(task)
    assert devices == [next(p.device for p in plan.placements if p.table == b.parent) for b in blocks]
    shards = [[b.table for b, d in zip(blocks, devices) if d == g] for g in range(task.ngpu)]
    assert sim.cost_ms == pytest.approx(simulate(shards, bundle.compute, comm).cost_ms, rel=1e-12)


def test_the_beam_proposes_split_states_over_a_sharders_placements(bundle, task):
    coster = ShardCoster(bundle.compute)
    comm = bundle.comm_for(task.ngpu)[0]
    placer = SharderPlacer(get_sharder("size_greedy"), bundle.compute)
    start = whole_blocks(task)
    first = placer.place_many(task, [start], comm)[0]
    beam = ColumnBeam(coster, beam_width=2, max_splits=2, top_n=3)
    states = beam.propose(task, start, first, lambda s: placer.place_many(task, s, comm))
    assert states and all(s.splits >= 1 for s in states)
    for s in states:                                  # every block placed, on a device, within memory
        used = np.zeros(task.ngpu)
        for b, d in zip(s.blocks, s.devices):
            used[d] += task.hbm_bytes(b.table, b.table.rows, b.cols)
        assert len(s.devices) == len(s.blocks) and (used <= task.mem_cap_bytes).all()
        assert sum(b.cols for b in s.blocks if b.parent == s.blocks[0].parent) == task.table(s.blocks[0].parent).dim
    again = beam.propose(task, start, first, lambda s: placer.place_many(task, s, comm))
    assert [(s.blocks, list(s.devices)) for s in again] == [(s.blocks, list(s.devices)) for s in states]
    order, record = CostChooser().rank(task, states)
    assert record == {} and [states[k].simulated.cost_ms for k in order] == sorted(s.simulated.cost_ms for s in states)


@pytest.mark.parametrize("placing", ["size_greedy", "dreamshard", "optimal[columns=false]"])
def test_neuroshard_searches_splits_over_another_methods_placements(placing, task):
    spec = f"neuroshard[place_with={placing},portfolio=[],max_splits=2,profile=cpu]"
    plan = run_sharder(get_sharder(spec), task, seed=1)             # validated: every table covered, memory
    assert run_sharder(get_sharder(spec), task, seed=1).placements == plan.placements      # same seed, same plan
    assert plan.metadata["split_guard"]["predicted_ms"] > 0


def test_a_placing_method_that_is_neuroshard_unknown_or_splitting_is_one_line(bundle, task):
    with pytest.raises(ShardlabError, match="field 'place_with' = 'neuroshard' must be"):
        get_sharder("neuroshard[place_with=neuroshard]")
    with pytest.raises(ShardlabError, match="field 'place_with' = 'nosuch': method 'nosuch' is not a sharder"):
        get_sharder("neuroshard[place_with=nosuch]")

    class Halves:
        name = "halves"

        def shard(self, t, seed=0):
            first = t.tables[0]
            half = first.dim // 2
            rest = [Placement(x.name, 0, x.dim, 0, x.rows, 0) for x in t.tables[1:]]
            return Plan(t.name, self.name, t.ngpu, (Placement(first.name, 0, half, 0, first.rows, 0),
                                                    Placement(first.name, half, half, 0, first.rows, 1), *rest))

    comm = bundle.comm_for(task.ngpu)[0]
    with pytest.raises(ShardlabError, match="placer 'halves': it split table"):
        SharderPlacer(Halves(), bundle.compute).place_many(task, [whole_blocks(task)], comm)
    t0 = task.tables[0]
    pinned = (Block(t0, t0.name, 0, 0, 1),) + whole_blocks(task)[1:]
    with pytest.raises(ShardlabError, match=f"table '{t0.name}' is in pinned row blocks"):
        SharderPlacer(get_sharder("size_greedy"), bundle.compute).place_many(task, [pinned], comm)


def test_the_guard_chooser_keeps_the_table_wise_plan_unless_every_judge_agrees(bundle, task):
    coster = ShardCoster(bundle.compute)
    comm = bundle.comm_for(task.ngpu)[0]
    grid = GridPlacer(coster, DEFAULT_CAPS)
    start = whole_blocks(task)
    first = grid.place_many(task, [start], comm)[0]
    states = [State(start, first[0], first[1])] + ColumnBeam(coster, max_splits=1).propose(
        task, start, first, lambda s: grid.place_many(task, s, comm))
    chooser = GuardChooser([Judge("analytic", bundle, own=True)])
    order, record = chooser.rank(task, states)
    assert set(chooser.ratios_) == {"analytic"} and chooser.ratios_["analytic"][0] == pytest.approx(1.0)
    best = states[order[0]]
    assert best.splits == 0 or chooser.ratios_["analytic"][order[0]] < 1.0
    assert record["table_wise_ms"] == pytest.approx(first[1].cost_ms)


def test_a_tight_task_the_grid_cannot_place_gets_a_heuristics_plan_costed_and_named():
    """Where no cap of the grid and no split fits (memory-tight tasks of tests/test_heuristics_tight.py),
    NeuroShard's plan is the first heuristic plan that fits, every block where it put it, costed by
    the search's model, and the plan says so."""
    from tests.test_heuristics_tight import random_task

    from shardlab.search.feasibility import heuristic_plan

    found = 0
    for seed in range(16):
        task = random_task(seed, 0.9, 0.99, False)
        sharder = get_sharder("neuroshard[portfolio=[],profile=cpu]")
        try:
            heuristic = heuristic_plan(task)
        except InfeasibleError:                 # no heuristic places it: neither does the search
            with pytest.raises(InfeasibleError):
                run_sharder(sharder, task)
            continue
        plan = run_sharder(sharder, task)
        if "fallback" not in plan.metadata:
            continue
        found += 1
        assert plan.metadata["fallback"] == heuristic.method
        assert sorted((p.table, p.device) for p in plan.placements) == \
            sorted((p.table, p.device) for p in heuristic.placements)
        assert plan.metadata["split_guard"]["predicted_ms"] > 0
    assert found >= 2                       # seeds 9 and 12 are such tasks
