"""Offloaded tables (``hbm_share`` < 1: TorchRec's ``fused_uvm_caching``, or ``fused_uvm`` at 0):
HBM holds only their cache, host memory the rest. Every placement's memory counts the cache only,
the analytic compute model adds a labelled host-link cost, the learned models send them to that
fallback, the export names the kernel and cache share, and the measuring evaluators refuse them
in one line (fbgemm's CPU kernels have no host-memory mode)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardlab import constants as C
from shardlab.costmodel.bundle import load_bundle
from shardlab.costmodel.offload import offload_ms
from shardlab.data.importers import tables_from_records
from shardlab.errors import ShardlabError
from shardlab.evaluate.model import estimate_plan
from shardlab.torchrec.export import check_export, export_torchrec
from shardlab.plan import Placement, Plan, device_memory_bytes, validate_plan
from shardlab.search.registry import run_sharder, sharder_for
from shardlab.tables import Table, Task


def offloaded_task(n=8, ngpu=4, cap_gb=1.0, share=0.2):
    recs = [{"name": f"t{i}", "rows": 200_000 * (i + 1), "dim": [16, 32, 64][i % 3], "pooling_factor": 4.0 + 3 * i}
            for i in range(n)]
    tables = tables_from_records(recs, 4096, 1.05, 0)
    return Task("uvm", ngpu, cap_gb, tuple(replace(t, hbm_share=share) if i % 2 else t
                                           for i, t in enumerate(tables)), 4096)


def two_tables_one_each():
    """A task of two tables, the second offloaded, and the plan putting each on its own device."""
    task = offloaded_task(n=2, ngpu=2)
    return task, Plan(task.name, "hand", 2, tuple(Placement(t.name, 0, t.dim, 0, t.rows, g)
                                                  for g, t in enumerate(task.tables)))


def test_an_offloaded_table_round_trips_and_names_its_kernel():
    t = offloaded_task().tables[1]
    assert t.offloaded and t.kernel == "fused_uvm_caching" and t.to_dict()["hbm_share"] == 0.2
    assert Table.from_dict(t.to_dict()) == t
    assert replace(t, hbm_share=0.0).kernel == "fused_uvm" and replace(t, hbm_share=1.0).kernel == "fused"
    assert "hbm_share" not in replace(t, hbm_share=1.0).to_dict()          # old files read as before
    assert t.with_dim(8).hbm_share == 0.2                                    # column blocks keep it
    for bad in (1.5, -0.1, "half"):
        with pytest.raises(ShardlabError, match="field 'hbm_share'"):
            Table.from_dict({**t.to_dict(), "hbm_share": bad})


def test_hbm_holds_an_offloaded_tables_cache_only():
    task, plan = two_tables_one_each()
    a, b = task.tables
    mem = device_memory_bytes(task, plan)
    assert mem[0] == task.block_bytes(a.rows, a.dim)
    assert mem[1] == round(0.2 * task.block_bytes(b.rows, b.dim))          # TorchRec's rule: share x bytes
    assert task.host_bytes(b, b.rows, b.dim) == task.block_bytes(b.rows, b.dim) and task.host_bytes(a, 1, 4) == 0


def test_the_host_link_cost_is_labelled_and_follows_the_cache_share():
    task = offloaded_task()
    t = task.tables[1]
    full = [offload_ms(replace(t, hbm_share=h), 4096, 4, 1000.0) for h in (0.0, 0.2, 0.9, 1.0)]
    assert full[3] == (0.0, 0.0)                                            # in HBM: no host traffic
    assert full[0][0] > full[1][0] > full[2][0] > 0                         # a bigger cache misses less
    assert full[1][0] == pytest.approx(1000 * 0.8 * t.dim * 4 / (C.UVM_LINK_GBPS * 1e6))
    bundle = load_bundle("analytic", "cpu")
    plan = Plan(task.name, "hand", 4, tuple(Placement(x.name, 0, x.dim, 0, x.rows, i // 2)
                                            for i, x in enumerate(task.tables)))
    off = estimate_plan(task, plan, bundle)
    inside = Task(task.name, 4, 1.0, tuple(replace(x, hbm_share=1.0) for x in task.tables), task.batch_size)
    base = estimate_plan(inside, plan, bundle)
    assert "4/8 tables offloaded: host-link traffic analytic at 63 GB/s" in off.source and "not measured" in off.source
    assert "offloaded" not in base.source
    for a, b in zip(off.per_device, base.per_device):
        assert a.fw_compute_ms > b.fw_compute_ms and a.bw_compute_ms > b.bw_compute_ms
    assert off.lower_bound_ms is not None and off.lower_bound_ms <= off.cost_ms + 1e-9


def test_the_analytic_models_incremental_rows_cost_offloaded_tables_as_predict_does():
    task = offloaded_task()
    compute = load_bundle("analytic", "cpu").compute
    shard = list(task.tables[:4])
    rows = compute.embed(shard)
    assert np.allclose(compute.predict_sums(rows.sum(axis=0, keepdims=True), np.array([4])), compute.predict([shard]))


def test_a_learned_models_range_sends_offloaded_tables_to_its_fallback():
    learned = load_bundle("neuroshard", "cpu")
    t = replace(offloaded_task().tables[0], hbm_share=0.5)
    assert list(learned.compute.inside([[t], [replace(t, hbm_share=1.0)]])) == [False, True]


@pytest.mark.parametrize("method", ["neuroshard", "dreamshard", "autoshard", "lookup_greedy", "size_greedy",
                                    "random", "optimal[time_limit_s:5]", "torchrec", "torchrec_free"])
def test_every_method_plans_a_task_with_offloaded_tables_within_hbm(method):
    probe = offloaded_task()
    hbm = sum(probe.table_bytes(t) for t in probe.tables)
    task = replace(probe, mem_cap_gb=hbm / probe.ngpu / 0.7 / C.GB)   # fits only as offloaded tables keep 20% in HBM
    assert sum(task.block_bytes(t.rows, t.dim) for t in task.tables) > task.ngpu * task.mem_cap_bytes
    plan = run_sharder(sharder_for(method, "cpu"), task, 0)
    validate_plan(task, plan)
    assert max(device_memory_bytes(task, plan)) <= task.mem_cap_bytes
    ev = estimate_plan(task, plan, load_bundle("analytic", "cpu"))
    assert np.isfinite(ev.cost_ms) and "tables offloaded" in ev.source
    if method.startswith("optimal"):                  # the host-link term is additive: the program stays exact
        record = plan.metadata["optimality"]
        assert record["exact"] is True and record["cost_ms"] == pytest.approx(ev.cost_ms, rel=1e-6)
        assert record["bound_ms"] <= ev.cost_ms + 1e-9


def test_the_export_names_the_kernel_and_cache_share_as_torchrec_reads_them():
    task, plan = two_tables_one_each()
    a, b = task.tables
    out = export_torchrec(task, plan)
    check_export(out, task)
    assert out["plan"][a.name]["compute_kernel"] == "fused" and "cache_load_factor" not in out["plan"][a.name]
    assert out["plan"][b.name]["compute_kernel"] == "fused_uvm_caching"
    assert out["plan"][b.name]["cache_load_factor"] == 0.2
    pytest.importorskip("torchrec")
    from shardlab.torchrec.export import sharding_plan_from_export
    ps = sharding_plan_from_export(out, task).plan["sparse.ebc"][b.name]
    assert ps.compute_kernel == "fused_uvm_caching" and ps.cache_params.load_factor == 0.2


def test_the_measuring_evaluators_refuse_offloaded_tables_in_one_line():
    from shardlab.measure.compute import measure_compute

    task = offloaded_task(n=2, ngpu=2)
    with pytest.raises(ShardlabError, match="table 't1' is offloaded") as e:
        measure_compute(list(task.tables), "cpu")
    assert "\n" not in str(e.value) and "no host-memory mode" in str(e.value)
