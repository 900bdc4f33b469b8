"""The cost of host-memory offload: an analytic model, with cited constants, of the traffic an
offloaded table (``Table.hbm_share`` < 1: TorchRec's ``fused_uvm_caching``, or ``fused_uvm``
without a cache) sends over the GPU's host link each step.

Per table or block of c columns (s bytes per weight, global batch B, L lookups per sample, U
distinct rows touched per batch -- :func:`shardlab.costmodel.analytic.touched_rows` -- and an HBM
cache holding a share h of the rows):

- **with a cache** (h > 0): the rows a batch misses are fetched into the cache before the lookups,
  and as many cached rows are written back (evicted after the fused optimizer updated them):
  forward and backward each move U (1 - h) c s bytes. The hit rate is h: accesses are assumed
  uniform over the table's rows, as TorchRec's own estimator assumes (its ``kernel_bw_lookup``
  mixes HBM and host bandwidth in the ratio of the cache share). A skewed table hits more, so
  this overstates a skewed table's traffic;
- **without** (h = 0): every lookup reads its row over the link, forward B L c s bytes; the
  backward pass reads and writes back each touched row, 2 U c s bytes.

ms = bytes / (``constants.UVM_LINK_GBPS`` x 10^6), the host link one way (PCIe Gen5 x16, cited
there). The term is added to the device's compute ms by the analytic compute model; it is >= 0 and
additive over tables, so the analytic lower bound stays a bound without it. Nothing here is
measured: fbgemm's CPU kernels have no host-memory mode, and no GPU run of it exists yet, so
every evaluation of a task with offloaded tables says so in its ``source`` (:func:`offload_note`).
"""

from __future__ import annotations

from typing import Sequence

from shardlab import constants as C
from shardlab.tables import Table

#: What every evaluation of a task with offloaded tables says of their cost.
LABEL = (f"host-link traffic analytic at {C.UVM_LINK_GBPS:g} GB/s, PCIe Gen5 x16, hit rate = cache share; "
         "not measured")


def offload_ms(table: Table, batch_size: int, bytes_per_weight: int, touched: float) -> tuple[float, float]:
    """(fw, bw) ms of host-link traffic of one offloaded table or block at ``batch_size`` samples
    (module docstring); ``touched``: its distinct rows touched per batch. (0, 0) for a table in HBM."""
    if not table.offloaded:
        return 0.0, 0.0
    row = table.dim * bytes_per_weight
    per_ms = C.UVM_LINK_GBPS * 1e6
    if table.hbm_share > 0:
        moved = touched * (1.0 - table.hbm_share) * row
        return moved / per_ms, moved / per_ms
    return batch_size * table.pooling_factor * row / per_ms, 2.0 * touched * row / per_ms


def offload_note(tables: Sequence[Table]) -> str:
    """The ``source`` note of an evaluation whose tables include offloaded ones, e.g.
    ``" (2/9 tables offloaded: host-link traffic analytic at 63 GB/s ...)"``; ``""`` when none."""
    n = sum(t.offloaded for t in tables)
    return f" ({n}/{len(tables)} tables offloaded: {LABEL})" if n else ""
