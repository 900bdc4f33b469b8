"""Row-wise sharding's collectives, measured beside the pooled all-to-all.

A table split by rows over all G ranks (TorchRec's row-wise) moves data unlike a table owned
by one rank (table-wise, column-wise):

- **input dist**: every rank sends the lookups of its batch slice to the owners of their rows
  (an all-to-all of int64 indices; ``index_counts[r][o]`` of them from rank r to rank o);
- **forward**: every rank pools its rows for the whole global batch B -- partial sums
  [B, dim] -- and a *reduce-scatter* leaves each rank the summed [b, dim] of its own slice;
- **backward**: the gradients of the slices are *all-gathered* back, [b, dim] from every rank
  to every rank.

``dim`` is the summed width of every row-split table (each counted once, not per block). A
slice is b = ceil(B / G) rows on every rank (the collectives need equal parts; the last rank's
slice is padded when G does not divide B). :class:`RowWise` is the pattern; :class:`RowWiseExchange`
a rank's buffers, allocated once per sample like the all-to-all's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist

from shardlab.errors import field_error
from shardlab.schedule import owner_counts  # noqa: F401  (imported from here too)

#: The collectives under their current names (torch 2.13 deprecates ``reduce_scatter_tensor`` and
#: ``all_gather_into_tensor``; the device image's torch 2.11 may only have the old ones).
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass(frozen=True)
class RowWise:
    """Row-wise comm of one plan (module docstring): ``dim`` columns reduce-scattered forward
    and all-gathered backward; ``index_counts`` (G x G ints, empty for none) indices sent rank
    to rank before the forward."""

    dim: int = 0
    index_counts: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        owner = "row-wise comm"
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 0:
            raise field_error(owner, "dim", self.dim, "must be an integer >= 0")
        counts = tuple(tuple(int(x) for x in row) for row in self.index_counts)
        if any(len(row) != len(counts) for row in counts) or any(x < 0 for row in counts for x in row):
            raise field_error(owner, "index_counts", [list(r) for r in counts], "must be a square matrix of ints >= 0")
        object.__setattr__(self, "index_counts", counts)

    @property
    def empty(self) -> bool:
        """Whether the plan has no row-wise traffic at all."""
        return self.dim == 0 and not any(any(row) for row in self.index_counts)

    def check(self, world_size: int) -> "RowWise":
        """Self, if its index matrix fits ``world_size`` ranks (or is empty); one-line error else."""
        if self.index_counts and len(self.index_counts) != world_size:
            raise field_error("row-wise comm", "index_counts", f"{len(self.index_counts)} rows",
                              f"must have world_size ({world_size}) rows")
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"dim": self.dim, "index_counts": [list(r) for r in self.index_counts]}


class RowWiseExchange:
    """Rank ``rank``'s row-wise buffers for one sample; :meth:`inputs`, :meth:`forward` and
    :meth:`backward` run its collectives (nothing when the pattern is empty)."""

    def __init__(self, rank: int, world_size: int, batch_size: int, rowwise: RowWise, dtype: torch.dtype,
                 device: torch.device):
        g, self.rw = world_size, rowwise
        b = -(-batch_size // g)
        make = lambda n: torch.randn(n, dtype=dtype, device=device)  # noqa: E731
        if rowwise.dim:
            self.partial, self.summed = make(g * b * rowwise.dim), make(b * rowwise.dim)
            self.grad, self.grads = make(b * rowwise.dim), make(g * b * rowwise.dim)
        if rowwise.index_counts:
            self.send = [rowwise.index_counts[rank][o] for o in range(g)]
            self.recv = [rowwise.index_counts[r][rank] for r in range(g)]
            self.idx_out = torch.zeros(sum(self.send), dtype=torch.int64, device=device)
            self.idx_in = torch.zeros(sum(self.recv), dtype=torch.int64, device=device)

    def inputs(self) -> None:
        """Indices to the owners of their rows."""
        if self.rw.index_counts:
            dist.all_to_all_single(self.idx_in, self.idx_out, self.recv, self.send)

    def forward(self) -> None:
        """Partial sums reduce-scattered: each rank keeps its slice, summed over ranks."""
        if self.rw.dim:
            _REDUCE_SCATTER(self.summed, self.partial)

    def backward(self) -> None:
        """Slice gradients all-gathered to every rank."""
        if self.rw.dim:
            _ALL_GATHER(self.grads, self.grad)


def check_rowwise(rank: int, cfg: dict, rowwise: RowWise, world_size: int) -> dict[str, Any]:
    """One coded row-wise exchange (float64): rank r's partial sums are all r + 1, its slice
    gradient all r, its indices r * 1e6 + position. Returns what arrived: the distinct summed
    values, the gathered gradients per source rank, the index sources."""
    ex = RowWiseExchange(rank, world_size, cfg["batch_size"], rowwise, torch.float64, torch.device(cfg["device_name"]))
    out: dict[str, Any] = {}
    if rowwise.index_counts:
        ex.idx_out.copy_(rank * 10**6 + torch.arange(len(ex.idx_out)))
        ex.inputs()
        out["index_sources"] = sorted({int(v) // 10**6 for v in ex.idx_in.cpu().tolist()})
        out["indices_received"] = len(ex.idx_in)
    if rowwise.dim:
        ex.partial.fill_(rank + 1.0)
        ex.grad.fill_(float(rank))
        ex.forward()
        ex.backward()
        out["summed"] = sorted(set(ex.summed.cpu().tolist()))
        out["gathered"] = [sorted(set(part.tolist())) for part in ex.grads.cpu().chunk(world_size)]
    return out


def rowwise_of(value: RowWise | dict[str, Any] | None) -> RowWise:
    """A :class:`RowWise` from itself, its JSON form or None (empty)."""
    if value is None:
        return RowWise()
    if isinstance(value, RowWise):
        return value
    return RowWise(int(value.get("dim", 0)), tuple(tuple(r) for r in value.get("index_counts", ())))
