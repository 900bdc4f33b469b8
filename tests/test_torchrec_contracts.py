"""``ShardlabPlanner`` keeps TorchRec's planner contracts: ``sharders=None`` means TorchRec's
default sharders, so a sequence (``EmbeddingCollection``) or position-weighted
(``FeatureProcessedEmbeddingBagCollection``) module is refused in one line instead of being
left out of the plan (which ``DistributedModelParallel`` would accept, leaving the module
unsharded); planning failures are TorchRec's ``PlannerError``; no sharders give the empty plan."""

from __future__ import annotations

import pytest

torchrec = pytest.importorskip("torchrec", reason="torchrec is installed by scripts/setup.sh")

import torch  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import Topology  # noqa: E402
from torchrec.distributed.planner.types import PlannerError  # noqa: E402
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


@pytest.mark.parametrize("model,path,kind", [(WithSequence, "seq", "EmbeddingCollection"),
                                             (WithPositionWeighted, "fp_ebc", "FeatureProcessedEmbeddingBagCollection")])
def test_a_module_the_default_sharders_would_shard_is_refused_not_left_out(model, path, kind):
    with pytest.raises(PlannerError) as e:                     # TorchRec's default sharders, as TorchRec reads None
        planner().plan(model(), None)
    said = str(e.value)
    assert f"module '{path}' ({kind})" in said and "\n" not in said
    assert isinstance(e.value, ShardlabError)
    # with only the EBC sharder named, the other module is the user's to leave unsharded: every pooled
    # collection is planned at its own path (an FP-EBC's inner one too, as TorchRec's planner does)
    m = model()
    plan = planner().plan(m, [EmbeddingBagCollectionSharder()])
    assert set(plan.plan) == {p for p, x in m.named_modules() if isinstance(x, EmbeddingBagCollection)}


def test_no_sharders_give_the_empty_plan():
    assert planner().plan(WithSequence(), []).plan == {}


def test_a_planning_failure_is_torchrecs_planner_error_with_one_line():
    with pytest.raises(ShardlabPlannerError) as e:
        planner(gb=1e-6).plan(WithSequence(), [EmbeddingBagCollectionSharder()])
    assert isinstance(e.value, PlannerError) and "\n" not in str(e.value)
    assert str(e.value).startswith("task 'torchrec-") or "ShardlabPlanner" in str(e.value)


def test_a_sharder_offering_no_fused_kernel_is_refused_not_given_fused():
    class OffloadOnly(EmbeddingBagCollectionSharder):
        def compute_kernels(self, sharding_type, compute_device_type):
            return ["fused_uvm_caching"]

    with pytest.raises(PlannerError) as e:
        planner().plan(WithSequence(), [OffloadOnly()])
    assert "no sharding type with the 'fused' kernel" in str(e.value) and "\n" not in str(e.value)
