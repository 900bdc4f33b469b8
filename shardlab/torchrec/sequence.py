"""A sequence model planned two ways -- by TorchRec's ``EmbeddingShardingPlanner`` and by
:class:`~shardlab.torchrec.ShardlabPlanner` -- and both plans trained in
``DistributedModelParallel`` on this machine's gloo ranks.

The model (:class:`SequenceModel`) is the embedding part of a sequence recommender: a pooled
``EmbeddingBagCollection`` (``ebc``: user and context features, one row summed per feature) beside
an ``EmbeddingCollection`` (``seq``: item-history features, every looked-up row returned, as
today's sequential and generative recommenders read them). Both planners get TorchRec's default
sharders, the same ``cpu`` topology (the ranks train here), the same per-rank batch and the same
constraints (each table's mean lookups a sample); ShardlabPlanner also gets one batch of the
lookups to measure each table's statistics from. Training is the sum of every output value,
fused SGD in backward, a few steps per plan: the check is that each plan trains, its loss falling
on every rank, not a timing.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from shardlab.errors import ShardlabError
from shardlab.torchrec.evaluator import quiet_torchrec_logs, rank_group, report_failure, spawn_ranks
from shardlab.torchrec.planner import ShardlabPlanner

#: Name of TorchRec's own plan.
TORCHREC = "torchrec (EmbeddingShardingPlanner)"
#: The model's tables: (name, rows, dim, mean lookups a sample); pooled ones first, then sequences.
POOLED_TABLES = (("user", 20_000, 32, 1.0), ("context", 5_000, 32, 4.0), ("query", 30_000, 32, 8.0))
SEQUENCE_TABLES = (("item_history", 50_000, 64, 20.0), ("click_history", 40_000, 64, 12.0),
                   ("category_history", 2_000, 64, 20.0))


def _configs() -> tuple[list[Any], list[Any]]:
    from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig

    bags = [EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[f"f_{n}"])
            for n, r, d, _ in POOLED_TABLES]
    seqs = [EmbeddingConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[f"f_{n}"])
            for n, r, d, _ in SEQUENCE_TABLES]
    return bags, seqs


def sequence_model(device: str = "meta") -> Any:
    """The example's model (module docstring) on ``device`` (``meta``: for planning and DMP)."""
    import torch
    from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

    bags, seqs = _configs()
    model = torch.nn.Module()
    model.ebc = EmbeddingBagCollection(tables=bags, device=torch.device(device))
    model.seq = EmbeddingCollection(tables=seqs, device=torch.device(device))
    return model


def sequence_batch(batch_size: int, seed: int) -> Any:
    """``batch_size`` samples of every feature's lookups as a ``KeyedJaggedTensor``: per sample a
    Poisson number of lookups with the table's mean, rows drawn Zipf(1.05) over the table."""
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    rng = np.random.default_rng(seed)
    keys, values, lengths = [], [], []
    for name, rows, _, mean in POOLED_TABLES + SEQUENCE_TABLES:
        n = rng.poisson(mean, size=batch_size)
        ranks = np.arange(1, rows + 1, dtype=float)
        p = ranks ** -1.05
        keys.append(f"f_{name}")
        values.append(rng.choice(rows, size=int(n.sum()), p=p / p.sum()))
        lengths.append(n)
    return KeyedJaggedTensor(keys=keys, values=torch.from_numpy(np.concatenate(values).astype(np.int64)),
                             lengths=torch.from_numpy(np.concatenate(lengths).astype(np.int32)))


def plan_sequence_both(ngpu: int = 2, batch_size: int = 512, method: str = "neuroshard", profile: str = "cpu",
                       seed: int = 0) -> tuple[dict[str, Any], Any]:
    """{name: TorchRec ``ShardingPlan``} of both planners for the example (module docstring), and
    the ShardlabPlanner (its ``task_``: the Task it planned, sequence tables marked)."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.sharding_plan import get_default_sharders

    topology = Topology(world_size=ngpu, compute_device="cpu", local_world_size=ngpu)
    constraints = {n: ParameterConstraints(pooling_factors=[mean]) for n, _, _, mean in POOLED_TABLES + SEQUENCE_TABLES}
    per_rank = max(1, batch_size // ngpu)
    model = sequence_model()
    theirs = EmbeddingShardingPlanner(topology=topology, batch_size=per_rank, constraints=constraints)
    planner = ShardlabPlanner(topology, batch_size=per_rank, constraints=constraints, method=method, profile=profile,
                              seed=seed, sample=[sequence_batch(batch_size, seed)])
    plans = {TORCHREC: theirs.plan(model, get_default_sharders())}
    mine = planner.plan(model, get_default_sharders())
    plans[planner.plan_.method] = mine
    return plans, planner


def plan_layouts(plan: Any) -> dict[str, str]:
    """{"<module>.<table>": sharding type} of a TorchRec ``ShardingPlan``."""
    return {f"{path}.{name}": str(ps.sharding_type) for path, mp in sorted(plan.plan.items())
            for name, ps in sorted(mp.items())}


def train_sequence_plans(plans: Mapping[str, Any], ngpu: int = 2, batch_size: int = 512, steps: int = 3,
                         seed: int = 0, timeout_s: float = 300.0) -> dict[str, list[list[float]]]:
    """Each plan trained ``steps`` steps in DMP on ``ngpu`` gloo ranks (module docstring):
    {plan: per rank, the loss of each step}. A rank that fails is one line naming it."""
    if steps < 2:
        raise ShardlabError(f"train_sequence_plans: field 'steps' = {steps} must be >= 2 (a loss to fall)")
    spec = {"plans": dict(plans), "batch_size": batch_size, "steps": steps, "seed": seed}
    got = spawn_ranks(_train_rank, spec, ngpu, timeout_s, "sequence example")
    return {name: [got[r][name] for r in range(ngpu)] for name in plans}


def _train_rank(rank: int, spec: dict, results: Any) -> None:
    """One rank of :func:`train_sequence_plans`: every plan in turn, its losses reported."""
    try:
        import torch
        import torch.distributed as dist
        from torchrec.distributed.model_parallel import DistributedModelParallel
        from torchrec.distributed.sharding_plan import get_default_sharders
        from torchrec.distributed.types import ShardingEnv

        quiet_torchrec_logs()
        torch.set_num_threads(1)
        out: dict[str, list[float]] = {}
        with rank_group(rank, spec):
            env = ShardingEnv.from_process_group(dist.group.WORLD)
            local = max(1, spec["batch_size"] // spec["world_size"])
            batch = sequence_batch(local, spec["seed"] * 1000 + rank)
            for name, plan in spec["plans"].items():
                torch.manual_seed(spec["seed"])
                dmp = DistributedModelParallel(sequence_model(), env=env, device=torch.device("cpu"), plan=plan,
                                               sharders=get_default_sharders())
                losses = []
                for _ in range(spec["steps"]):
                    rows = dmp.module.seq(batch)
                    loss = dmp.module.ebc(batch).values().sum() + sum(jt.values().sum() for jt in rows.values())
                    loss.backward()
                    losses.append(float(loss.detach()))
                out[name] = losses
                del dmp                                  # freed before the group goes (rank_group)
        results.put((rank, "ok", out))
    except BaseException as e:  # noqa: BLE001 -- reported to the parent in one line
        report_failure(rank, results, e)
