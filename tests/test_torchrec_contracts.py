"""``ShardlabPlanner`` keeps TorchRec's planner contracts: ``sharders=None`` means TorchRec's
default sharders, so sequence (``EmbeddingCollection``) and position-weighted
(``FeatureProcessedEmbeddingBagCollection``) modules are planned at their own paths, and a module
kind shardlab does not plan is refused in one line instead of being left out of the plan (which
``DistributedModelParallel`` would accept, leaving the module unsharded); planning failures are TorchRec's ``PlannerError``; no sharders give the empty plan."""

from __future__ import annotations

import pytest

torchrec = pytest.importorskip("torchrec", reason="torchrec is installed by scripts/setup.sh")

import torch  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import Topology  # noqa: E402
from torchrec.distributed.planner.planners import validate_modules_inclusion_in_sharding_plan  # noqa: E402
from torchrec.distributed.planner.types import PlannerError  # noqa: E402
from torchrec.distributed.sharding_plan import get_default_sharders  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection  # noqa: E402
from torchrec.modules.feature_processor_ import PositionWeightedModule  # noqa: E402
from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection  # noqa: E402

from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.torchrec import ShardlabPlanner, ShardlabPlannerError  # noqa: E402

META = torch.device("meta")


def bag_configs(prefix, n=3, rows=2000):
    return [EmbeddingBagConfig(name=f"{prefix}{i}", num_embeddings=rows * (i + 1), embedding_dim=32,
                               feature_names=[f"{prefix}f{i}"]) for i in range(n)]


class WithSequence(torch.nn.Module):
    """A pooled collection beside a sequence one."""

    def __init__(self):
        super().__init__()
        self.ebc = EmbeddingBagCollection(tables=bag_configs("b"), device=META)
        self.seq = EmbeddingCollection(tables=[EmbeddingConfig(name="s0", num_embeddings=1000, embedding_dim=32,
                                                               feature_names=["sf0"])], device=META)


class WithPositionWeighted(torch.nn.Module):
    """A pooled collection beside a position-weighted one (its own EBC inside)."""

    def __init__(self):
        super().__init__()
        self.ebc = EmbeddingBagCollection(tables=bag_configs("b"), device=META)
        inner = EmbeddingBagCollection(tables=bag_configs("p", 2), device=META, is_weighted=True)
        self.fp_ebc = FeatureProcessedEmbeddingBagCollection(
            inner, {f"pf{i}": PositionWeightedModule(10, device=META) for i in range(2)})


def planner(world=2, gb=1.0):
    return ShardlabPlanner(Topology(world_size=world, compute_device="cuda", hbm_cap=int(gb * 2**30),
                                    ddr_cap=int(gb * 2**30)), method="lookup_greedy", profile="cpu")


def test_a_sequence_collection_is_planned_at_its_own_path_as_sequence_tables():
    m = WithSequence()
    p = planner()
    plan = p.plan(m, None)                                     # TorchRec's default sharders, as TorchRec reads None
    assert set(plan.plan) == {"ebc", "seq"} and set(plan.plan["seq"]) == {"s0"}
    validate_modules_inclusion_in_sharding_plan(plan, m, get_default_sharders())   # TorchRec's own validator
    kinds = {t.name: t.pooled for t in p.task_.tables}
    assert kinds == {"b0": True, "b1": True, "b2": True, "s0": False}
    assert "sequence table" in p.task_.table("s0").source
    # with only the EBC sharder named, the sequence module is the user's to leave unsharded
    plan = planner().plan(WithSequence(), [EmbeddingBagCollectionSharder()])
    assert set(plan.plan) == {"ebc"}


class Unplanned(torch.nn.Module):
    """A module kind shardlab does not plan, with a sharder of its own."""


def test_a_module_a_sharder_would_shard_but_shardlab_does_not_plan_is_refused_not_left_out():
    class UnplannedSharder(EmbeddingBagCollectionSharder):
        @property
        def module_type(self):
            return Unplanned

    m = WithSequence()
    m.odd = Unplanned()
    with pytest.raises(PlannerError) as e:
        planner().plan(m, [EmbeddingBagCollectionSharder(), UnplannedSharder()])
    assert "module 'odd' (Unplanned) is not one shardlab plans" in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, ShardlabError)


def test_a_position_weighted_collection_is_planned_at_its_own_path_as_torchrec_keys_it():
    m = WithPositionWeighted()
    p = planner()
    plan = p.plan(m, None)                                     # TorchRec's default sharders
    assert set(plan.plan) == {"ebc", "fp_ebc"}
    assert set(plan.plan["fp_ebc"]) == {"p0", "p1"} and set(plan.plan["ebc"]) == {"b0", "b1", "b2"}
    validate_modules_inclusion_in_sharding_plan(plan, m, get_default_sharders())   # TorchRec's own validator
    weighted = {t.name: t.source for t in p.task_.tables}
    assert all("weighted lookups costed as unweighted" in weighted[n] for n in ("p0", "p1"))
    assert not any("weighted" in weighted[n] for n in ("b0", "b1", "b2"))
    # with only an EBC sharder, the FP-EBC is not matched: its inner collection is, at TorchRec's key
    plan = planner().plan(WithPositionWeighted(), [EmbeddingBagCollectionSharder()])
    assert set(plan.plan) == {"ebc", "fp_ebc._embedding_bag_collection"}
    with pytest.raises(PlannerError):                          # and TorchRec's validator says what is missing
        validate_modules_inclusion_in_sharding_plan(planner().plan(WithPositionWeighted(),
                                                                   [EmbeddingBagCollectionSharder()]),
                                                    WithPositionWeighted(), get_default_sharders())


def test_a_managed_collision_collection_is_refused_in_one_line_not_left_out():
    from torchrec.modules.mc_embedding_modules import ManagedCollisionEmbeddingCollection
    from torchrec.modules.mc_modules import (DistanceLFU_EvictionPolicy, ManagedCollisionCollection,
                                             MCHManagedCollisionModule)

    cpu = torch.device("cpu")
    inner = EmbeddingCollection(tables=[EmbeddingConfig(name="m0", num_embeddings=1000, embedding_dim=16,
                                                        feature_names=["mf0"])], device=cpu)
    collisions = ManagedCollisionCollection(
        {"m0": MCHManagedCollisionModule(zch_size=1000, device=cpu, eviction_policy=DistanceLFU_EvictionPolicy(),
                                         eviction_interval=1)}, inner.embedding_configs())
    m = WithSequence()
    m.mc = ManagedCollisionEmbeddingCollection(inner, collisions)
    with pytest.raises(PlannerError) as e:                     # TorchRec's default sharders shard it
        planner().plan(m, None)
    assert "module 'mc' (ManagedCollisionEmbeddingCollection) is not one shardlab plans" in str(e.value)
    assert "\n" not in str(e.value) and e.value.error_type.value == "other"


def test_no_sharders_give_the_empty_plan():
    assert planner().plan(WithSequence(), []).plan == {}


def test_a_planning_failure_is_torchrecs_planner_error_with_one_line():
    with pytest.raises(ShardlabPlannerError) as e:
        planner(gb=1e-6).plan(WithSequence(), [EmbeddingBagCollectionSharder()])
    assert isinstance(e.value, PlannerError) and "\n" not in str(e.value)
    assert str(e.value).startswith("task 'torchrec-") or "ShardlabPlanner" in str(e.value)


def test_a_sharder_offering_only_host_memory_kernels_gets_every_table_offloaded_never_fused():
    class OffloadOnly(EmbeddingBagCollectionSharder):
        def compute_kernels(self, sharding_type, compute_device_type):
            return ["fused_uvm_caching"]

    p = planner()
    plan = p.plan(WithSequence(), [OffloadOnly()])
    assert {ps.compute_kernel for mp in plan.plan.values() for ps in mp.values()} == {"fused_uvm_caching"}
    assert {ps.cache_params.load_factor for mp in plan.plan.values() for ps in mp.values()} == {0.2}
    assert all(t.hbm_share == 0.2 for t in p.task_.tables)
    assert all("allow no 'fused' kernel" in why for why in p.plan_.metadata["offloaded"].values())


def test_a_sharder_offering_no_kernel_shardlab_plans_is_one_line():
    class KeyValueOnly(EmbeddingBagCollectionSharder):
        def compute_kernels(self, sharding_type, compute_device_type):
            return ["key_value"]

    with pytest.raises(PlannerError) as e:
        planner().plan(WithSequence(), [KeyValueOnly()])
    assert "offers no kernel shardlab plans (fused, fused_uvm_caching, fused_uvm)" in str(e.value)
    assert "\n" not in str(e.value)
