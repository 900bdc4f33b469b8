"""NeuroShard's last step and its greedy rule: the answer is the cheapest, under the search's own
model, of its plan and every portfolio method's; ``greedy_rule`` picks the device cheapest after
adding a table (shardlab) or before (the original authors' code), each as a plain sequential
greedy over one cap would."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab import constants as C
from shardlab.costmodel.bundle import load_bundle
from shardlab.data.tasks import generate_task
from shardlab.errors import ShardlabError
from shardlab.evaluate.model import estimate_plan
from shardlab.plan import Placement, Plan, validate_plan
from shardlab.search import get_sharder, run_sharder
from shardlab.search.neuroshard import NeuroShardSharder
from shardlab.search.portfolio import OWN, choose_from_portfolio
from shardlab.workflows.verify import VerifiedSharder


@pytest.fixture(scope="module")
def neural():
    return load_bundle("neuroshard_broad", "cpu")


@pytest.fixture(scope="module")
def analytic():
    return load_bundle("analytic", "cpu")


def _task(n=14, g=4, cap=4.0, seed=3):
    return generate_task(ntables=n, ngpu=g, mem_cap_gb=cap, batch_size=4096, seed=seed)


def test_the_answer_is_the_cheapest_candidate_under_the_model(neural):
    task = _task()
    plan = run_sharder(NeuroShardSharder(model=neural, columns=False), task, seed=2)
    rec = plan.metadata["portfolio"]
    assert set(rec["predicted_ms"]) == {OWN, *C.PORTFOLIO_METHODS} and rec["skipped"] == {}
    assert rec["chosen"] == min(rec["predicted_ms"], key=rec["predicted_ms"].get)
    assert estimate_plan(task, plan, neural, lower_bound=False).cost_ms == pytest.approx(min(rec["predicted_ms"].values()))
    for m in C.HEURISTIC_METHODS:          # each baseline was costed as its own plan
        own = run_sharder(get_sharder(m), task, seed=2)
        assert rec["predicted_ms"][m] == pytest.approx(estimate_plan(task, own, neural, lower_bound=False).cost_ms)
    assert plan.method == "neuroshard[columns=false]" or plan.method == "neuroshard"


def test_a_worse_own_plan_loses_to_a_baseline_and_keeps_the_methods_name(analytic):
    task = _task(n=8, g=2)
    own = Plan(task.name, "neuroshard", 2, tuple(Placement(t.name, 0, t.dim, 0, t.rows, 0) for t in task.tables), 5)
    validate_plan(task, own)
    got = choose_from_portfolio(task, own, C.HEURISTIC_METHODS, analytic, "cpu", seed=5)
    rec = got.metadata["portfolio"]
    assert rec["chosen"] != OWN and got.method == "neuroshard" and got.seed == 5
    assert rec["predicted_ms"][rec["chosen"]] < rec["predicted_ms"][OWN]
    validate_plan(task, got)
    assert choose_from_portfolio(task, own, (), analytic, "cpu") is own


def test_a_method_that_cannot_plan_is_skipped_with_its_reason(analytic):
    task = _task(n=8, g=2)
    own = run_sharder(get_sharder("lookup_greedy"), task)

    class Broken:
        name = "broken"

        def shard(self, task, seed=0):
            raise ShardlabError("task 'x': field 'tables' is broken")

    import shardlab.search.portfolio as portfolio
    real = portfolio.sharder_for
    portfolio.sharder_for = lambda m, profile: Broken() if m == "dim_greedy" else real(m, profile)
    try:
        got = choose_from_portfolio(task, own, ("dim_greedy", "size_greedy"), analytic, "cpu")
    finally:
        portfolio.sharder_for = real
    rec = got.metadata["portfolio"]
    assert rec["skipped"] == {"dim_greedy": "task 'x': field 'tables' is broken"}
    assert set(rec["predicted_ms"]) == {OWN, "size_greedy"}


def test_torchrec_plans_tables_whose_names_hold_dots(analytic):
    task = _task(n=6, g=2)
    from dataclasses import replace
    task = replace(task, tables=tuple(replace(t, name=f"tower.{i}.emb") for i, t in enumerate(task.tables)))
    plan = run_sharder(get_sharder("torchrec"), task)
    assert {p.table for p in plan.placements} == {t.name for t in task.tables}


def test_portfolio_option_is_checked():
    with pytest.raises(ShardlabError, match="portfolio"):
        get_sharder("neuroshard", portfolio=("neuroshard",))
    with pytest.raises(ShardlabError, match="greedy_rule"):
        get_sharder("neuroshard", greedy_rule="middle")


def test_verify_puts_the_portfolios_choice_first(analytic):
    task = _task(n=8, g=2)
    sharder = NeuroShardSharder(model=analytic, columns=False)
    first = sharder.shard(task)
    cands = sharder.candidates(task, k=3)
    assert cands[0].placements == first.placements and "portfolio" in cands[0].metadata
    assert len({c.placements for c in cands}) == len(cands)
    assert isinstance(VerifiedSharder(sharder, evaluator=None, k=2), VerifiedSharder)


def _sequential(task, model, cap: float, rule: str) -> list[int]:
    """The table-wise greedy under one dim-balance cap, one table at a time (the rule as stated)."""
    emb = model.embed(task.tables)
    single = model.predict_sums(emb, np.ones(len(task.tables))).sum(axis=1)
    order = sorted(range(len(task.tables)), key=lambda i: (-single[i], i))
    g = task.ngpu
    limit = cap * sum(t.dim for t in task.tables) / g
    on = [[] for _ in range(g)]
    mem, dsum = np.zeros(g, dtype=np.int64), np.zeros(g)
    where = [0] * len(task.tables)

    def cost(rows):
        if not rows:
            return 0.0
        return float(np.round(model.predict_sums(emb[rows].sum(axis=0)[None], np.array([len(rows)])).sum(), 9))

    for i in order:
        t = task.tables[i]
        fits = [d for d in range(g) if mem[d] + task.table_bytes(t) <= task.mem_cap_bytes]
        capped = [d for d in fits if dsum[d] + t.dim <= limit + 1e-9]
        ok = capped or fits
        score = {d: cost(on[d] + [i]) if rule == "after" else cost(on[d]) for d in ok}
        best = min(score.values())
        d = min((d for d in ok if score[d] == best), key=lambda d: (mem[d], d))
        on[d].append(i)
        mem[d] += task.table_bytes(t)
        dsum[d] += t.dim
        where[i] = d
    return where


@pytest.mark.parametrize("rule", ["after", "before"])
@pytest.mark.parametrize("shape", [(12, 2, 4.0, 1), (30, 4, 4.0, 3), (25, 4, 0.6, 7)])
def test_each_greedy_rule_is_the_sequential_greedy(neural, rule, shape):
    n, g, cap, seed = shape
    task = _task(n, g, cap, seed)
    for c in (1.0, 1.25, 1.5):
        plan = NeuroShardSharder(model=neural, columns=False, caps=(c,), greedy_rule=rule, portfolio=()).shard(task)
        got = {p.table: p.device for p in plan.placements}
        want = _sequential(task, neural.compute, c, rule)
        assert [got[t.name] for t in task.tables] == want, (task.name, c, rule)


def test_the_two_rules_give_different_plans_somewhere(neural):
    differ = 0
    for seed in range(4):
        task = _task(20, 4, 4.0, seed)
        plans = [NeuroShardSharder(model=neural, columns=False, greedy_rule=r, portfolio=()).shard(task)
                 for r in ("after", "before")]
        differ += set(plans[0].placements) != set(plans[1].placements)
    assert differ > 0


def test_plans_outside_the_searchs_space_are_skipped(analytic):
    task = _task(n=6, g=2)
    big = max(task.tables, key=lambda t: t.dim)
    split = tuple(Placement(t.name, 0, t.dim, 0, t.rows, 0) for t in task.tables if t is not big) + (
        Placement(big.name, 0, big.dim // 2, 0, big.rows, 0), Placement(big.name, big.dim // 2, big.dim // 2, 0, big.rows, 1))
    plan = Plan(task.name, "x", 2, split)
    validate_plan(task, plan)
    from shardlab.search.portfolio import outside_space
    assert outside_space(task, plan) is None
    assert "columns=false" in outside_space(task, plan, columns=False)
    assert "field whole" in outside_space(task, plan, whole=(big.name,))
    assert outside_space(task, plan, rows=False) is None
