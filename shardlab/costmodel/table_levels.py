"""A compute model re-levelled per table by the task's own single-table measurements.

Task calibration (``costmodel/task_calibration.py``) measures every table of a task alone. For
table t with measured fw/bw ms ``m_t`` and the model's own prediction ``s_t`` of it alone, the
**levelled** cost of a shard S is

    model(S) x sum_{t in S} m_t / sum_{t in S} s_t        (per output, fw and bw)

the model's prediction of the fused shard (its interactions: per-op overhead, cache sharing),
scaled by how far off it was on the shard's own tables measured alone, weighted by their size.
A table with no measurement of its own is carried by the ratio ``m_t / s_t`` of a measured table
with the same lookups (rows, pooling factor, reuse bins, lookup seed: a column slice of it,
whose dim differs); a table with neither counts at the model's level (``m_t = s_t``).

Both sums add over tables, so the levelled model stays incremental: its ``embed`` rows are the
model's with four columns appended, ``[r_fw x s_fw, r_bw x s_bw, s_fw, s_bw]`` (ms), and
``predict_sums`` / ``predict_head`` of summed rows give the levelled cost of the shard.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from shardlab.costmodel.base import IncrementalComputeModel, LinearHeadComputeModel
from shardlab.errors import ShardlabError
from shardlab.tables import Table

#: Extra columns per embed row: levelled single fw/bw ms and the model's single fw/bw ms.
EXTRA = 4
#: Smallest sum of single ms a ratio is taken over (below it the shard keeps the model's level).
FLOOR_MS = 1e-6


def lookup_key(t: Table) -> tuple:
    """What a table shares with its column slices: rows, pooling factor, reuse bins, lookup seed."""
    return (int(t.rows), float(t.pooling_factor), tuple(float(x) for x in t.reuse_bins), t.index_seed)


def table_ratios(tables: Sequence[Table], measured: np.ndarray, single: np.ndarray) -> dict[tuple, list[float]]:
    """Lookup key -> [fw, bw] ratio measured / predicted of the tables measured alone
    (``measured``, ``single``: (n, 2) ms); tables sharing a key pool their sums."""
    sums: dict[tuple, np.ndarray] = {}
    for t, m, s in zip(tables, np.asarray(measured, float), np.asarray(single, float)):
        acc = sums.setdefault(lookup_key(t), np.zeros(4))
        acc += np.concatenate([m, s])
    return {k: [float(v[0] / v[2]) if v[2] > FLOOR_MS else 1.0, float(v[1] / v[3]) if v[3] > FLOOR_MS else 1.0]
            for k, v in sums.items()}


class TaskWrapped:
    """A compute model corrected for one task (this module's levels, or task calibration's
    scale and exponent): its learned state (``profile_``, ``provenance_`` ...) and valid range
    are the model's, its label the model's plus ``label``; it predicts only, and ``fit`` and
    ``save`` refuse in one line (it belongs to one task and lives in that task's record)."""

    target = "compute"
    label = "+task-corrected"

    def __getattr__(self, name: str) -> Any:
        if name.endswith("_") and not name.startswith("__") and name != "model":
            return getattr(self.model, name)
        raise AttributeError(name)

    @property
    def fitted(self) -> bool:
        """Whether the model is fitted."""
        return bool(self.model.fitted)

    @property
    def range_model(self) -> Any:
        """The model whose valid range this one keeps (``valid_range.range_report``)."""
        return getattr(self.model, "range_model", self.model)

    @property
    def source(self) -> str:
        """The model's label with :attr:`label`."""
        return f"{self.model.source}{self.label}"

    def fit(self, samples: Sequence[Any], val_samples: Sequence[Any] | None = None) -> Any:
        """Refused: made by task calibration."""
        raise ShardlabError(f"{self.label.lstrip('+')} model: field 'fit' is not supported (calibrate_to_task makes it)")

    def save(self, path: str) -> None:
        """Refused: not saved (its task's record says what it was)."""
        raise ShardlabError(f"{self.label.lstrip('+')} model: field 'save' is not supported (keep its record instead)")


class LevelledCompute(TaskWrapped):
    """``model`` re-levelled per table (module docstring) by ``ratios`` (lookup key -> [fw, bw]
    measured / predicted)."""

    label = "+task-levelled"

    def __init__(self, model: Any, ratios: Mapping[tuple, Sequence[float]]):
        self.model = model
        self.ratios = {k: np.asarray(v, dtype=np.float64).reshape(2) for k, v in ratios.items()}

    def extra(self, tables: Sequence[Table]) -> np.ndarray:
        """(n, 4) each table's levelled and model single fw/bw ms (module docstring)."""
        if not tables:
            return np.zeros((0, EXTRA))
        single = np.asarray(self.model.predict([[t] for t in tables]), dtype=np.float64).reshape(len(tables), 2)
        r = np.stack([self.ratios.get(lookup_key(t), np.ones(2)) for t in tables])
        return np.concatenate([r * single, single], axis=1)

    @staticmethod
    def level(extra_sums: np.ndarray) -> np.ndarray:
        """(m, 2) factors sum levelled / sum model of summed extra columns (m, 4); 1 where ~0."""
        e = np.asarray(extra_sums, dtype=np.float64).reshape(-1, EXTRA)
        den = e[:, 2:]
        return np.where(den > FLOOR_MS, e[:, :2] / np.maximum(den, FLOOR_MS), 1.0)

    def predict(self, shards: Sequence[Sequence[Table]]) -> np.ndarray:
        """(n, 2) levelled fw/bw ms per shard."""
        base = np.asarray(self.model.predict(shards), dtype=np.float64).reshape(len(shards), 2)
        sums = np.stack([self.extra(list(s)).sum(axis=0) for s in shards]) if len(shards) else np.zeros((0, EXTRA))
        return base * self.level(sums)


class LevelledIncremental(LevelledCompute):
    """:class:`LevelledCompute` of an incremental model: the model's rows plus four columns."""

    @property
    def embed_dim(self) -> int:
        """Width of :meth:`embed`'s rows: the model's plus 4."""
        return int(self.model.embed_dim) + EXTRA

    def embed(self, tables: Sequence[Table]) -> np.ndarray:
        """(n, embed_dim) the model's rows and each table's extra columns."""
        return np.concatenate([np.asarray(self.model.embed(tables), dtype=np.float64), self.extra(tables)], axis=1)

    def predict_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) levelled fw/bw ms from summed rows (m, embed_dim) and counts (m,)."""
        s = np.asarray(sums, dtype=np.float64)
        return self.model.predict_sums(s[:, :-EXTRA], counts) * self.level(s[:, -EXTRA:])


class LevelledLinearHead(LevelledIncremental):
    """:class:`LevelledIncremental` of a model with a linear first head layer."""

    def head_rows(self, rows: np.ndarray) -> np.ndarray:
        """(n, h + 4) the model's head rows of the model's columns, and the extra columns."""
        r = np.asarray(rows, dtype=np.float64)
        return np.concatenate([np.asarray(self.model.head_rows(r[:, :-EXTRA]), dtype=np.float64), r[:, -EXTRA:]], axis=1)

    def predict_head(self, pre: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(m, 2) levelled fw/bw ms from summed head rows (m, h + 4) and counts (m,)."""
        p = np.asarray(pre, dtype=np.float64)
        return self.model.predict_head(p[:, :-EXTRA], counts) * self.level(p[:, -EXTRA:])


def levelled(model: Any, ratios: Mapping[tuple, Sequence[float]]) -> Any:
    """``model`` re-levelled by ``ratios`` (the wrapper of its kind)."""
    cls = (LevelledLinearHead if isinstance(model, LinearHeadComputeModel) else
           LevelledIncremental if isinstance(model, IncrementalComputeModel) else LevelledCompute)
    return cls(model, ratios)
