"""The TorchRec side of the TorchRec evaluator: a task's tables as a sharded
``EmbeddingBagCollection`` under ``DistributedModelParallel``, and each rank's input batches as
``KeyedJaggedTensor``s (needs torchrec; called inside an initialised process group)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
import torch.distributed as dist

from shardlab.data.lookups import table_lookups
from shardlab.errors import ShardlabError
from shardlab.torchrec.export import DTYPES, OPTIMIZERS, sharding_plan_from_export
from shardlab.measure.hardware import HardwareProfile
from shardlab.tables import Task



def feature_name(i: int) -> str:
    """The feature (KJT key) of the task's table ``i``."""
    return f"f{i}"


#: Module path of the embedding collection in each part's model (the export's ``module``).
MODULES = {"embeddings": "ebc", "whole_step": "model.sparse_arch.embedding_bag_collection"}

#: Dense features per sample of the whole-step model (Criteo's 13 counters).
DENSE_FEATURES = 13

#: TorchRec's DLRM example layer sizes; the dense arch ends at the tables' embedding dim.
DENSE_ARCH, OVER_ARCH = (512, 256), (512, 512, 256, 1)


def check_dlrm_task(task: Task) -> None:
    """TorchRec's DLRM interacts pooled embeddings of one dim: one line naming the dims if not."""
    dims = sorted({t.dim for t in task.tables})
    if len(dims) != 1:
        raise ShardlabError(f"torchrec evaluator: task '{task.name}': the whole DLRM step needs one embedding dim "
                            f"for every table (TorchRec's DLRM), got dims {dims}; generate the task with --dims D")


def _env_and_sharders(task: Task, learning_rate: float) -> tuple[Any, list[Any]]:
    """The process group's ShardingEnv and the fused-kernel sharder with the task's optimizer."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.types import ShardingEnv

    fused = {"optimizer": getattr(EmbOptimType, OPTIMIZERS[task.optimizer]), "learning_rate": learning_rate}
    return ShardingEnv.from_process_group(dist.group.WORLD), [EmbeddingBagCollectionSharder(fused_params=fused)]


def embedding_configs(task: Task) -> list[Any]:
    """One EmbeddingBagConfig per table (feature ``f<i>``, the task's precision)."""
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig

    if task.weights_precision not in DTYPES:
        raise ShardlabError(f"torchrec evaluator: task '{task.name}': field 'weights_precision' = "
                            f"{task.weights_precision!r} does not train in TorchRec here (fp32, fp16)")
    dtype = getattr(DataType, DTYPES[task.weights_precision])
    return [EmbeddingBagConfig(name=t.name, embedding_dim=t.dim, num_embeddings=t.rows, data_type=dtype,
                               feature_names=[feature_name(i)]) for i, t in enumerate(task.tables)]


def _apply(module: Any, export: Mapping[str, Any], task: Task, device: Any, learning_rate: float) -> Any:
    """``DistributedModelParallel(module)`` sharded as ``export`` says. An export TorchRec would
    refuse is one line naming the table and its sharding type (:func:`~shardlab.torchrec.export.check_export`);
    TorchRec's own refusals are one line too, naming the table where its message does."""
    from torchrec.distributed.model_parallel import DistributedModelParallel

    env, sharders = _env_and_sharders(task, learning_rate)
    try:
        plan = sharding_plan_from_export(export, task)
    except ShardlabError as e:
        raise ShardlabError(f"torchrec evaluator: {e}") from None
    try:
        return DistributedModelParallel(module, env=env, device=device, plan=plan, sharders=sharders)
    except Exception as e:  # noqa: BLE001 -- TorchRec's refusal, named by table where it says which
        text = " ".join(str(e).split())
        for name, entry in export["plan"].items():
            if f"'{name}'" in text or f" {name} " in f" {text} ":
                raise ShardlabError(f"torchrec evaluator: TorchRec rejects table '{name}' "
                                    f"({entry['sharding_type']}): {text[:200]}") from None
        raise ShardlabError(f"torchrec evaluator: TorchRec rejects the plan: {text[:200]}") from None


def sharded_dlrm(task: Task, export: Mapping[str, Any], device: Any, learning_rate: float = 0.01
                 ) -> tuple[Any, Any]:
    """(TorchRec's ``DLRMTrain`` over ``DLRM`` -- dense arch ``DENSE_ARCH`` + (D,), the task's
    tables sharded as ``export`` says (module ``MODULES["whole_step"]``), pairwise interaction,
    over arch ``OVER_ARCH``, BCE loss -- under ``DistributedModelParallel``; the SGD optimizer of its
    dense parameters). One embedding dim for every table (:func:`check_dlrm_task`)."""
    from torchrec.optim.keyed import KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    model = _apply(dlrm_train(task, device), export, task, device, learning_rate)
    dense = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(model.named_parameters())),
                                  lambda params: torch.optim.SGD(params, lr=learning_rate))
    return model, dense


def dlrm_train(task: Task, device: Any) -> Any:
    """TorchRec's ``DLRMTrain`` over ``DLRM`` of the task's tables, unsharded: the embedding
    collection on the meta device (a planner or ``DistributedModelParallel`` materialises it), the
    dense and over arches (``DENSE_ARCH`` + (D,), ``OVER_ARCH``) on ``device``; the collection's
    module path is ``MODULES["whole_step"]``. One embedding dim for every table
    (:func:`check_dlrm_task`)."""
    from torchrec.models.dlrm import DLRM, DLRMTrain
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    check_dlrm_task(task)
    ebc = EmbeddingBagCollection(tables=embedding_configs(task), device=torch.device("meta"))
    dlrm = DLRM(embedding_bag_collection=ebc, dense_in_features=DENSE_FEATURES,
                dense_arch_layer_sizes=[*DENSE_ARCH, task.tables[0].dim], over_arch_layer_sizes=list(OVER_ARCH),
                dense_device=device)
    return DLRMTrain(dlrm)


def dlrm_batches(sparse: list[Any], profile: HardwareProfile, rank: int, device: Any) -> list[Any]:
    """TorchRec ``Batch``es for the whole-step model: this rank's sparse batches with seeded
    standard-normal dense features and 0/1 labels (their values do not change the time)."""
    from torchrec.datasets.utils import Batch

    gen = torch.Generator().manual_seed(rank)
    out = []
    for kjt in sparse:
        b = kjt.stride()
        out.append(Batch(dense_features=torch.randn(b, DENSE_FEATURES, generator=gen),
                         sparse_features=kjt, labels=torch.randint(0, 2, (b,), generator=gen).float()).to(device))
    return out


def sharded_ebc(task: Task, export: Mapping[str, Any], device: Any, learning_rate: float = 0.01) -> Any:
    """``DistributedModelParallel`` over a module whose ``ebc`` holds every table of ``task``
    (one feature each, the task's precision), sharded as ``export`` (module ``ebc``) says, with
    the fused kernel and the task's optimizer. A plan TorchRec rejects is a one-line error
    naming the table and its sharding type where TorchRec's message names a table."""
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    if export.get("module") != MODULES["embeddings"]:
        raise ShardlabError(f"torchrec evaluator: export field 'module' = {export.get('module')!r} must be 'ebc'")
    configs = embedding_configs(task)

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))

        def forward(self, kjt: Any) -> Any:
            return self.ebc(kjt)

    return _apply(Wrapper(), export, task, device, learning_rate)


def local_batches(task: Task, profile: HardwareProfile, rank: int, world_size: int, device: Any) -> list[Any]:
    """``profile.input_batches`` batches of this rank's samples: the global batch of
    ``profile.batch_size`` samples of every table's own lookups, rows
    ``[rank * b, (rank + 1) * b)`` with ``b = batch_size // world_size``, as ``KeyedJaggedTensor``s."""
    b = profile.batch_size // world_size
    return [lookups_kjt(task, profile.batch_size, k, rank * b, (rank + 1) * b).to(device)
            for k in range(profile.input_batches)]


def lookups_kjt(task: Task, batch_size: int, batch_index: int, lo: int, hi: int) -> Any:
    """Samples ``[lo, hi)`` of batch ``batch_index`` (``batch_size`` samples) of every table's own
    lookups as one ``KeyedJaggedTensor`` (feature ``f<i>`` for table i), on the CPU."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    values, lengths = [], []
    for t in task.tables:
        idx, off = table_lookups(t, batch_size, batch_index)
        values.append(idx[off[lo]:off[hi]])
        lengths.append(np.diff(off[lo:hi + 1]))
    return KeyedJaggedTensor(keys=[feature_name(i) for i in range(len(task.tables))],
                             values=torch.from_numpy(np.concatenate(values).astype(np.int64)),
                             lengths=torch.from_numpy(np.concatenate(lengths).astype(np.int32)))
