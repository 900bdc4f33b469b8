"""One planning run, in this process: TorchRec's ``EmbeddingShardingPlanner`` (its default
proposers, enumerator, partitioner and storage reservation) or ``ShardlabPlanner`` on the same
model of N tables over the same topology of G ranks, with the same constraints.

The model is one ``EmbeddingBagCollection`` on the meta device holding the tables of
``studies.search_scaling.scaling.scaling_task`` (pool tables, augmented copies past the pool's
size, said in the record). Every table's ``ParameterConstraints`` carries its pooling factor;
``space`` picks what else: ``"tw-fused"`` also allows only table-wise shards and the fused kernel
(the search NeuroShard table-wise makes; TorchRec's smallest search space), ``"default"`` leaves
TorchRec every sharding type and kernel (ShardlabPlanner still places table- and column-wise
fused shards only, what it costs), ``"mixed"`` is ``"default"`` over a model of every collection
kind both plan: every eighth table in a position-weighted ``FeatureProcessedEmbeddingBagCollection``,
every fourth in a sequence ``EmbeddingCollection`` (one per dim, as TorchRec requires), the rest
in the ``EmbeddingBagCollection``, planned with TorchRec's default sharders.

Both planners' plans are turned into shardlab Plans of the same Task (ShardlabPlanner's) and
costed by one neutral judge: the analytic h100 model (fitted to H100 kernel measurements, GPU
cluster comm from public bandwidths: a labelled model, not a measurement).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from shardlab import constants as C
from studies.search_scaling.scaling import peak_rss_mb, scaling_task

#: Rank memory of the topology (GB), the cap the tables are drawn to fit one rank under (GB:
#: below what TorchRec's default reservation leaves, so that table-wise plans exist), ranks per host.
HBM_GB = 16.0
DRAW_GB = 12.0
LOCAL_WORLD = 8
#: The neutral judge: profile and bundle.
JUDGE = ("h100", "analytic")


def model_and_constraints(ntables: int, ngpu: int, space: str, seed: int = 0) -> tuple[Any, dict, Any, str]:
    """(module, constraints, topology, how the tables were drawn) of one point."""
    import torch
    from torchrec.distributed.planner.types import ParameterConstraints, Topology
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from shardlab.torchrec.dlrm_model import embedding_configs

    task, drawn = scaling_task(ntables, ngpu, DRAW_GB, seed)
    configs = embedding_configs(task)
    extra = {"sharding_types": ["table_wise"], "compute_kernels": ["fused"]} if space == "tw-fused" else {}
    constraints = {t.name: ParameterConstraints(pooling_factors=[t.pooling_factor], **extra) for t in task.tables}
    model = torch.nn.Module()
    meta = torch.device("meta")
    if space != "mixed":
        model.ebc = EmbeddingBagCollection(tables=configs, device=meta)
    else:
        from torchrec.modules.embedding_configs import EmbeddingConfig
        from torchrec.modules.embedding_modules import EmbeddingCollection
        from torchrec.modules.feature_processor_ import PositionWeightedModule
        from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection

        weighted = [c for i, c in enumerate(configs) if i % 8 == 7]
        sequence = [c for i, c in enumerate(configs) if i % 4 == 1]
        model.ebc = EmbeddingBagCollection(tables=[c for i, c in enumerate(configs) if i % 8 != 7 and i % 4 != 1],
                                           device=meta)
        model.fp_ebc = FeatureProcessedEmbeddingBagCollection(
            EmbeddingBagCollection(tables=weighted, device=meta, is_weighted=True),
            {f: PositionWeightedModule(max_feature_length=64, device=meta) for c in weighted for f in c.feature_names})
        for dim in sorted({c.embedding_dim for c in sequence}):
            setattr(model, f"ec_{dim}", EmbeddingCollection(tables=[
                EmbeddingConfig(name=c.name, num_embeddings=c.num_embeddings, embedding_dim=dim,
                                feature_names=list(c.feature_names)) for c in sequence if c.embedding_dim == dim],
                device=meta))
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    topology = Topology(world_size=ngpu, compute_device="cuda", hbm_cap=int(HBM_GB * C.GB),
                        local_world_size=min(LOCAL_WORLD, ngpu))
    return model, constraints, topology, drawn


def run_point(planner: str, ntables: int, ngpu: int, space: str, seed: int = 0) -> dict[str, Any]:
    """Plan once and time ``plan()`` (s; for ShardlabPlanner it includes loading its cost model
    and measuring assumed reuse bins); the plan's cost under the neutral judge (ms, labelled)."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner

    from shardlab.costmodel.bundle import load_bundle
    from shardlab.evaluate import estimate_plan
    from shardlab.torchrec.baseline import plan_from_sharding_plan
    from shardlab.torchrec import ShardlabPlanner

    from torchrec.distributed.sharding_plan import get_default_sharders

    module, constraints, topology, drawn = model_and_constraints(ntables, ngpu, space, seed)
    sharders = get_default_sharders() if space == "mixed" else [EmbeddingBagCollectionSharder()]
    ours = ShardlabPlanner(topology, constraints=constraints, method="neuroshard[columns=false]", seed=seed)
    t0 = time.perf_counter()
    if planner == "shardlab":
        sharding_plan = ours.plan(module, sharders)
    else:
        sharding_plan = EmbeddingShardingPlanner(topology=topology, constraints=constraints).plan(module, sharders)
    seconds = time.perf_counter() - t0
    peak = peak_rss_mb()
    kernels = sorted({ps.compute_kernel for mp in sharding_plan.plan.values() for ps in mp.values()})
    kinds = sorted({ps.sharding_type for mp in sharding_plan.plan.values() for ps in mp.values()})
    judge = load_bundle(JUDGE[1], JUDGE[0])
    try:                  # a plan the judge cannot cost (data-parallel tables) is recorded, not fatal
        if planner == "shardlab":
            task, plan = ours.task_, ours.plan_
        else:
            task, _ = ours.task(module, sharders)
            plan = plan_from_sharding_plan(task, sharding_plan, "torchrec-default")
        ev = estimate_plan(task, plan, judge, lower_bound=False)
        cost, judged = ev.cost_ms, ev.source             # the judge's label, with what it extrapolated
    except Exception as e:  # noqa: BLE001
        cost, judged = None, f"not judged: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return {"planner": planner, "tables": ntables, "ranks": ngpu, "space": space, "seed": seed,
            "plan_s": seconds, "peak_rss_mb": peak, "table_source": drawn, "kernels": kernels,
            "sharding_types": kinds, "judged_ms": cost, "judge": judged, "hbm_gb": HBM_GB,
            "local_world_size": min(LOCAL_WORLD, ngpu)}
