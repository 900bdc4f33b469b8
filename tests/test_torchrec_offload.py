"""ShardlabPlanner's host-memory offload: a table HBM cannot hold is planned on
``fused_uvm_caching`` (TorchRec's fallback), the coldest tables first, with its cache share
written into the plan and the reason in its metadata; a table whose constraints allow only a
host-memory kernel gets it; host memory is checked; what is offloaded is costed by the labelled
host-link model."""

from __future__ import annotations

import pytest

torchrec = pytest.importorskip("torchrec", reason="torchrec is installed by scripts/setup.sh")

import torch  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner.planners import validate_modules_inclusion_in_sharding_plan  # noqa: E402
from torchrec.distributed.planner.types import (ParameterConstraints, PlannerError,  # noqa: E402
                                                PlannerErrorType, Topology)
from torchrec.distributed.types import CacheParams  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection  # noqa: E402

from shardlab.costmodel.bundle import load_bundle  # noqa: E402
from shardlab.evaluate.model import estimate_plan  # noqa: E402
from shardlab.plan import device_memory_bytes  # noqa: E402
from shardlab.torchrec import ShardlabPlanner  # noqa: E402

SHARDERS = [EmbeddingBagCollectionSharder()]
MB = 2**20


def model(specs):
    m = torch.nn.Module()
    m.ebc = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d,
                                                              feature_names=[f"f_{n}"]) for n, r, d in specs],
                                   device=torch.device("meta"))
    return m


def topology(hbm_mb, world=2, ddr_mb=1024):
    return Topology(world_size=world, compute_device="cuda", hbm_cap=int(hbm_mb * MB), ddr_cap=int(ddr_mb * MB))


def test_a_table_larger_than_all_hbm_is_offloaded_with_a_cache_and_says_why():
    m = model([("huge", 200_000, 64, ), ("a", 1000, 32), ("b", 2000, 16)])     # huge: 48.8 MiB; HBM: 2 x 20 MiB
    planner = ShardlabPlanner(topology(20), profile="cpu")
    plan = planner.plan(m, SHARDERS)
    huge = plan.plan["ebc"]["huge"]
    assert huge.compute_kernel == "fused_uvm_caching" and huge.cache_params.load_factor == 0.2
    assert {plan.plan["ebc"][n].compute_kernel for n in ("a", "b")} == {"fused"}
    why = planner.plan_.metadata["offloaded"]
    assert list(why) == ["huge"] and why["huge"].startswith("fused_uvm_caching, cache share 0.2: the tables need")
    task = planner.task_
    assert task.table("huge").hbm_share == 0.2
    assert max(device_memory_bytes(task, planner.plan_)) <= task.mem_cap_bytes
    validate_modules_inclusion_in_sharding_plan(plan, m, SHARDERS)
    ev = estimate_plan(task, planner.plan_, load_bundle("analytic", "cpu"))
    assert "1/3 tables offloaded: host-link traffic analytic" in ev.source


def test_the_coldest_table_is_offloaded_first():
    m = model([("hot", 100_000, 64), ("cold", 100_000, 64)])                   # 24.4 MiB each; HBM: 2 x 26 MiB
    cons = {"hot": ParameterConstraints(pooling_factors=[40.0]), "cold": ParameterConstraints(pooling_factors=[1.0])}
    planner = ShardlabPlanner(topology(26), constraints=cons, profile="cpu")
    plan = planner.plan(m, SHARDERS)
    assert plan.plan["ebc"]["cold"].compute_kernel == "fused_uvm_caching"
    assert plan.plan["ebc"]["hot"].compute_kernel == "fused"
    assert list(planner.plan_.metadata["offloaded"]) == ["cold"]


def test_nothing_is_offloaded_when_hbm_holds_the_tables():
    planner = ShardlabPlanner(topology(200), profile="cpu")
    plan = planner.plan(model([("a", 100_000, 64), ("b", 100_000, 64)]), SHARDERS)
    assert {ps.compute_kernel for ps in plan.plan["ebc"].values()} == {"fused"}
    assert "offloaded" not in planner.plan_.metadata


def test_constraints_choose_the_host_memory_kernel_and_its_cache_share():
    cons = {"a": ParameterConstraints(compute_kernels=["fused_uvm"]),
            "b": ParameterConstraints(compute_kernels=["fused_uvm_caching"], cache_params=CacheParams(load_factor=0.5)),
            "c": ParameterConstraints(cache_params=CacheParams(load_factor=0.3))}
    planner = ShardlabPlanner(topology(200), constraints=cons, profile="cpu")
    plan = planner.plan(model([("a", 10_000, 32), ("b", 10_000, 32), ("c", 10_000, 32)]), SHARDERS)
    got = plan.plan["ebc"]
    assert got["a"].compute_kernel == "fused_uvm" and planner.task_.table("a").hbm_share == 0.0
    assert got["b"].compute_kernel == "fused_uvm_caching" and got["b"].cache_params.load_factor == 0.5
    assert planner.task_.table("b").hbm_share == 0.5
    assert got["c"].compute_kernel == "fused"                    # it fits: a cache share alone offloads nothing
    assert got["c"].cache_params.load_factor == 0.3              # the constraint's fused params, carried


def test_the_sharders_cache_load_factor_is_the_default_share():
    sharder = EmbeddingBagCollectionSharder(fused_params={"cache_load_factor": 0.4})
    planner = ShardlabPlanner(topology(20), profile="cpu")
    plan = planner.plan(model([("huge", 200_000, 64), ("a", 1000, 32)]), [sharder])
    assert plan.plan["ebc"]["huge"].cache_params.load_factor == 0.4


def test_host_memory_too_small_for_the_offloaded_tables_is_one_line():
    with pytest.raises(PlannerError) as e:
        ShardlabPlanner(topology(20, ddr_mb=10), profile="cpu").plan(model([("huge", 200_000, 64)]), SHARDERS)
    assert "offloaded tables need" in str(e.value) and "ddr_cap" in str(e.value) and "\n" not in str(e.value)
    assert e.value.error_type == PlannerErrorType.INSUFFICIENT_STORAGE      # 48.8 MiB over 2 x 10 MiB of host
