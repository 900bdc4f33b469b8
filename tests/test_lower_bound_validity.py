"""The lower bound is a bound under the model that reports it: over random tasks and random
valid plans (table-wise, column blocks, row blocks, row-wise over every device, mixed, and the
heuristics' plans, with tables that must be split by rows), every shipped CPU cost model and the
H100 analytic model give either no bound (None) or one at most every plan's predicted cost
(docs/measurement.md, "The lower bound").

The check can fail: the bound the evaluator used to give (the model's cost of all tables in
chunks of 15, summed, / G plus the cheapest rank's comm of balanced dim sums) breaks it for the
neural models on these very tasks (:func:`test_the_old_bound_formula_fails_the_same_check`).
"""

from __future__ import annotations

import numpy as np
import pytest

from shardlab.costmodel.analytic import AnalyticComm
from shardlab.costmodel.bundle import load_bundle, resolve_model_path, shipped_bundles
from shardlab.costmodel.rowwise_comm import load_rowwise_comm
from shardlab.costmodel.topology_comm import TopologyComm
from shardlab.data.tasks import generate_task, pool_tables
from shardlab.errors import ShardlabError
from shardlab.io import read_json
from shardlab.evaluate.model import ModelEvaluator, estimate_plan, model_bound_ms
from shardlab.plan import Placement, Plan, validate_plan
from shardlab.schedule import balanced_dims, lower_bound_ms
from shardlab.search import get_sharder, run_sharder
from shardlab.search.row_wise import oversized
from shardlab.tables import Task

#: Every shipped CPU bundle, and the H100 analytic one (its comm: the GPU-cluster topology model).
CPU_MODELS = shipped_bundles("cpu")
MODELS = [("cpu", m) for m in CPU_MODELS] + [("h100", "analytic")]
#: Models with a proven floor: those whose compute and comm are both analytic forms (the cluster
#: topology comm model is one), read from each bundle's manifest, so that a newly shipped analytic
#: bundle is held to a bound; the others must give None.
ANALYTIC = {"shardlab.costmodel.analytic.AnalyticCompute", "shardlab.costmodel.analytic.AnalyticComm",
            "shardlab.costmodel.topology_comm.TopologyComm"}
BOUNDED = {key for key in MODELS
           if {part["class"] for part in read_json(resolve_model_path(key[1], key[0]))["parts"].values()}
           <= ANALYTIC}
HEURISTICS = ("random", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")
#: Float rounding between a bound summed term by term and a plan's cost summed shard by shard.
REL_TOL = 1e-9


def _cuts(rng: np.random.Generator, n: int, k: int, step: int = 1) -> list[tuple[int, int]]:
    """``k`` contiguous (offset, size) ranges covering ``n`` (sizes multiples of ``step``)."""
    k = max(1, min(k, n // step))
    inner = sorted(rng.choice(np.arange(1, n // step), size=k - 1, replace=False) * step) if k > 1 else []
    edges = [0, *[int(c) for c in inner], n]
    return [(a, b - a) for a, b in zip(edges[:-1], edges[1:])]


def random_plan(task: Task, rng: np.random.Generator, kind: str) -> Plan:
    """A random plan of ``kind``: ``table`` (whole tables on random devices), ``one`` (all on
    device 0), ``columns``, ``rows`` (random row ranges, random devices, single rows too),
    ``rowwise`` (every table in G row blocks, one per device) or ``mixed`` (row ranges of
    column blocks). Tables that fit no device whole are always split in G row blocks."""
    g, big = task.ngpu, {task.tables[i].name for i in oversized(task)}
    out = []
    for t in task.tables:
        if t.name in big or kind == "rowwise":
            out += [Placement(t.name, 0, t.dim, o, n, d) for d, (o, n) in enumerate(_cuts(rng, t.rows, g))]
            continue
        u = rng.random()
        if kind == "one" or kind == "table" or u < 0.3:
            out.append(Placement(t.name, 0, t.dim, 0, t.rows, 0 if kind == "one" else int(rng.integers(g))))
        elif kind == "columns" or (kind == "mixed" and u < 0.6):
            for o, n in _cuts(rng, t.dim, int(rng.integers(2, 5)), 4):
                out.append(Placement(t.name, o, n, 0, t.rows, int(rng.integers(g))))
        elif kind == "rows":
            k = int(rng.integers(2, 2 * g + 2))
            ranges = _cuts(rng, t.rows, k) if rng.random() < 0.7 else [(0, 1), (1, t.rows - 1)]
            out += [Placement(t.name, 0, t.dim, o, n, int(rng.integers(g))) for o, n in ranges]
        else:
            for co, cn in _cuts(rng, t.dim, 2, 4):
                out += [Placement(t.name, co, cn, o, n, int(rng.integers(g)))
                        for o, n in _cuts(rng, t.rows, int(rng.integers(1, g + 2)))]
    return Plan(task.name, kind, g, tuple(out))


def _tasks() -> list[Task]:
    """Random tasks: G = 1, 2, 3, 4, 8, 12 (hosts of 8: two hosts of unequal size), 3 to 20
    pool tables, several dim sets, batch 4096; one whose largest tables fit no device."""
    spec = [(1, 5, (16, 64)), (2, 12, (4, 8)), (3, 9, None), (4, 20, (4, 8, 16, 32, 64, 128)), (8, 14, (64, 128)),
            (12, 10, (32, 128))]
    out = []
    for i, (g, n, dims) in enumerate(spec):
        out.append(generate_task(pool=("dlrm-synth", "dlrm-synth-2022")[i % 2], ntables=n, ngpu=g, mem_cap_gb=64.0,
                                 batch_size=4096, seed=100 + i, dims=dims or (4, 8, 16, 32, 64, 128, 256)))
    tables = tuple(t.with_dim(64) for t in pool_tables("dlrm-synth", "test")[:10])
    probe = Task("probe", 4, 1.0, tables, 4096)
    cap = max(probe.table_bytes(t) for t in tables) * 0.45 / 2**30
    out.append(Task("must-split-rows", 4, cap, tables, 4096))
    return out


def _plans(task: Task, seed: int) -> dict[str, Plan]:
    """The heuristics' plans and valid random plans of every kind."""
    rng = np.random.default_rng(seed)
    plans = {m: run_sharder(get_sharder(m), task, seed=seed) for m in HEURISTICS}
    for kind in ("table", "one", "columns", "rows", "rowwise", "mixed") * 2:
        p = random_plan(task, rng, kind)
        try:
            validate_plan(task, p)
        except ShardlabError:            # over the memory cap: not a valid plan
            continue
        plans[f"{kind}{len(plans)}"] = p
    return plans


@pytest.fixture(scope="module")
def cases() -> list[tuple[Task, dict[str, Plan]]]:
    out = [(t, _plans(t, i)) for i, t in enumerate(_tasks())]
    task, plans = out[-1]
    assert oversized(task)                                        # that task must split rows ...
    rows = {t.name: t.rows for t in task.tables}
    assert any(p.rows != rows[p.table] for p in plans["lookup_greedy"].placements)   # ... and does
    return out


@pytest.fixture(scope="module")
def bundles():
    return {key: load_bundle(key[1], key[0]) for key in MODELS}


def violations(bound: float | None, costs: dict[str, float]) -> list[str]:
    """The plans whose cost is below ``bound`` (none when there is no bound)."""
    if bound is None:
        return []
    return [f"{k}: {c:.4f} ms < bound {bound:.4f} ms" for k, c in costs.items() if c < bound * (1 - REL_TOL)]


@pytest.mark.parametrize("key", MODELS, ids=[f"{p}-{m}" for p, m in MODELS])
def test_bound_is_at_most_every_plans_cost_under_the_same_model(key, cases, bundles):
    for task, plans in cases:
        out = ModelEvaluator(bundles[key], key[0]).evaluate(task, plans)
        bounds = {e.lower_bound_ms for e in out.values()}
        assert len(bounds) == 1
        bound = bounds.pop()
        costs = {k: e.cost_ms for k, e in out.items()}
        assert not violations(bound, costs), (task.name, key, violations(bound, costs))
        if key in BOUNDED:
            # a bound, and not a vacuous one: within a factor 3 of the cheapest plan found
            assert bound is not None and min(costs.values()) / 3 < bound, (task.name, bound, min(costs.values()))
        else:
            assert bound is None                   # a learned model proves no floor
        # the single-plan path reports the same bound
        first = next(iter(plans))
        assert estimate_plan(task, plans[first], bundles[key]).lower_bound_ms == (
            None if bound is None else pytest.approx(bound, rel=1e-12))


def _old_bound(task: Task, bundle) -> float:
    """The formula the evaluator used before: all tables in chunks of 15 predicted and summed,
    / G, plus the cheapest rank's comm of balanced dim sums."""
    chunks = [list(task.tables[i:i + 15]) for i in range(0, len(task.tables), 15)]
    whole = float(np.asarray(bundle.compute.predict(chunks)).sum())
    comm = bundle.comm_for(task.ngpu)[0]
    c = np.asarray(comm.predict([balanced_dims(task)], None))[0] if task.ngpu > 1 else None
    return lower_bound_ms(whole, task.ngpu, c)


def test_the_old_bound_formula_fails_the_same_check(cases, bundles):
    found = []
    for task, plans in cases:
        for key in MODELS:
            if key in BOUNDED:
                continue
            out = ModelEvaluator(bundles[key], key[0], lower_bound=False).evaluate(task, plans)
            bad = violations(_old_bound(task, bundles[key]), {k: e.cost_ms for k, e in out.items()})
            found += [(task.name, key, b) for b in bad]
    assert found                                   # the check catches a bound that is no bound
    assert any(k == ("cpu", "neuroshard_broad") for _, k, _ in found)


def test_comm_floors_hold_for_any_dim_sums_and_delays():
    rng = np.random.default_rng(0)
    comms = [load_bundle("analytic", "cpu").comm, TopologyComm(), TopologyComm(gpus_per_host=4, latency_us=20.0),
             load_rowwise_comm("shipped", "cpu")]
    for comm in comms:
        for g in (2, 3, 5, 8, 12, 20):
            total = int(rng.integers(4, 4000))
            floor = comm.floor_ms(g, total)
            for _ in range(20):
                share = rng.dirichlet(np.full(g, rng.choice([0.1, 1.0, 10.0])))
                dims = np.floor(share * total).astype(int)
                dims[0] += total - dims.sum()                       # integers adding up to total
                delays = rng.exponential(5.0, g) * (rng.random() < 0.5)
                mean = np.asarray(comm.predict(dims[None], delays[None]))[0].sum(axis=1).mean()
                assert floor <= mean * (1 + REL_TOL), (type(comm).__name__, g, dims, floor, mean)
            assert comm.floor_ms(g, total + 4) >= floor             # more columns never cost less


def test_rowwise_increment_floors_ignore_only_traffic_that_adds():
    rng = np.random.default_rng(1)
    for rw in (load_rowwise_comm("shipped", "cpu"), TopologyComm(latency_us=5.0)):
        for g in (2, 4, 8, 12):
            dim = int(rng.integers(0, 600))
            counts = rng.integers(0, 5000, size=(g, g)).tolist()
            inc = rw.increment(g, {"dim": dim, "index_counts": counts}).sum(axis=1).mean()
            assert rw.increment_floor_ms(g, dim) <= inc * (1 + REL_TOL)
            # concave in dim on [0, D]: a chord lies below (what the endpoint argument needs)
            a, b = rw.increment_floor_ms(g, 0), rw.increment_floor_ms(g, 2 * dim)
            assert rw.increment_floor_ms(g, dim) >= (a + b) / 2 - 1e-12


def test_a_model_without_floors_gives_no_bound(small_task):
    class NoFloor:
        def predict(self, shards):
            return np.ones((len(shards), 2))

    bundle = load_bundle("analytic", "cpu")
    bundle.compute = NoFloor()
    assert model_bound_ms(small_task, bundle) is None
    bundle = load_bundle("analytic", "cpu")
    assert model_bound_ms(small_task, bundle) > 0
    bundle.comm = AnalyticComm()                         # a comm model with a negative coefficient
    bundle.comm.coef_fw_, bundle.comm.coef_bw_ = -np.ones(6), np.ones(5)
    bundle.comm.profile_ = {"name": "x", "batch_size": 4096, "bytes_per_value": 4}
    bundle._comm_by_g.clear()
    assert model_bound_ms(small_task, bundle) is None
