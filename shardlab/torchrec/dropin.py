"""A TorchRec DLRM planned two ways -- by TorchRec's ``EmbeddingShardingPlanner`` and by
:class:`~shardlab.torchrec.ShardlabPlanner` -- and both plans trained in
``DistributedModelParallel`` on this machine's gloo ranks, whole training steps timed in paired
rounds (:class:`~shardlab.evaluate.TorchRecEvaluator`, ``whole_step``).

The model is TorchRec's DLRM (``DLRMTrain``) over the 26 Criteo 1TB tables (dim 128, one-hot;
rows and memory divided by ``row_scale`` to fit this machine, said in every table:
:func:`~shardlab.workflows.criteo.criteo_task`). Both planners get the same topology
(``ngpu`` ranks of the task's memory, CUDA devices described), the same per-rank batch and the
same constraints: every table's pooling factor, and the sharding types shardlab places
(table-, column-, row- and table-row-wise; data-parallel replication is left out for both, as
a replicated table is not a placement the evaluator can apply). ShardlabPlanner also gets a
sample: one global batch of the task's own lookups as a ``KeyedJaggedTensor``, from which it
measures each table's pooling factor and reuse bins (:func:`~shardlab.torchrec.table_stats`).
"""

from __future__ import annotations

from typing import Any, Mapping

from shardlab import constants as C
from shardlab.evaluate import Evaluation
from shardlab.torchrec.dlrm_model import dlrm_train, lookups_kjt
from shardlab.torchrec.export import OPTIMIZERS
from shardlab.plan import Plan, validate_plan
from shardlab.torchrec.baseline import FREE, plan_from_sharding_plan
from shardlab.tables import Task
from shardlab.torchrec.evaluator import TorchRecEvaluator
from shardlab.torchrec.planner import ShardlabPlanner
from shardlab.workflows.criteo import criteo_task

#: The name TorchRec's own plan carries.
TORCHREC = "torchrec (EmbeddingShardingPlanner)"


def sample_batch(task: Task) -> Any:
    """One global batch of every table's own lookups as a ``KeyedJaggedTensor`` (feature
    ``f<i>`` for table i, the DLRM's feature names)."""
    return lookups_kjt(task, task.batch_size, 0, 0, task.batch_size)


def plan_both(task: Task, method: str = "neuroshard", profile: str = C.MEASURE_PROFILE, seed: int = 0
              ) -> tuple[dict[str, Plan], ShardlabPlanner]:
    """{TorchRec's plan, ShardlabPlanner's plan} of the task's DLRM as Plans of ``task`` (module
    docstring), and the ShardlabPlanner (its ``task_``: the statistics it measured)."""
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology

    model = dlrm_train(task, torch.device("cpu"))
    topology = Topology(world_size=task.ngpu, compute_device="cuda", hbm_cap=task.mem_cap_bytes,
                        local_world_size=task.ngpu)
    constraints = {t.name: ParameterConstraints(sharding_types=list(FREE), pooling_factors=[t.pooling_factor])
                   for t in task.tables}
    sharders = [EmbeddingBagCollectionSharder(fused_params={"optimizer": getattr(EmbOptimType, OPTIMIZERS[task.optimizer]),
                                                            "learning_rate": 0.01})]
    batch = max(1, task.batch_size // task.ngpu)
    theirs = EmbeddingShardingPlanner(topology=topology, batch_size=batch, constraints=constraints).plan(model, sharders)
    ours = ShardlabPlanner(topology, batch_size=batch, constraints=constraints, method=method, profile=profile,
                           seed=seed, sample=[sample_batch(task)])
    mine = ours.plan(model, sharders)
    plans = {TORCHREC: plan_from_sharding_plan(task, theirs, TORCHREC, seed),
             ours.plan_.method: plan_from_sharding_plan(task, mine, ours.plan_.method, seed)}
    for plan in plans.values():
        validate_plan(task, plan)
    return plans, ours


def measure_both(task: Task, plans: Mapping[str, Plan], profile: str = C.MEASURE_PROFILE, rounds: int = 5,
                 steps: int = 3, seed: int = 0) -> dict[str, dict[str, Evaluation]]:
    """Both plans trained in TorchRec on ``task.ngpu`` gloo ranks, timed in ``rounds`` paired rounds
    of ``steps`` steps each, TorchRec's plan the reference: {"embeddings": ..., "whole_step": ...}."""
    return TorchRecEvaluator(profile, rounds=rounds, steps=steps, seed=seed, reference=TORCHREC,
                             whole_step=True).evaluate_parts(task, plans)


def dropin_task(ngpu: int = 2, mem_cap_gb: float = 80.0, row_scale: int = 64, batch_size: int = 4096,
                seed: int = 0) -> Task:
    """The Criteo 1TB task of the example (module docstring)."""
    return criteo_task(ngpu=ngpu, mem_cap_gb=mem_cap_gb, row_scale=row_scale, batch_size=batch_size, seed=seed)
