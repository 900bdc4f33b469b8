"""NeuroShard's table-wise greedy grid for many search states at once.

The column-wise beam search re-runs the table-wise greedy (``search/neuroshard.py``) for every
candidate split: up to ``beam_width x 2 top_n`` states per round, each under 11 dim-balance
caps (a *row* per state and cap), each placing every block on the device whose predicted
fused cost after adding it is lowest. :func:`greedy_grid` runs all rows of a round in lock
step and reuses work without changing a single decision:

- **One block order for all states.** A state places its blocks by descending single-block
  cost, ties by its own block index, which follows (table, column offset); so one order over
  every distinct block of the round serves all states, and at each step every state holding
  that block places the same block (a state lacking it waits).
- **Shared device contents.** A device's content (its blocks, in the order they came) has an
  id shared by every row that built it: caps of a state until a cap first binds, sibling
  candidates before their split, and every device the rows' histories leave alike. Each
  step costs each distinct (content, block) once, in one model call.
- **Caps together until they differ.** A state starts as one row holding all its caps; it
  decides under its highest cap, and the caps below that would have chosen otherwise leave as a
  row of their own (:class:`_Rows`), so each cap is placed separately only from the first block
  where its decision differs.
- **The head's first layer applied once per block** (``LinearHeadComputeModel``): a content
  keeps the sum of its blocks' first-layer rows, so costing a device is one add per head unit
  and the rest of the head.

The rule per row is the sequential greedy's: the block goes to a feasible device (memory fits
and dim sum + dim <= the row's cap; if no device meets the cap, any device where it fits) with
the lowest predicted fw + bw ms (rounded to 1e-9 ms) -- *after* adding it (``rule="after"``,
shardlab's default) or *before* (``rule="before"``, the original authors' code: the device whose
shard is cheapest now, an empty one costing 0) -- ties to the device with less memory, then the
lower id; a row where a block fits nowhere is dead (its result unused).
Float64 throughout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from shardlab.costmodel.base import LinearHeadComputeModel

#: Which predicted cost the greedy compares per device: after adding the block, or before.
GREEDY_RULES = ("after", "before")


class HeadCoster:
    """A shard cost from summed per-block rows: the model's ``head_rows``/``predict_head``
    where it has them (``LinearHeadComputeModel``), else its ``embed`` rows and
    ``predict_sums`` (any ``IncrementalComputeModel``)."""

    def __init__(self, model: Any):
        self.model = model
        self.linear_head = isinstance(model, LinearHeadComputeModel)

    def rows(self, emb: np.ndarray) -> np.ndarray:
        """(n, h) per-block rows to sum per device, from ``embed`` rows (n, k)."""
        return self.model.head_rows(emb) if self.linear_head else np.asarray(emb, dtype=np.float64)

    def predict(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) fw/bw ms of m shards from their summed rows (m, h) and table counts (m,)."""
        if self.linear_head:
            return self.model.predict_head(sums, counts)
        return self.model.predict_sums(sums, counts)


@dataclass(frozen=True)
class GridResult:
    """Placements of S states under C caps: ``devices`` (S, C, n) the device of each of a
    state's blocks (its own block indices); ``compute_ms`` (S, C, G, 2) each device's predicted
    fw/bw ms; ``alive`` (S, C) whether every block fitted; ``costed``: (device content, block)
    pairs put through the model over all steps (S x C x n x G without any sharing)."""

    devices: np.ndarray
    compute_ms: np.ndarray
    alive: np.ndarray
    costed: int


class Contents:
    """Device contents shared by all rows: id -> summed rows (h,) and table count. Id 0 is the
    empty device. A content plus a block is a new content, the same for every row that makes
    it in one step; ids no row holds any more are dropped by :meth:`compact`."""

    def __init__(self, width: int, coster: HeadCoster, capacity: int = 1024):
        self.coster = coster
        self.sums = np.zeros((capacity, width))
        self.counts = np.zeros(capacity)
        self.size = 1

    def extend(self, old: np.ndarray, row: np.ndarray) -> np.ndarray:
        """Ids of the new contents ``old`` (m,) ids each plus ``row`` (h,)."""
        m = len(old)
        lo, hi = self.size, self.size + m
        if hi > len(self.sums):               # at least double; only the ids in use are copied
            cap = max(2 * len(self.sums), hi)
            for name in ("sums", "counts"):
                a = getattr(self, name)
                grown = np.empty((cap,) + a.shape[1:])
                grown[:lo] = a[:lo]
                setattr(self, name, grown)
        np.add(self.sums[old], row, out=self.sums[lo:hi])
        np.add(self.counts[old], 1, out=self.counts[lo:hi])
        self.size = hi
        return np.arange(lo, hi)

    def compact(self, held: np.ndarray) -> np.ndarray:
        """Keep only the contents in ``held`` (any shape of ids; 0 stays 0); returns ``held``
        renumbered."""
        live, inverse = np.unique(np.concatenate([[0], held.ravel()]), return_inverse=True)
        for a in (self.sums, self.counts):
            a[: len(live)] = a[live]
        self.size = len(live)
        return inverse[1:].reshape(held.shape)

    def cost(self, content: np.ndarray, row: np.ndarray, scratch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predicted ms (k, 2) of each distinct content among ``content`` (m,) ids plus the
        block row ``row`` (h,), and the index of each of the m into them (``scratch``: at
        least ``size`` ints)."""
        m = len(content)
        scratch[content] = np.arange(m)              # the last position of each content wins
        rep = scratch[content]
        keep = rep == np.arange(m)
        ids = content[keep]
        pre = torch.from_numpy(self.sums).index_select(0, torch.from_numpy(ids))    # gather on every core
        pre += torch.from_numpy(row)
        return self.coster.predict(pre.numpy(), self.counts[ids] + 1), (np.cumsum(keep) - 1)[rep]


def greedy_grid(block_rows: np.ndarray, local: np.ndarray, order: np.ndarray, mem_need: np.ndarray,
                dims: np.ndarray, dim_caps: np.ndarray, mem_cap: int, ngpu: int, coster: HeadCoster,
                pinned: np.ndarray | None = None, rule: str = "after") -> GridResult:
    """The greedy placement of S states under C caps at once (module docstring).

    ``block_rows`` (B, h): :meth:`HeadCoster.rows` of the B distinct blocks of all states;
    ``local`` (S, B): each distinct block's index among the state's blocks, -1 where the state
    lacks it; ``order`` (B,): the distinct blocks in placement order; ``mem_need`` (B,) bytes
    and ``dims`` (B,) columns per distinct block; ``dim_caps`` (S, C) dim-sum cap per device,
    ascending in C; ``mem_cap`` bytes per device; ``pinned`` (B,): the device a block must go to
    (row blocks, ``search/row_wise.py``; dead where it does not fit), -1 where the rule chooses;
    ``rule``: ``"after"`` or ``"before"`` (module docstring).
    """
    if rule not in GREEDY_RULES:
        raise ValueError(f"greedy_grid: rule {rule!r} is not one of {GREEDY_RULES}")
    s_n = local.shape[0]
    n = int((local >= 0).sum(axis=1).max())
    c_n = dim_caps.shape[1]
    g = ngpu
    rows_ = _Rows(s_n, c_n, g, n)
    # room for twice the most contents the rows can hold at once (one per row and device), which
    # the compaction below keeps them under: allocated once, not grown by copies step by step
    contents = Contents(block_rows.shape[1], coster, capacity=2 * s_n * c_n * g + 2048)
    scratch = np.zeros(0, dtype=np.int64)
    costed = 0
    for blk in order:
        pending = np.flatnonzero(local[rows_.state[: rows_.size], blk] >= 0)
        while len(pending):
            r = rows_
            rows = pending
            at = local[r.state[rows], blk]
            ar = np.arange(len(rows))
            row_mem, row_content, row_dsum = r.mem[rows], r.content[rows], r.dsum[rows]
            cap_hi = dim_caps[r.state[rows], r.hi[rows]]
            fits = row_mem + mem_need[blk] <= mem_cap
            capped = fits & (row_dsum + dims[blk] <= cap_hi[:, None] + 1e-9)
            any_capped = capped.any(axis=1)
            ok = np.where(any_capped[:, None], capped, fits)
            is_pinned = pinned is not None and pinned[blk] >= 0
            if is_pinned:
                ok = fits & (np.arange(g) == pinned[blk])[None, :]
            if len(scratch) < contents.size:
                scratch = np.zeros(2 * contents.size, dtype=np.int64)
            slot = np.full(ok.shape, -1, dtype=np.int64)
            pred, slot_ok = contents.cost(row_content[ok], block_rows[blk], scratch)
            slot[ok] = slot_ok
            costed += len(pred)
            total = np.full(ok.shape, np.inf)
            if rule == "after":
                total[ok] = np.round(pred.sum(axis=1), 9)[slot_ok]
            else:
                total[ok] = np.round(r.cost[rows].sum(axis=2), 9)[ok]
            tied_mem = np.where(total == total.min(axis=1, keepdims=True), row_mem, np.iinfo(np.int64).max)
            d = np.argmin(tied_mem, axis=1)
            # the caps of a row below its highest that would choose otherwise: the chosen device
            # breaks their cap while some device met the highest cap (module docstring)
            pending = np.zeros(0, dtype=np.int64)
            if not is_pinned:
                need = row_dsum[ar, d] + dims[blk] - 1e-9
                lo_caps = dim_caps[r.state[rows], r.lo[rows]]
                split = any_capped & (need > lo_caps)
                if split.any():
                    pending = rows_.fork(rows[split], dim_caps, need[split])
            chosen = slot[ar, d]                     # -1 on a dead row: it placed where memory was least
            r.alive[rows] &= ok.any(axis=1)
            r.devices[rows, at] = d
            r.mem[rows, d] += mem_need[blk]
            r.dsum[rows, d] += dims[blk]
            r.cost[rows, d] = np.where((chosen >= 0)[:, None], pred[np.maximum(chosen, 0)], 0.0) if len(pred) else 0.0
            old = row_content[ar, d]
            _, made, inverse = np.unique(old, return_index=True, return_inverse=True)
            r.content[rows, d] = contents.extend(old[made], block_rows[blk])[inverse.reshape(-1)]
        if contents.size > 2 * rows_.size * g + 1024:
            rows_.content[: rows_.size] = contents.compact(rows_.content[: rows_.size])
    return rows_.result(costed)


class _Rows:
    """The grid's rows: each a state and a run ``lo..hi`` of its caps whose placements are still
    the same (one row per state at first). A row decides under its highest cap; where a lower
    cap of the run would have chosen otherwise, those caps leave as a new row with the state as
    it was before the step (:meth:`fork`) and decide the step themselves. So every cap's
    placements are exactly the sequential greedy's, and caps are placed separately only from the
    first block where they differ."""

    def __init__(self, s_n: int, c_n: int, g: int, n: int):
        cap = s_n * (2 if c_n > 1 else 1) + 8
        self.s_n, self.c_n, self.size = s_n, c_n, s_n
        self.state = np.zeros(cap, dtype=np.int64)
        self.state[:s_n] = np.arange(s_n)
        self.lo = np.zeros(cap, dtype=np.int64)
        self.hi = np.full(cap, c_n - 1, dtype=np.int64)
        self.content = np.zeros((cap, g), dtype=np.int64)
        self.mem = np.zeros((cap, g), dtype=np.int64)
        self.dsum = np.zeros((cap, g))
        self.cost = np.zeros((cap, g, 2))
        self.alive = np.ones(cap, dtype=bool)
        self.devices = np.zeros((cap, n), dtype=np.int64)

    _FIELDS = ("state", "lo", "hi", "content", "mem", "dsum", "cost", "alive", "devices")

    def fork(self, rows: np.ndarray, dim_caps: np.ndarray, need: np.ndarray) -> np.ndarray:
        """Split off, from each of ``rows``, its caps below ``need`` (the chosen device's dim sum
        after the step) as a new row, copied from the row as it stands; returns the new rows."""
        caps = dim_caps[self.state[rows]]                     # (k, C), ascending
        first_ok = (caps >= need[:, None]).argmax(axis=1)     # the lowest cap that takes the choice
        k = len(rows)
        if self.size + k > len(self.state):
            grow = max(len(self.state), self.size + k)
            for f in self._FIELDS:
                a = getattr(self, f)
                setattr(self, f, np.concatenate([a, np.zeros((grow,) + a.shape[1:], dtype=a.dtype)]))
        new = np.arange(self.size, self.size + k)
        for f in self._FIELDS:
            a = getattr(self, f)
            a[new] = a[rows]
        self.hi[new] = first_ok - 1
        self.lo[rows] = first_ok
        self.size += k
        return new

    def result(self, costed: int) -> GridResult:
        """Each (state, cap)'s placements, from the row holding that cap."""
        at = np.zeros((self.s_n, self.c_n), dtype=np.int64)
        for r in range(self.size):
            at[self.state[r], self.lo[r]: self.hi[r] + 1] = r
        flat = at.reshape(-1)
        return GridResult(self.devices[flat].reshape(self.s_n, self.c_n, -1),
                          self.cost[flat].reshape(self.s_n, self.c_n, -1, 2),
                          self.alive[flat].reshape(self.s_n, self.c_n), costed)
