"""NeuroShard's split guard: column splits only where every judge, charged for splits, agrees.

A cost model may over-reward column splits (on held-out model families NeuroShard's
splits measured up to 1.4x slower than its own table-wise plan while its model predicted them
faster). The guard re-scores every state the column-wise search evaluated with one or more
*judges* (cost-model bundles: the search's own and, by default, the analytic model fitted to the
same measurements) and returns the cheapest state under all of them:

- for each judge, every device that holds a column split has its predicted compute ms multiplied
  by the judge's split-calibration factor (``costmodel/bundle.py``, ``calibrate_splits``; 1 for a bundle without
  one) and the plan is re-simulated with the judge's comm model;
- a state's *guarded ratio* under a judge is that cost over the judge's cost of the table-wise
  plan (or, when no table-wise plan fits, over the judge's cheapest state); its *score* is the
  largest ratio over the judges, so a split plan wins only if every judge predicts it faster;
- states within ``constants.SPLIT_TIE`` of the best score are tied: the fewest splits wins, then
  the score, then the order evaluated (the table-wise plan first). Deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.base import IncrementalComputeModel, simulate_many
from shardlab.costmodel.bundle import CostModelBundle, load_bundle
from shardlab.errors import ShardlabError
from shardlab.search.stages import State, is_split
from shardlab.tables import Table, Task


@dataclass(frozen=True)
class Judge:
    """A bundle that scores states under the guard; ``own``: the bundle the search used (its
    simulations are reused rather than recomputed)."""

    name: str
    bundle: CostModelBundle
    own: bool = False

    @property
    def factor(self) -> float:
        """The judge's split-calibration factor (1 without a calibration)."""
        cal = self.bundle.split_calibration()
        return 1.0 if cal is None else cal.factor


@dataclass(frozen=True)
class Flat:
    """Every state's blocks in one flat array each, for array-at-once guard arithmetic: the
    state and device of each block, its output width (its all-to-all columns,
    :attr:`~shardlab.tables.Table.out_dim`), whether it is a split, and the index of its
    (sub)table in ``tables``."""

    state: np.ndarray
    device: np.ndarray
    width: np.ndarray
    split: np.ndarray
    table: np.ndarray
    tables: list[Table]

    @classmethod
    def of(cls, states: Sequence[State]) -> "Flat":
        """The flat arrays of ``states``."""
        index: dict[Table, int] = {}
        blocks = [b for s in states for b in s.blocks]
        return cls(np.repeat(np.arange(len(states)), [len(s.blocks) for s in states]),
                   np.concatenate([np.asarray(s.devices, dtype=np.int64) for s in states]) if states
                   else np.zeros(0, dtype=np.int64),
                   np.array([b.table.out_dim for b in blocks], dtype=float), np.array([is_split(b) for b in blocks]),
                   np.array([index.setdefault(b.table, len(index)) for b in blocks], dtype=np.int64), list(index))

    def per_device(self, n: int, g: int, values: np.ndarray) -> np.ndarray:
        """(n, G, ...) sums of per-block ``values`` (blocks, ...) over each state's devices."""
        out = np.zeros((n, g, *values.shape[1:]), dtype=values.dtype)
        np.add.at(out, (self.state, self.device), values)
        return out


def device_compute(judge: Judge, task: Task, states: Sequence[State], flat: Flat | None = None) -> np.ndarray:
    """(n, G, 2) fw/bw compute ms of every state's devices under ``judge`` (unguarded)."""
    if judge.own:
        return np.stack([np.stack([s.simulated.fw_compute, s.simulated.bw_compute], axis=1) for s in states])
    g, model = task.ngpu, judge.bundle.compute
    out = np.zeros((len(states), g, 2))
    if isinstance(model, IncrementalComputeModel):
        flat = flat or Flat.of(states)
        emb = np.asarray(model.embed(flat.tables), dtype=np.float64)
        sums = flat.per_device(len(states), g, emb[flat.table])
        counts = flat.per_device(len(states), g, np.ones(len(flat.table)))
        pred = model.predict_sums(sums.reshape(-1, sums.shape[2]), counts.reshape(-1)).reshape(len(states), g, 2)
        return np.where(counts[..., None] > 0, pred, 0.0)
    for k, s in enumerate(states):
        shards: list[list[Table]] = [[] for _ in range(g)]
        for b, d in zip(s.blocks, s.devices):
            shards[d].append(b.table)
        pred = np.asarray(model.predict(shards), dtype=float).reshape(g, 2)
        out[k] = np.where(np.array([len(x) > 0 for x in shards])[:, None], pred, 0.0)
    return out


def guarded_costs(judge: Judge, task: Task, states: Sequence[State], flat: Flat | None = None) -> np.ndarray:
    """(n,) plan cost ms of every state under ``judge`` with split devices charged its factor."""
    g = task.ngpu
    flat = flat or Flat.of(states)
    compute = device_compute(judge, task, states, flat)
    dims = flat.per_device(len(states), g, flat.width)
    split_dev = flat.per_device(len(states), g, flat.split.astype(np.int64)) > 0
    compute = np.where(split_dev[..., None], compute * judge.factor, compute)
    return np.array([sim.cost_ms for sim in simulate_many(compute, dims, judge.bundle.comm_for(g)[0])])


def guard_order(task: Task, states: Sequence[State], judges: Sequence[Judge]
                ) -> tuple[list[int], dict[str, np.ndarray], dict[str, Any]]:
    """(state indices best first, {judge: (n,) guarded ratios}, the guard's record): module
    docstring. ``states[0]`` is the table-wise plan when it has no splits."""
    tw = 0 if states and states[0].splits == 0 else None
    ratios = {}
    flat = Flat.of(states)
    for j in judges:
        cost = guarded_costs(j, task, states, flat)
        base = cost[tw] if tw is not None else cost.min()
        ratios[j.name] = cost / max(base, 1e-12)
    score = np.max(np.stack(list(ratios.values())), axis=0)
    best = float(score.min())
    order = sorted(range(len(states)), key=lambda k: (score[k] > best * (1 + C.SPLIT_TIE) + 1e-12,
                                                      states[k].splits, round(float(score[k]), 9), k))
    unguarded = min(range(len(states)), key=lambda k: (round(states[k].simulated.cost_ms, 9), k))
    record = {"judges": {j.name: {"factor": j.factor, "calibrated": j.bundle.split_calibration() is not None}
                         for j in judges},
              "table_wise_ms": None if tw is None else states[tw].simulated.cost_ms,
              "overruled": unguarded != order[0], "tie": C.SPLIT_TIE}
    return order, ratios, record


class CostChooser:
    """A chooser (``search/stages.py``): the states by the search model's cost (ms, rounded to
    1e-9), ties in the order placed; nothing to record."""

    def rank(self, task: Task, states: list[State]) -> tuple[list[int], dict[str, Any]]:
        """Indices of ``states``, cheapest first, and an empty record."""
        return sorted(range(len(states)), key=lambda k: (round(states[k].simulated.cost_ms, 9), k)), {}


@dataclass
class GuardChooser:
    """A chooser (``search/stages.py``): the split guard of ``judges`` (:func:`guard_order`);
    after :meth:`rank`, ``ratios_`` holds each judge's (n,) guarded ratios."""

    judges: Sequence[Judge]
    ratios_: dict[str, np.ndarray] | None = None

    def rank(self, task: Task, states: list[State]) -> tuple[list[int], dict[str, Any]]:
        """Indices of ``states``, best guarded score first, and the guard's record."""
        order, self.ratios_, record = guard_order(task, states, self.judges)
        return order, record


def guard_judges(own_name: str, own: CostModelBundle, others: Sequence[str | CostModelBundle], profile: str
                 ) -> tuple[list[Judge], list[str]]:
    """The guard's judges: the search's own bundle ``own`` (named ``own_name``) first, then each of
    ``others`` -- a bundle (named ``guard#i``), or a shipped model name of ``profile`` (the own
    name skipped) -- and the names not shipped for ``profile`` (left out; the guard's record says so)."""
    judges, missing = [Judge(own_name, own, own=True)], []
    for i, g in enumerate(others):
        if isinstance(g, CostModelBundle):
            judges.append(Judge(f"guard#{i + 1}", g))
        elif g != own_name:
            try:
                judges.append(Judge(g, load_bundle(g, profile)))
            except ShardlabError:
                missing.append(g)
    return judges, missing
