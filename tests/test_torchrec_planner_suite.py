"""TorchRec's own planner tests (``torchrec/distributed/planner/tests/test_planners.py``), their
assertions on a planner's public contract rewritten against ``ShardlabPlanner``: the same models,
sharders, topology (2 ranks, 2 MiB of HBM each) and constraints, the same expected ranks, errors
and fused parameters. docs/torchrec.md lists every assertion of that file, which ones are here,
and why the others do not apply or do not pass yet."""

from __future__ import annotations

from typing import List

import pytest

torchrec = pytest.importorskip("torchrec", reason="torchrec is installed by scripts/setup.sh")

import torch  # noqa: E402
from torchrec.distributed.embedding_types import EmbeddingComputeKernel  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner.planners import validate_modules_inclusion_in_sharding_plan  # noqa: E402
from torchrec.distributed.planner.types import ParameterConstraints, PlannerError, PlannerErrorType  # noqa: E402
from torchrec.distributed.planner.types import Topology  # noqa: E402
from torchrec.distributed.sharding_plan import get_default_sharders  # noqa: E402
from torchrec.distributed.test_utils.test_model import TestSparseNN  # noqa: E402
from torchrec.distributed.types import (BoundsCheckMode, CacheAlgorithm, CacheParams, DataType,  # noqa: E402
                                        ShardingPlan, ShardingType)
from torchrec.modules.embedding_configs import EmbeddingBagConfig  # noqa: E402

from shardlab.torchrec import ShardlabPlanner  # noqa: E402

META = torch.device("meta")


class RowOrTableSharder(EmbeddingBagCollectionSharder):
    """Offers row- and table-wise with the fused kernel (TorchRec's test's ``TWvsRWSharder``)."""

    def sharding_types(self, compute_device_type: str) -> List[str]:
        return [ShardingType.ROW_WISE.value, ShardingType.TABLE_WISE.value]

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> List[str]:
        return [EmbeddingComputeKernel.FUSED.value]


class TableSharder(RowOrTableSharder):
    """Offers table-wise only (TorchRec's test's ``TWSharder``)."""

    def sharding_types(self, compute_device_type: str) -> List[str]:
        return [ShardingType.TABLE_WISE.value]


def two_ranks(**kw) -> Topology:
    return Topology(world_size=2, hbm_cap=1024 * 1024 * 2, compute_device="cuda", **kw)


def tables(n, rows=100, dim=64):
    return [EmbeddingBagConfig(num_embeddings=rows, embedding_dim=dim, name=f"table_{i}",
                               feature_names=[f"feature_{i}"]) for i in range(n)]


def ranks(plan, path="sparse.ebc"):
    return sorted(ps.ranks for ps in plan.plan[path].values())


def test_table_wise_solution():
    plan = ShardlabPlanner(two_ranks()).plan(TestSparseNN(tables=tables(4), sparse_device=META),
                                             [RowOrTableSharder()])
    assert ranks(plan) == [[0], [0], [1], [1]]


def test_never_fit_is_insufficient_storage():
    model = TestSparseNN(tables=tables(2, rows=10_000_000, dim=10_000_000), sparse_device=META)
    with pytest.raises(PlannerError) as e:
        ShardlabPlanner(two_ranks()).plan(model, [RowOrTableSharder()])
    assert e.value.error_type == PlannerErrorType.INSUFFICIENT_STORAGE


def test_fail_then_rerun():
    model = TestSparseNN(tables=tables(1, rows=4096, dim=128), sparse_device=META)   # 2 MiB: fits no rank whole
    planner = ShardlabPlanner(two_ranks())
    with pytest.raises(PlannerError) as e:
        planner.plan(model, [TableSharder()])
    assert e.value.error_type == PlannerErrorType.STRICT_CONSTRAINTS
    assert ranks(planner.plan(model, [RowOrTableSharder()])) == [[0, 1]]     # the same planner, rerun


def test_no_sharders():
    plan = ShardlabPlanner(two_ranks()).plan(TestSparseNN(tables=tables(4), sparse_device=META), [])
    assert plan == ShardingPlan({})


FUSED = {
    "table_0": ParameterConstraints(enforce_hbm=True, cache_params=CacheParams(algorithm=CacheAlgorithm.LFU),
                                    feature_names=["feature_0"]),
    "table_1": ParameterConstraints(enforce_hbm=False, stochastic_rounding=True, feature_names=["feature_1"]),
    "table_2": ParameterConstraints(bounds_check_mode=BoundsCheckMode.FATAL, feature_names=["feature_2"]),
    "table_3": ParameterConstraints(cache_params=CacheParams(algorithm=CacheAlgorithm.LFU, load_factor=0.1,
                                                             reserved_memory=1.0, precision=DataType.FP16),
                                    feature_names=["feature_3"]),
}


@pytest.mark.parametrize("table,expected", [
    ("table_0", (CacheParams(algorithm=CacheAlgorithm.LFU), True, None, None)),
    ("table_1", (None, False, True, None)),
    ("table_2", (None, None, None, BoundsCheckMode.FATAL)),
    ("table_3", (CacheParams(algorithm=CacheAlgorithm.LFU, load_factor=0.1, reserved_memory=1.0,
                             precision=DataType.FP16), None, None, None)),
])
def test_fused_parameters_from_constraints(table, expected):
    model = TestSparseNN(tables=tables(4), sparse_device=META)
    plan = ShardlabPlanner(two_ranks(), constraints=FUSED).plan(model, get_default_sharders())
    ps = plan.plan["sparse.ebc"][table]
    assert (ps.cache_params, ps.enforce_hbm, ps.stochastic_rounding, ps.bounds_check_mode) == expected


def test_planner_context_hash():
    a = ShardlabPlanner(Topology(local_world_size=8, world_size=1, compute_device="cuda"), batch_size=128,
                        constraints={"table1": ParameterConstraints()})
    b = ShardlabPlanner(Topology(local_world_size=8, world_size=1, compute_device="cuda"), batch_size=128,
                        constraints={"table1": ParameterConstraints()})
    c = ShardlabPlanner(Topology(local_world_size=8, world_size=2, compute_device="cuda"), batch_size=256,
                        constraints={"table1": ParameterConstraints()})
    assert a.hash_planner_context_inputs() == b.hash_planner_context_inputs()
    assert a.hash_planner_context_inputs() != c.hash_planner_context_inputs()


def test_every_shardable_module_of_torchrecs_test_model_is_in_the_plan():
    """TorchRec's inclusion validator on its TestSparseNN with pooled, weighted and
    position-weighted collections (the default sharders)."""
    from torchrec.modules.feature_processor_ import PositionWeightedModule

    fp = {"feature_2": PositionWeightedModule(max_feature_length=10, device=META)}
    model = TestSparseNN(tables=tables(3), weighted_tables=[EmbeddingBagConfig(
        num_embeddings=200, embedding_dim=32, name="weighted_0", feature_names=["weighted_feature_0"])],
        sparse_device=META, feature_processor_modules=fp)
    plan = ShardlabPlanner(Topology(world_size=2, compute_device="cuda")).plan(model, get_default_sharders())
    validate_modules_inclusion_in_sharding_plan(plan, model, get_default_sharders())
    planned = {(path, name) for path, mp in plan.plan.items() for name in mp}
    assert {name for _, name in planned} == {"table_0", "table_1", "table_2", "weighted_0"}


class AutoSharder(RowOrTableSharder):
    """Offers row- and table-wise with every kernel shardlab or TorchRec's estimator costs
    (TorchRec's test's ``AutoSharder``, less the kernels TorchRec 1.8's estimator refuses)."""

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> List[str]:
        return ["dense", "fused", "fused_uvm", "fused_uvm_caching"]


def kernels_and_ranks(plan):
    return sorted((name, ps.compute_kernel, ps.ranks) for name, ps in plan.plan["sparse.ebc"].items())


def test_auto_sharder_setup_plans_as_torchrecs_planner_with_its_default_proposer():
    """``test_auto_sharder_solution`` asserts what TorchRec's ``EmbeddingOffloadScaleupProposer``
    proposes (every table with cache params on ``fused_uvm_caching``, row-wise). With its default
    proposer TorchRec's own planner keeps these four 25 KB tables in HBM, table-wise; so does
    ShardlabPlanner (docs/torchrec.md)."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner

    model = TestSparseNN(tables=tables(4, dim=64), sparse_device=META)
    cons = {f"table_{i}": ParameterConstraints(cache_params=CacheParams(algorithm=CacheAlgorithm.LRU))
            for i in range(4)}
    ours = ShardlabPlanner(two_ranks(), constraints=cons).plan(model, [AutoSharder()])
    theirs = EmbeddingShardingPlanner(topology=two_ranks(), constraints=cons).plan(model, [AutoSharder()])
    assert kernels_and_ranks(ours) == kernels_and_ranks(theirs)
    assert {k for _, k, _ in kernels_and_ranks(ours)} == {"fused"}


def test_a_table_larger_than_all_hbm_is_offloaded_by_both_planners():
    """TorchRec's fallback for a table HBM cannot hold: ``fused_uvm_caching``; shardlab's too."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner

    configs = [EmbeddingBagConfig(num_embeddings=n, embedding_dim=64, name=f"table_{i}", feature_names=[f"feature_{i}"])
               for i, n in enumerate([200_000, 1000, 1000, 1000])]                 # table_0: 48.8 MiB
    model = TestSparseNN(tables=configs, sparse_device=META)
    topo = Topology(world_size=2, hbm_cap=20 * 2**20, compute_device="cuda")
    sharders = [EmbeddingBagCollectionSharder()]
    ours = kernels_and_ranks(ShardlabPlanner(topo).plan(model, sharders))
    theirs = kernels_and_ranks(EmbeddingShardingPlanner(topology=topo).plan(model, sharders))
    assert [k for _, k, _ in ours] == [k for _, k, _ in theirs] == ["fused_uvm_caching", "fused", "fused", "fused"]
