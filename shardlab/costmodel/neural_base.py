"""What the neural cost models share: MLP building blocks, seeding, target scaling, the
training loop and the model file (see :mod:`shardlab.costmodel.neural`).

Training follows the seeds: MSE, Adam, mini-batches, keep the epoch with the best validation
loss. Targets are divided by a stored scale (ms) and, with ``log_target=True``, trained as
log(1 + ms / scale). Same seed -> same weights (CPU, deterministic algorithms). Model files are
``torch.save`` dicts with config, weights, feature normalisation, training history, provenance
and metrics; they load without running code (:func:`~shardlab.io.torch_load_safe`).
"""

from __future__ import annotations

import ctypes

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from shardlab.costmodel.base import Estimator
from shardlab.costmodel.model_checks import in_one_line
from shardlab.errors import ShardlabError
from shardlab.io import torch_load_safe, torch_save_atomic

FORMAT = "shardlab-neural-v1"



@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the block with one torch intra-op thread (restored after): small MLPs and policy
    steps are faster on one thread, and on a busy machine several threads spin on each tiny op
    (DreamShard's 500-table inference: 0.3 s on one thread, 2.2 s on two beside other work)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)

def fixed_mmap_threshold(nbytes: int = 256 * 1024) -> bool:
    """Pin glibc's mmap threshold (bytes) for this process, once; False where there is no glibc.

    Policy decoding allocates a few (B, G, k) tensors per step; glibc raises its mmap threshold
    after the first such block is freed, and from then on serves them from a heap that fragments
    (AutoShard at 10,000 tables x 1,024 GPUs: peak RSS 0.7 to 5.5 GB from run to run; 0.4 GB with
    the threshold fixed at 256 kB, 5.5 GB at 1 MB). Fixed, DreamShard's decoding there is slower
    (11 s -> 17 s): bounded memory is the point."""
    if _MMAP_PINNED:
        return _MMAP_PINNED[0]
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = bool(libc.mallopt(-3, int(nbytes)))            # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False
    _MMAP_PINNED.append(ok)
    return ok


_MMAP_PINNED: list[bool] = []


def mlp(sizes: Sequence[int], last_relu: bool = False) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between (and after the last if asked)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def seeded(seed: int) -> torch.Generator:
    """Seed torch's global generator (weight initialisation) and return a generator of the same
    seed (mini-batch order): same seed -> same network."""
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


class NeuralEstimator(Estimator):
    """Shared part of the neural cost models: configuration ``epochs``, ``lr`` (Adam's),
    ``batch_size`` (training mini-batch, samples), ``seed``, ``log_target`` and ``progress``
    (a progress bar while training); learned ``history_`` (per-epoch losses) besides the
    :class:`~shardlab.costmodel.base.Estimator` state; target scaling; the training loop;
    the model file. Subclasses implement ``_payload`` / ``from_state`` for their networks."""

    #: Model name in ``source`` labels.
    name = ""

    def __init__(self, epochs: int, lr: float, batch_size: int, seed: int, log_target: bool, progress: bool):
        self.epochs, self.lr, self.batch_size, self.seed = epochs, lr, batch_size, seed
        self.log_target, self.progress = log_target, progress
        self._reset()

    def _reset(self) -> None:
        super()._reset()
        self.history_: list[dict[str, Any]] = []

    @property
    def source(self) -> str:
        """Evaluation label: model name, profile and batch size it was trained at."""
        p = self.profile_
        return f"model:{self.name}@{p.get('name', '?')}[batch_size={p.get('batch_size', '?')}]"

    def to_target(self, y: np.ndarray, scale: float) -> np.ndarray:
        """Training target of costs ``y`` (ms) at ``scale`` (ms): log(1 + y / scale) with
        ``log_target``, else y / scale; same shape."""
        y = np.asarray(y, dtype=np.float64) / scale
        return np.log1p(np.maximum(y, 0.0)) if self.log_target else y

    def from_target(self, t: np.ndarray, scale: float) -> np.ndarray:
        """Inverse of :meth:`to_target`: network outputs ``t`` back to ms; same shape."""
        t = np.asarray(t, dtype=np.float64)
        return (np.expm1(t) if self.log_target else t) * scale

    def _train(self, nets: dict[str, nn.Module], loss_fn: Callable[[torch.Tensor], torch.Tensor], n_train: int,
               val_loss_fn: Callable[[], torch.Tensor], desc: str, epochs: int | None = None) -> None:
        """Adam + MSE mini-batches over ``n_train`` items for ``epochs`` (default: the configured
        ``epochs``); ``loss_fn(index_tensor)`` -> loss; keeps the epoch with the best
        ``val_loss_fn()``; appends to ``history_``."""
        with one_torch_thread():
            self._train_loop(nets, loss_fn, n_train, val_loss_fn, desc, self.epochs if epochs is None else epochs)

    def _train_loop(self, nets: dict[str, nn.Module], loss_fn: Callable[[torch.Tensor], torch.Tensor],
                    n_train: int, val_loss_fn: Callable[[], torch.Tensor], desc: str, epochs: int) -> None:
        gen = seeded(self.seed)
        params = [p for net in nets.values() for p in net.parameters()]
        opt = torch.optim.Adam(params, lr=self.lr)
        best, best_state = float("inf"), None
        bar = tqdm(range(epochs), desc=desc, disable=not self.progress)
        for epoch in bar:
            for net in nets.values():
                net.train()
            order = torch.randperm(n_train, generator=gen)
            total = 0.0
            for i in range(0, n_train, self.batch_size):
                idx = order[i:i + self.batch_size]
                loss = loss_fn(idx)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
            for net in nets.values():
                net.eval()
            with torch.no_grad():
                val = float(val_loss_fn())
            self.history_.append({"epoch": epoch, "train_loss": total / max(n_train, 1), "val_loss": val})
            if val < best:
                best = val
                best_state = {k: {n: t.clone() for n, t in net.state_dict().items()} for k, net in nets.items()}
            bar.set_postfix(val=f"{val:.4g}", best=f"{best:.4g}")
        if best_state is not None:
            for k, net in nets.items():
                net.load_state_dict(best_state[k])
        for net in nets.values():
            net.eval()

    def _payload(self) -> dict[str, Any]:
        """The subclass's learned state for the model file."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """Everything the model file holds, as one in-memory dict (see :meth:`from_state`)."""
        self.check_fitted()
        return {"format": FORMAT, "class": type(self).__name__, "config": self.config(),
                "provenance": self.provenance_, "metrics": self.metrics_, "history": self.history_,
                "profile": self.profile_, **self._payload()}

    def save(self, path: str) -> None:
        """Write the model file atomically (torch.save to a temporary file, then rename)."""
        torch_save_atomic(self.state(), path)

    @classmethod
    def check_state(cls, d: Any, where: str) -> dict[str, Any]:
        """``d`` if it is a state of this class (:meth:`state`); else a one-line error naming ``where``."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ShardlabError(f"cost model '{where}': field 'format' must be '{FORMAT}'")
        if d.get("class") != cls.__name__:
            raise ShardlabError(f"cost model '{where}': holds a {d.get('class')!r}, not a {cls.__name__}")
        return d

    @classmethod
    def restored(cls, d: Any, where: str) -> Any:
        """The model of state ``d`` (checked by :meth:`check_state`); a state of the right class
        but the wrong fields or shapes is one line naming ``where``."""
        d = cls.check_state(d, where)
        return in_one_line(lambda: cls.from_state(d), f"cost model '{where}'", f"not a valid {cls.__name__} state")

    @classmethod
    def load(cls, path: str) -> Any:
        """Read a model file written by :meth:`save`."""
        return cls.restored(torch_load_safe(path, "cost model"), path)

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Any:
        """The model a :meth:`state` dict describes."""
        raise NotImplementedError

    def _restore_common(self, d: dict[str, Any]) -> None:
        self.provenance_, self.metrics_ = d["provenance"], d["metrics"]
        self.history_, self.profile_ = d["history"], d["profile"]
