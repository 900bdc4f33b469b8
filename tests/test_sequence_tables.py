"""Sequence tables (``pooled`` false, TorchRec's EmbeddingCollection): each sample's lookups come
back as rows, so what they send and write is ``dim x pooling factor`` values a sample
(``Table.out_dim``). Every cost path sums that width: the analytic models, the model evaluator,
the comm pattern of row blocks, the exact planner's program, the learned models' valid range,
and the measured evaluator's fused ops."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardlab.costmodel.bundle import load_bundle
from shardlab.data.importers import tables_from_records
from shardlab.errors import ShardlabError
from shardlab.evaluate.model import estimate_plan
from shardlab.evaluate.exchange import comm_pattern
from shardlab.plan import Placement, Plan
from shardlab.search.registry import run_sharder, sharder_for
from shardlab.tables import Table, Task


def task_with_sequences(n=8, ngpu=4, cap_gb=1.0):
    recs = [{"name": f"t{i}", "rows": 20_000 * (i + 1), "dim": [16, 32, 64][i % 3], "pooling_factor": 4.0 + 3 * i}
            for i in range(n)]
    tables = tables_from_records(recs, 4096, 1.05, 0)
    return Task("seq", ngpu, cap_gb, tuple(replace(t, pooled=i % 2 == 1) for i, t in enumerate(tables)), 4096)


def test_a_sequence_table_round_trips_through_task_json_and_says_its_width():
    t = task_with_sequences().tables[0]
    assert not t.pooled and t.out_dim == pytest.approx(t.dim * t.pooling_factor)
    assert Table.from_dict(t.to_dict()) == t and t.to_dict()["pooled"] is False
    pooled = replace(t, pooled=True)
    assert "pooled" not in pooled.to_dict() and pooled.out_dim == pooled.dim      # old files read as before
    assert not t.with_dim(8).pooled and t.with_dim(8).out_dim == pytest.approx(8 * t.pooling_factor)
    with pytest.raises(ShardlabError, match="field 'pooled'"):
        Table.from_dict({**t.to_dict(), "pooled": "no"})


def test_the_analytic_models_cost_a_sequence_tables_outputs_and_say_so():
    task = task_with_sequences()
    bundle = load_bundle("analytic", "cpu")
    plan = Plan(task.name, "hand", 4, tuple(Placement(t.name, 0, t.dim, 0, t.rows, i // 2)
                                            for i, t in enumerate(task.tables)))   # one sequence table a device
    seq = estimate_plan(task, plan, bundle)
    pooled_task = Task(task.name, task.ngpu, task.mem_cap_gb, tuple(replace(t, pooled=True) for t in task.tables),
                       task.batch_size)
    pooled = estimate_plan(pooled_task, plan, bundle)
    assert "4/8 sequence tables: outputs extrapolated from pooled ops" in seq.source
    assert "sequence" not in pooled.source
    for a, b in zip(seq.per_device, pooled.per_device):
        assert a.fw_compute_ms > b.fw_compute_ms and a.fw_comm_ms > b.fw_comm_ms
    assert seq.lower_bound_ms is not None and seq.lower_bound_ms <= seq.cost_ms + 1e-9


def test_a_learned_models_range_sends_sequence_tables_to_its_fallback():
    learned = load_bundle("neuroshard", "cpu")                     # a neural model, guarded by its valid range
    t = task_with_sequences().tables[0]
    assert not t.pooled
    rows = learned.compute.valid.rows([t, replace(t, pooled=True)])
    assert rows[0, -1] == 1.0                                      # the sequence table: outside, whatever its size
    assert rows[1, -1] == 0.0                                      # the same table pooled: inside
    inside = learned.compute.inside([[t], [replace(t, pooled=True)]])
    assert list(inside) == [False, True]


def test_sequence_row_blocks_send_their_own_rows_not_reduce_scattered_sums():
    task = task_with_sequences(n=2, ngpu=2)
    seq, pooled = task.tables[0], task.tables[1]
    assert not seq.pooled and pooled.pooled
    half = lambda t: t.rows // 2  # noqa: E731
    plan = Plan(task.name, "hand", 2, (Placement(seq.name, 0, seq.dim, 0, half(seq), 0),
                                       Placement(seq.name, 0, seq.dim, half(seq), seq.rows - half(seq), 1),
                                       Placement(pooled.name, 0, pooled.dim, 0, half(pooled), 0),
                                       Placement(pooled.name, 0, pooled.dim, half(pooled), pooled.rows - half(pooled), 1)))
    dims, rw = comm_pattern(task, plan, task.batch_size)
    assert rw.dim == pooled.dim                                    # only the pooled table is reduce-scattered
    assert sum(dims) == pytest.approx(seq.out_dim, rel=0.05)      # the sequence blocks' rows: its whole output
    assert all(d > 0 for d in dims)


def test_the_exact_planners_program_costs_sequence_tables_as_the_model_does():
    task = task_with_sequences()
    plan = run_sharder(sharder_for("optimal[time_limit_s:5]", "cpu"), task, 0)
    record = plan.metadata["optimality"]
    assert record["exact"] is True                                 # the analytic models: the program is exact
    cost = estimate_plan(task, plan, load_bundle("analytic", "cpu")).cost_ms
    assert record["cost_ms"] == pytest.approx(cost, rel=1e-6)
    assert record["bound_ms"] <= cost + 1e-9


@pytest.mark.parametrize("method", ["neuroshard", "dreamshard", "autoshard", "lookup_greedy", "random",
                                    "torchrec", "torchrec_free"])
def test_every_method_plans_a_task_with_sequence_tables(method):
    task = task_with_sequences()
    plan = run_sharder(sharder_for(method, "cpu"), task, 0)
    ev = estimate_plan(task, plan, load_bundle("analytic", "cpu"))
    assert np.isfinite(ev.cost_ms) and ev.cost_ms > 0
    assert {p.table for p in plan.placements} == {t.name for t in task.tables}


def test_the_measured_evaluator_runs_sequence_tables_as_fbgembs_sequence_ops():
    from shardlab.measure.compute import measure_compute
    from shardlab.measure.hardware import HardwareProfile, PROFILES

    profile = replace(PROFILES["cpu"], repeats=2, warmup=1, input_batches=1, batch_size=256)
    tables = [t for t in task_with_sequences(n=4).tables]
    rec = measure_compute(tables, profile)
    assert rec.provenance["ops"] == 1 + len({t.dim for t in tables if not t.pooled})   # pooled op + one per dim
    assert rec.fw_ms > 0 and rec.bw_ms > 0 and rec.tables == tuple(tables)
    assert isinstance(profile, HardwareProfile)


def test_the_torchrec_step_evaluator_refuses_sequence_tables_rather_than_timing_them_pooled():
    pytest.importorskip("torchrec")
    from shardlab.torchrec import TorchRecEvaluator

    task = task_with_sequences(n=4, ngpu=2)
    plan = run_sharder(sharder_for("lookup_greedy", "cpu"), task, 0)
    with pytest.raises(ShardlabError, match="table 't0' is a sequence table") as e:
        TorchRecEvaluator("cpu", rounds=1, steps=1).evaluate(task, {"a": plan})
    assert "\n" not in str(e.value)
