"""Measured plans into the store: real fused ops per device, real gloo ranks, resumable."""

from __future__ import annotations

import pytest

from shardlab.errors import ShardlabError
from shardlab.measure.hardware import profile_with
from shardlab.measure.store import SampleStore
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


def test_plan_campaign_takes_its_methods_and_refuses_a_bad_one_before_measuring(tmp_path):
    store = str(tmp_path / "p.db")
    prof = profile_with("cpu", batch_size=256, repeats=2, warmup=1)
    with pytest.raises(ShardlabError, match="no_such_sharder"):
        run_plan_campaign(store, 1, ngpu=2, profile=prof, methods=("no_such_sharder",), progress=False)
    with pytest.raises(ShardlabError, match="field 'methods'"):
        run_plan_campaign(store, 1, ngpu=2, profile=prof, methods=(), progress=False)
    assert not (tmp_path / "p.db").exists()          # refused before the store was opened
    # a model-based sharder under overridden timing settings searches with its profile's shipped models
    assert run_plan_campaign(store, 2, ngpu=2, profile=prof, ntables=(3, 4), methods=("dim_greedy", "neuroshard"),
                             progress=False) == 2
    with SampleStore(store) as s:
        plans = list(s.samples("plan:2"))
    assert sorted(p["method"] for p in plans) == ["dim_greedy", "neuroshard"]
    assert plans[0]["provenance"]["campaign"]["methods"] == ["dim_greedy", "neuroshard"]
