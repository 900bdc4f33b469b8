"""The TorchRec side of the TorchRec evaluator: a task's tables as a sharded
``EmbeddingBagCollection`` under ``DistributedModelParallel``, and each rank's input batches as
``KeyedJaggedTensor``s (needs torchrec; called inside an initialised process group)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from shardlab.errors import ShardlabError
from shardlab.profile.hardware import HardwareProfile
from shardlab.tables import Task

#: fbgemm's fused optimizers by the task's ``optimizer`` field.
OPTIMIZERS = {"exact_sgd": "EXACT_SGD", "exact_adagrad": "EXACT_ADAGRAD", "exact_rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD"}


def feature_name(i: int) -> str:
    """The feature (KJT key) of the task's table ``i``."""
    return f"f{i}"


def sharded_ebc(task: Task, export: Mapping[str, Any], profile: HardwareProfile, device: Any,
                learning_rate: float = 0.01) -> Any:
    """``DistributedModelParallel`` over a module whose ``ebc`` holds every table of ``task``
    (one feature each, the task's precision), sharded as ``export`` (module ``ebc``) says, with
    the fused kernel and the task's optimizer. A plan TorchRec rejects is a one-line error
    naming the table and its sharding type where TorchRec's message names a table."""
    import torch
    import torch.distributed as dist
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    from shardlab.export import sharding_plan_from_export

    if export.get("module") != "ebc":
        raise ShardlabError(f"torchrec evaluator: export field 'module' = {export.get('module')!r} must be 'ebc'")
    dtype = {"fp32": DataType.FP32, "fp16": DataType.FP16}.get(task.weights_precision)
    if dtype is None:
        raise ShardlabError(f"torchrec evaluator: task '{task.name}': field 'weights_precision' = "
                            f"{task.weights_precision!r} does not train in TorchRec here (fp32, fp16)")
    configs = [EmbeddingBagConfig(name=t.name, embedding_dim=t.dim, num_embeddings=t.rows, data_type=dtype,
                                  feature_names=[feature_name(i)]) for i, t in enumerate(task.tables)]

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))

        def forward(self, kjt: Any) -> Any:
            return self.ebc(kjt)

    fused = {"optimizer": getattr(EmbOptimType, OPTIMIZERS[task.optimizer]), "learning_rate": learning_rate}
    try:
        return DistributedModelParallel(Wrapper(), env=ShardingEnv.from_process_group(dist.group.WORLD),
                                        device=device, plan=sharding_plan_from_export(export),
                                        sharders=[EmbeddingBagCollectionSharder(fused_params=fused)])
    except Exception as e:  # noqa: BLE001 -- TorchRec's refusal, named by table where it says which
        text = " ".join(str(e).split())
        for name, entry in export["plan"].items():
            if f"'{name}'" in text or f" {name} " in f" {text} ":
                raise ShardlabError(f"torchrec evaluator: TorchRec rejects table '{name}' "
                                    f"({entry['sharding_type']}): {text[:200]}") from None
        raise ShardlabError(f"torchrec evaluator: TorchRec rejects the plan: {text[:200]}") from None


def local_batches(task: Task, profile: HardwareProfile, rank: int, world_size: int, device: Any) -> list[Any]:
    """``profile.input_batches`` batches of this rank's samples: the global batch of
    ``profile.batch_size`` samples of every table's own lookups, rows
    ``[rank * b, (rank + 1) * b)`` with ``b = batch_size // world_size``, as ``KeyedJaggedTensor``s."""
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from shardlab.data.lookups import table_lookups

    b = profile.batch_size // world_size
    lo, hi = rank * b, (rank + 1) * b
    out = []
    for k in range(profile.input_batches):
        values, lengths = [], []
        for t in task.tables:
            idx, off = table_lookups(t, profile.batch_size, k)
            values.append(idx[off[lo]:off[hi]])
            lengths.append(np.diff(off[lo:hi + 1]))
        kjt = KeyedJaggedTensor(keys=[feature_name(i) for i in range(len(task.tables))],
                                values=torch.from_numpy(np.concatenate(values).astype(np.int64)),
                                lengths=torch.from_numpy(np.concatenate(lengths).astype(np.int32)))
        out.append(kjt.to(device))
    return out
