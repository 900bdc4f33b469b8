"""Split calibration: how far a compute model under-predicts shards that hold a column slice.

A column split turns one table into two sub-tables that each do all of the table's lookups
over fewer columns; whether that pays depends on per-lookup overheads a model may have learned
poorly. :func:`calibrate_splits` measures it: over measured shards holding at least one column
slice (named with ``constants.COLUMN_SLICE_MARK``, as the broad campaign makes them) that the
model was *not* trained on, the ``quantile`` of log(measured / predicted) fw+bw ms. NeuroShard's
split guard multiplies the predicted compute of every device holding a split by
:attr:`SplitCalibration.factor` before it lets a column-wise plan beat its table-wise one.

A calibration is data about a bundle, kept in its manifest (``"calibration"``), with the data it
came from; a bundle without one is searched unguarded and its plans say so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.profile.records import ComputeRecord, as_compute_records
from shardlab.errors import ShardlabError
from shardlab.tables import Table

#: Fewest measured split shards a calibration may rest on.
MIN_SPLIT_SHARDS = 10


def is_column_slice(table: Table) -> bool:
    """Whether ``table`` is a measured column slice (its name carries the slice mark)."""
    return C.COLUMN_SLICE_MARK in table.name


@dataclass(frozen=True)
class SplitCalibration:
    """``log_margin``: the ``quantile`` of log(measured / predicted) fw+bw ms over ``n`` measured
    split shards (``data`` names them); ``median_log_ratio`` beside it for the record."""

    log_margin: float
    quantile: float
    n: int
    median_log_ratio: float
    data: str

    @property
    def factor(self) -> float:
        """Multiplier (>= 1) on the predicted compute ms of a device holding a split: the model
        is never trusted to make a split cheaper than it predicts."""
        return float(np.exp(max(self.log_margin, 0.0)))

    def to_dict(self) -> dict[str, Any]:
        """JSON form (stored in the bundle manifest)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SplitCalibration":
        """Parse the manifest's ``calibration`` block; one-line error naming a bad field."""
        try:
            out = cls(float(d["log_margin"]), float(d["quantile"]), int(d["n"]),
                      float(d["median_log_ratio"]), str(d["data"]))
        except KeyError as e:
            raise ShardlabError(f"split calibration: missing field '{e.args[0]}'") from None
        except (TypeError, ValueError):
            raise ShardlabError("split calibration: fields 'log_margin', 'quantile', 'n', "
                                "'median_log_ratio' must be numbers") from None
        if not 0.0 < out.quantile < 1.0 or not np.isfinite(out.log_margin):
            raise ShardlabError(f"split calibration: field 'quantile' = {out.quantile} must be in (0, 1) "
                                "and 'log_margin' finite")
        return out


def split_shards(records: Sequence[ComputeRecord | Mapping[str, Any]]) -> list[ComputeRecord]:
    """The measured shards (compute records) holding at least one column slice."""
    return [r for r in as_compute_records(records, "split calibration")
            if any(is_column_slice(t) for t in r.tables)]


def calibrate_splits(compute: Any, records: Sequence[ComputeRecord | Mapping[str, Any]],
                     quantile: float = C.SPLIT_GUARD_QUANTILE, data: str = "") -> SplitCalibration:
    """Calibrate ``compute`` (a fitted compute model) on the split shards among ``records``,
    which must be measurements it was not trained on. Raises (one line) with fewer than
    ``MIN_SPLIT_SHARDS`` of them."""
    if not 0.0 < quantile < 1.0:
        raise ShardlabError(f"split calibration: field 'quantile' = {quantile} must be in (0, 1)")
    shards = split_shards(records)
    if len(shards) < MIN_SPLIT_SHARDS:
        raise ShardlabError(f"split calibration: needs >= {MIN_SPLIT_SHARDS} measured shards holding a column "
                            f"slice (names with {C.COLUMN_SLICE_MARK!r}), got {len(shards)}")
    pred = np.asarray(compute.predict([r.tables for r in shards]), dtype=float).sum(axis=1)
    meas = np.array([r.total_ms for r in shards])
    ok = (pred > 0) & (meas > 0)
    log_ratio = np.log(meas[ok] / pred[ok])
    return SplitCalibration(float(np.quantile(log_ratio, quantile)), quantile, int(ok.sum()),
                            float(np.median(log_ratio)), data)
