"""The row-wise comm campaign's samples and the analytic row-wise comm model."""

import numpy as np
import pytest

from shardlab.costmodel.analytic import save_analytic
from shardlab.costmodel.rowwise_comm import BW_COLS, FW_COLS, INDEX_BYTES, RowWiseComm, rowwise_terms
from shardlab.measure.campaign import rowwise_spec
from shardlab.measure.store import load_measured
from studies.row_wise.comm_check import judge_rows, measured_comm_rows
from studies.row_wise.tasks import Spec, build_task


def test_rowwise_terms_count_fixed_costs_collective_and_off_diagonal_index_bytes():
    rw = {"dim": 16, "index_counts": [[5, 1, 2], [3, 7, 0], [4, 4, 9]]}
    t = rowwise_terms(3, 100, 4, rw)                       # b = 34 rows per slice
    assert t.shape == (3, 6)
    assert np.allclose(t[:, 0], 1) and np.allclose(t[:, 1], 2)          # a reduce-scatter, over G-1 peers
    assert np.allclose(t[:, 2], 3 * 34 * 16 * 4)
    assert np.allclose(t[:, 3], 2)                                       # an index all-to-all
    assert np.allclose(t[:, 4], np.array([3, 3, 8]) * INDEX_BYTES)     # sent, diagonal excluded
    assert np.allclose(t[:, 5], np.array([7, 5, 2]) * INDEX_BYTES)     # received
    assert not rowwise_terms(3, 100, 4, None).any()
    index_only = rowwise_terms(3, 100, 4, {"dim": 0, "index_counts": rw["index_counts"]})
    assert not index_only[:, :3].any() and np.allclose(index_only[:, 3:], t[:, 3:])


def test_rowwise_specs_are_deterministic_square_and_sized_by_pooling():
    a, b = rowwise_spec(4, 7, 0, 4096), rowwise_spec(4, 7, 0, 4096)
    assert a == b and a != rowwise_spec(4, 8, 0, 4096)
    counts = np.array(a["rowwise"]["index_counts"])
    assert counts.shape == (4, 4) and (counts >= 0).all()
    per_rank = 1024 * sum(a["rowwise_pooling"])
    assert np.allclose(counts.sum(axis=1), per_rank, atol=4)
    assert a["rowwise"]["dim"] == sum(a["rowwise_dims"])


def test_the_wide_space_mixes_no_traffic_index_only_and_full_samples():
    specs = [rowwise_spec(4, i, 0, 4096, "wide") for i in range(80)]
    modes = {s["rowwise_mode"] for s in specs}
    assert modes == {"none", "index", "full"}
    for s in specs:
        rw = s["rowwise"]
        assert (rw["dim"] > 0) == (s["rowwise_mode"] == "full")
        assert bool(rw["index_counts"]) == (s["rowwise_mode"] != "none")
    assert max(len(s["rowwise_dims"]) for s in specs) > 3          # wider than the narrow space
    assert specs[5]["dim_sums"] == rowwise_spec(4, 5, 0, 4096)["dim_sums"]   # the same all-to-all as narrow
    with pytest.raises(Exception, match="space"):
        rowwise_spec(4, 0, 0, 4096, "huge")


def test_the_shipped_samples_are_the_specs_drawn_again():
    for g in (4, 8):
        rows = list(load_measured(f"rowcomm:{g}", "cpu/rowcomm"))
        assert {":wide:" in r["key"] for r in rows} == {False, True}
        for r in rows[::37]:
            i, space = int(r["key"].rsplit(":", 1)[1]), "wide" if ":wide:" in r["key"] else "narrow"
            spec = rowwise_spec(g, i, 0, 4096, space)
            assert spec["rowwise"] == r["rowwise"] and spec["dim_sums"] == r["dim_sums"]


def _rows(n, fw_coef, bw_coef, space="wide"):
    """Synthetic samples at G = 4 and 8 whose times are exactly linear in the model's regressors."""
    model = RowWiseComm()
    out = []
    for i in range(n):
        g = 4 if i % 2 else 8
        spec = rowwise_spec(g, i, 1, 4096, space)
        x = model._rows(spec["dim_sums"], spec["delays_ms"], spec["rowwise"], 4096, 4)
        out.append({"key": f"k{i}", "batch_size": 4096, "dtype": "torch.float32", "dim_sums": spec["dim_sums"],
                    "delays_ms": spec["delays_ms"], "rowwise": spec["rowwise"], "fw_comm_ms": list(x[:, FW_COLS] @ fw_coef),
                    "bw_comm_ms": list(x[:, BW_COLS] @ bw_coef), "provenance": {"profile": {"name": "syn"}}})
    return out


FW_TRUE = np.array([0.2, 0.05, 1e-7, 2e-7, 1e-7, 1.0, 2.0, 0.5, 3e-8, 0.3, 1e-6, 1e-6])
BW_TRUE = np.array([0.1, 0.02, 2e-7, 1e-7, 1e-7, 1.0, 0.4, 5e-8])


def test_the_model_recovers_a_linear_truth_and_round_trips(tmp_path):
    rows = _rows(80, FW_TRUE, BW_TRUE)
    m = RowWiseComm().fit(rows[:60])
    for r in rows[60:]:
        pred = m.predict([r["dim_sums"]], [r["delays_ms"]], [r["rowwise"]])[0]
        assert np.allclose(pred[:, 0], r["fw_comm_ms"], rtol=1e-6) and np.allclose(pred[:, 1], r["bw_comm_ms"], rtol=1e-6)
        if r["rowwise"]["dim"]:                                        # row-wise traffic costs time
            assert (m.predict([r["dim_sums"]], [r["delays_ms"]], None)[0, :, 0] < pred[:, 0]).all()
    assert np.allclose(m.coef_fw_[6:8], FW_TRUE[6:8], rtol=1e-4)       # the collectives' fixed costs
    assert np.allclose(m.coef_bw_[5:7], BW_TRUE[5:7], rtol=1e-4)
    save_analytic(m, str(tmp_path / "m.json"))
    back = RowWiseComm.load(str(tmp_path / "m.json"))
    assert isinstance(back, RowWiseComm) and np.allclose(back.coef_fw_, m.coef_fw_)
    assert "analytic" in back.source


def _fitted():
    return RowWiseComm().fit(_rows(40, FW_TRUE, BW_TRUE))


def test_the_increment_is_what_row_wise_traffic_adds_to_a_prediction():
    from shardlab.costmodel.bundle import load_bundle
    from shardlab.costmodel.rowwise_comm import WithRowWise

    m = _fitted()
    spec = rowwise_spec(4, 3, 2, 4096)
    d, dl, rw = spec["dim_sums"], spec["delays_ms"], spec["rowwise"]
    inc = m.increment(4, rw)
    assert inc.shape == (4, 2) and (inc > 0).all()
    assert np.allclose(m.predict([d], [dl], [rw])[0] - m.predict([d], [dl], None)[0], inc)
    assert not m.increment(4, None).any()
    base = load_bundle("analytic").comm_for(4)[0]
    both = WithRowWise(base, m.increment(4, rw)).predict([d, d], [dl, dl])
    assert both.shape == (2, 4, 2) and np.allclose(both[1], base.predict([d], [dl])[0] + inc)


def _row_wise_task_and_plans():
    from shardlab.search import get_sharder, run_sharder
    from tests.test_row_wise_search import _task

    task = _task()
    return task, {"rw": run_sharder(get_sharder("size_greedy"), task),
                  "whole": run_sharder(get_sharder("size_greedy"), _task(share=1.5, name="whole"))}


def test_the_model_evaluator_costs_row_wise_traffic_only_where_a_plan_has_it():
    from shardlab.costmodel.bundle import load_bundle
    from shardlab.evaluate.model import ModelEvaluator, estimate_plan
    from shardlab.evaluate.exchange import comm_pattern
    from tests.test_row_wise_search import _task

    m, bundle = _fitted(), load_bundle("analytic")
    task, plans = _row_wise_task_and_plans()
    whole_task = _task(share=1.5, name="whole")
    plain = estimate_plan(whole_task, plans["whole"], bundle)
    assert estimate_plan(whole_task, plans["whole"], bundle, rowwise_comm=m) == plain    # no row blocks: unchanged
    dims, rw = comm_pattern(task, plans["rw"], 4096)
    assert not rw.empty
    with_rw = estimate_plan(task, plans["rw"], bundle, lower_bound=False, rowwise_comm=m)
    without = estimate_plan(task, plans["rw"], bundle, lower_bound=False)
    assert "analytic-rowwise" in with_rw.source and "analytic-rowwise" not in without.source
    bw = np.array([d.bw_comm_ms for d in with_rw.per_device])
    base = np.asarray(bundle.comm_for(4)[0].predict([dims], None))[0, :, 1]
    assert np.allclose(bw, base + m.increment(4, rw.to_dict())[:, 1])
    ev = ModelEvaluator(bundle, rowwise_comm=None, lower_bound=False).evaluate(task, {"rw": plans["rw"]})
    assert ev["rw"].source == without.source


def test_judge_rows_scores_each_predictor_per_rank_and_per_plan():
    rows = [{"fw_comm_ms": [1.0, 2.0], "bw_comm_ms": [3.0, 1.0]}, {"fw_comm_ms": [2.0, 4.0], "bw_comm_ms": [1.0, 1.0]}]
    exact = lambda r: np.column_stack([r["fw_comm_ms"], r["bw_comm_ms"]])   # noqa: E731
    double = lambda r: 2 * exact(r)                                           # noqa: E731
    out = judge_rows(rows, {"exact": exact, "double": double})
    assert out["exact"]["fw"]["mape"] == 0 and out["exact"]["plan_comm"]["mape"] == 0
    assert out["double"]["bw"]["mape"] == pytest.approx(1.0) and out["double"]["fw"]["n"] == 4
    assert out["double"]["plan_comm"]["n"] == 2


def test_measured_comm_rows_turn_a_benchmark_record_into_comm_samples():
    from shardlab.evaluate.exchange import comm_pattern
    from shardlab.search import get_sharder, run_sharder

    spec = Spec("pool", 4, share=0.45, ntables=12)
    task = build_task(spec, 4096)
    plan = run_sharder(get_sharder("size_greedy"), task)
    dev = [{"fw_compute_ms": 1.0 + g, "bw_compute_ms": 2.0, "fw_comm_ms": 5.0, "bw_comm_ms": 3.0 - g / 2}
           for g in range(4)]
    record = {"spec": spec.__dict__, "task": task.name, "plans": {"size_greedy": plan.to_dict()},
              "evaluations": {"size_greedy": {"per_device": dev}}, "row_layouts": {}}
    (row,) = measured_comm_rows([record], 4096)
    dims, rw = comm_pattern(task, plan, 4096)
    assert row["dim_sums"] == dims and row["rowwise"] == rw.to_dict() and not rw.empty
    assert row["shard_dim_sums"] == [sum(p.cols for p in plan.placements if p.device == g) for g in range(4)]
    assert np.allclose(row["delays_ms"], [0.0, 0.5, 1.0, 1.5])          # compute + bw comm, minus the least
    assert row["fw_comm_ms"] == [5.0] * 4 and row["bw_comm_ms"] == [3.0, 2.5, 2.0, 1.5]
