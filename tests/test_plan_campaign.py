"""Measured plans into the store: real fused ops per device, real gloo ranks, resumable."""

from __future__ import annotations

from shardlab.profile.hardware import profile_with
from shardlab.profile.store import SampleStore
from shardlab.workflows.plan_campaign import run_plan_campaign


def test_plan_campaign_measures_and_resumes(tmp_path):
    store = str(tmp_path / "p.db")
    prof = profile_with("cpu", batch_size=256, repeats=3, warmup=1)
    assert run_plan_campaign(store, 2, ngpu=2, profile=prof, ntables=(3, 5), progress=False) == 2
    assert run_plan_campaign(store, 2, ngpu=2, profile=prof, ntables=(3, 5), progress=False) == 0
    with SampleStore(store) as s:
        plans = list(s.samples("plan:2"))
    assert {p["method"] for p in plans} == {"random", "size_greedy"}
    for p in plans:
        assert p["source"] == "measured:cpu[batch_size=256,repeats=3,warmup=1]"
        assert len(p["devices"]) == len(p["per_device"]) == 2
        assert p["cost_ms"] == max(d["total_ms"] for d in p["per_device"]) > 0
        assert p["provenance"]["campaign"]["kind"] == "plan" and p["provenance"]["fbgemm_gpu"]
