"""The units NeuroShard's search moves (``search/neuroshard.py``): blocks of tables (column
splits, and pinned row blocks of ``search/row_wise.py``) and the coster that predicts a
device's fused compute from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from shardlab.costmodel.base import IncrementalComputeModel
from shardlab.tables import Table, Task


@dataclass(frozen=True)
class Block:
    """A block of a table as a sub-table: ``cols`` columns from ``col_offset`` and the rows of
    ``table`` from ``row_offset`` (a row block: ``search/row_wise.py``). ``device``
    >= 0 pins the block there (row blocks keep TorchRec's layouts); -1 lets the search place it."""

    table: Table
    parent: str
    col_offset: int
    row_offset: int = 0
    device: int = -1

    @property
    def cols(self) -> int:
        """Width of the block."""
        return self.table.dim


def whole_blocks(task: Task) -> tuple[Block, ...]:
    """One block per table (no splits)."""
    return tuple(Block(t, t.name, 0) for t in task.tables)


def split_block(blocks: tuple[Block, ...], i: int) -> tuple[Block, ...]:
    """``blocks`` with block i halved (two blocks of cols/2)."""
    b = blocks[i]
    half = b.cols // 2
    parts = tuple(Block(b.table.with_dim(half, name=f"{b.parent}[{off}:{off + half}]"), b.parent, off)
                  for off in (b.col_offset, b.col_offset + half))
    return blocks[:i] + parts + blocks[i + 1:]


class ShardCoster:
    """Predicted fused compute (fw, bw ms) of device shards, incremental where the model allows."""

    def __init__(self, model: Any):
        self.model = model
        self.incremental = isinstance(model, IncrementalComputeModel)
        self._emb: dict[Table, np.ndarray] = {}
        self._cache: dict[tuple, np.ndarray] = {}

    def embed(self, blocks: Sequence[Block]) -> np.ndarray:
        """(n, d) encodings of the blocks (cached per sub-table). Each table is encoded alone:
        a float32 encoder's rows depend in their last bits on the batch they were computed in,
        and a table's encoding must not depend on which states the search happened to cost
        together (near-equal plans would then rank differently)."""
        for b in blocks:
            if b.table not in self._emb:
                self._emb[b.table] = self.model.embed([b.table])[0]
        return np.stack([self._emb[b.table] for b in blocks])

    def shards(self, shards: Sequence[Sequence[Table]]) -> np.ndarray:
        """(n, 2) fw/bw ms through ``predict``, cached by shard content."""
        keys = [tuple(sorted((t.name, t.dim) for t in s)) for s in shards]
        todo = [i for i, k in enumerate(keys) if k not in self._cache]
        if todo:
            for i, row in zip(todo, self.model.predict([shards[i] for i in todo])):
                self._cache[keys[i]] = np.asarray(row, dtype=float)
        return np.stack([self._cache[k] for k in keys]) if keys else np.zeros((0, 2))
