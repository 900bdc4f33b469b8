"""The analytic GPU-cluster all-to-all: bytes over NVLink inside a host and over the NICs
between hosts, at cited bus bandwidths, the slowest rank setting the collective's time."""

from __future__ import annotations

import numpy as np
import pytest

from shardlab.costmodel.base import CommModel, simulate_many
from shardlab.costmodel.topology_comm import TopologyComm


def test_one_host_costs_its_bytes_at_the_nvlink_bus_bandwidth():
    model = TopologyComm(batch_size=65536, bytes_per_value=4)
    dims = np.array([[256, 128, 128, 64]])
    got = model.predict(dims)
    # the heaviest rank sends 256 columns of B/G rows to 3 peers; the lightest receives 512 columns
    worst = max(65536 / 4 * 4 * 256 * 3, 65536 / 4 * 4 * (256 + 128 + 128))
    want_ms = worst / 370e9 * 1e3
    assert got.shape == (1, 4, 2)
    np.testing.assert_allclose(got[0, :, 0], want_ms, rtol=1e-12)
    np.testing.assert_allclose(got[0, :, 1], want_ms, rtol=1e-12)


def test_a_second_host_moves_bytes_over_the_slower_nics():
    model = TopologyComm(gpus_per_host=8)
    dims = np.full((1, 16), 128)
    one_host = TopologyComm(gpus_per_host=16).predict(dims)[0, 0, 1]
    two_hosts = model.predict(dims)[0, 0, 1]
    # 8 of 15 peers are on the other host: their bytes at 48 GB/s dominate the 7 at 370 GB/s
    chunk = 65536 / 16 * 4 * 128
    assert two_hosts == pytest.approx(8 * chunk / 48e9 * 1e3, rel=1e-12)
    assert one_host == pytest.approx(15 * chunk / 370e9 * 1e3, rel=1e-12)
    assert two_hosts > 4 * one_host


def test_forward_waits_for_the_straggler_and_latency_is_paid_once():
    model = TopologyComm(latency_us=20.0)
    dims = np.array([[64, 64]])
    plain = model.predict(dims)
    late = model.predict(dims, np.array([[0.0, 1.5]]))
    np.testing.assert_allclose(late[0, :, 0] - plain[0, :, 0], [1.5, 0.0])
    np.testing.assert_allclose(late[0, :, 1], plain[0, :, 1])
    assert plain[0, 0, 1] == pytest.approx(0.02 + 65536 / 2 * 4 * 64 / 370e9 * 1e3)


def test_row_wise_collectives_add_their_bytes_and_nothing_without_them():
    model = TopologyComm()
    assert not model.increment(4, None).any() and not model.increment(4, {"dim": 0, "index_counts": []}).any()
    inc = model.increment(4, {"dim": 128, "index_counts": []})
    rs = 3 * 65536 / 4 * 4 * 128 / 370e9 * 1e3
    np.testing.assert_allclose(inc, rs)
    counts = np.full((4, 4), 1000)
    with_ids = model.increment(4, {"dim": 128, "index_counts": counts.tolist()})
    np.testing.assert_allclose(with_ids[:, 0] - inc[:, 0], 3 * 1000 * 8 / 370e9 * 1e3)
    np.testing.assert_allclose(with_ids[:, 1], inc[:, 1])


def test_it_is_a_labelled_comm_model_the_simulator_takes():
    model = TopologyComm()
    assert isinstance(model, CommModel)
    label = model.source
    assert label.startswith("analytic:h100-nvlink4+ib400[")
    assert "370 GB/s (nccl-tests all-to-all, 8x H100 NVLink)" in label
    assert "48 GB/s (nccl-tests all-to-all, 400 Gb/s NIC per GPU)" in label
    assert "latency 0 us (not cited)" in label
    assert "(given)" in TopologyComm(intra_gbps=300.0, latency_us=5.0).source
    sims = simulate_many(np.ones((2, 8, 2)), np.full((2, 8), 64), model)
    assert len(sims) == 2 and (sims[0].fw_comm > 0).all() and (sims[0].bw_comm == sims[0].bw_comm[0]).all()


def test_the_model_file_keeps_its_constants(tmp_path):
    model = TopologyComm(gpus_per_host=4, latency_us=12.5, inter_gbps=24.0)
    model.save(str(tmp_path / "m.json"))
    again = TopologyComm.load(str(tmp_path / "m.json"))
    assert again.source == model.source
    dims = np.array([[8, 16, 32, 64, 8, 16, 32, 64]])
    np.testing.assert_array_equal(again.predict(dims), model.predict(dims))


def test_a_bundle_trained_on_gpu_compute_carries_the_topology_model_and_names_it(tmp_path):
    from shardlab.cli import main
    from shardlab.costmodel.bundle import load_bundle
    from shardlab.data.tasks import generate_task
    from shardlab.evaluate import ModelEvaluator
    from shardlab.plan import Plan

    out = tmp_path / "h100_analytic.json"
    assert main(["train", "analytic", "--dataset", "h100", "--comm", "topology", "--out", str(out),
                 "--no-progress"]) == 0
    assert (tmp_path / "h100_analytic.comm.json").exists()
    bundle = load_bundle(str(out))
    assert isinstance(bundle.comm, TopologyComm) and bundle.comm.batch_size == 65536
    # the topology of the h100 profile's facts, each bandwidth cited from its hardware.json
    assert bundle.provenance["comm"].startswith("given, not fitted: analytic:h100[hosts of 8; intra 370 GB/s (nccl-tests")
    assert not [k for k in bundle.heldout if k.startswith("comm")]      # no comm was measured, none judged
    task = generate_task(ntables=8, ngpu=2, mem_cap_gb=16.0, batch_size=65536, seed=0)
    plan = Plan.table_wise(task, [i % 2 for i in range(8)], "alternate")
    ev = ModelEvaluator(bundle).evaluate(task, {"alternate": plan})["alternate"]
    assert ev.source.startswith("analytic:h100[") and "+comm:analytic:h100[hosts of 8;" in ev.source


@pytest.mark.parametrize("name", ["analytic", "neuroshard"])
def test_the_shipped_h100_bundles_were_fitted_to_gpu_compute_and_bundle_the_cited_comm(name):
    from shardlab.costmodel.bundle import load_bundle

    bundle = load_bundle(name, "h100")
    assert isinstance(bundle.comm, TopologyComm)
    assert bundle.provenance["data"] == "dataset:h100"
    assert bundle.provenance["data_provenance"][0]["device"] == "cuda"
    assert {"compute_total", "compute_total_unseen_tables"} <= set(bundle.heldout)
    assert bundle.comm_for(8)[1].startswith("+comm:analytic:h100-nvlink4+ib400[")
