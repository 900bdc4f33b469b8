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

    @property
    def out_dim(self) -> float:
        """Values a sample's lookups of the block produce (its all-to-all width):
        :attr:`~shardlab.tables.Table.out_dim`."""
        return self.table.out_dim


def whole_blocks(task: Task) -> tuple[Block, ...]:
    """One block per table (no splits)."""
    return tuple(Block(t, t.name, 0) for t in task.tables)


def block_id(b: Block) -> tuple[str, int, int, int]:
    """A block's identity: (table, column offset, columns, row offset)."""
    return (b.parent, b.col_offset, b.cols, b.row_offset)


def state_key(blocks: Sequence[Block]) -> tuple:
    """A state's identity, whatever the order of its blocks."""
    return tuple(sorted(block_id(b) for b in blocks))


def split_block(blocks: tuple[Block, ...], i: int) -> tuple[Block, ...]:
    """``blocks`` with block i halved (two blocks of cols/2)."""
    b = blocks[i]
    half = b.cols // 2
    parts = tuple(Block(b.table.with_dim(half, name=f"{b.parent}[{off}:{off + half}]"), b.parent, off)
                  for off in (b.col_offset, b.col_offset + half))
    return blocks[:i] + parts + blocks[i + 1:]


class ShardCoster:
    """A compute model's per-block rows for the search's incremental costing (``embed``, cached
    per sub-table); ``incremental`` says whether the model has them (``embed``/``predict_sums``)."""

    def __init__(self, model: Any):
        self.model = model
        self.incremental = isinstance(model, IncrementalComputeModel)
        self._emb: dict[Table, np.ndarray] = {}

    def embed(self, blocks: Sequence[Block]) -> np.ndarray:
        """(n, d) encodings of the blocks (cached per sub-table). Each table is encoded alone:
        a float32 encoder's rows depend in their last bits on the batch they were computed in,
        and a table's encoding must not depend on which states the search happened to cost
        together (near-equal plans would then rank differently)."""
        for b in blocks:
            if b.table not in self._emb:
                self._emb[b.table] = self.model.embed([b.table])[0]
        return np.stack([self._emb[b.table] for b in blocks])
