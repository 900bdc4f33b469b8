"""Train cost-model bundles from a store or a shipped measured dataset, with provenance.

Kinds: ``analytic`` (AnalyticCompute + AnalyticComm), ``neuroshard`` (NeuroShardCompute +
NeuroShardComm), ``autoshard`` (AutoShardCompute + the analytic comm model: AutoShard's own
cost model covers compute only), ``dreamshard`` (DreamShardCost, trained on measured plans
``plan:<G>`` plus the compute samples, + the analytic comm model for simulations; its own
overall head predicts plan costs for DreamShard's MDP). Every bundle records the data it was trained on (dataset or
store, sample counts, the data's own provenance: hardware, versions, dates, command), the
training command, seed, versions, and the held-out errors (test split by key).
"""

from __future__ import annotations

import sys
from typing import Any, Mapping, Sequence

from shardlab import constants as C
from shardlab.costmodel.analytic import AnalyticComm, AnalyticCompute
from shardlab.costmodel.bundle import (MIN_SPLIT_SHARDS, CostModelBundle, SplitCalibration, calibrate_splits,
                                       heldout_errors, split_shards)
from shardlab.costmodel.dreamshard import DreamShardCost
from shardlab.costmodel.metrics import errors, held_out_sets, split_samples
from shardlab.costmodel.neural import AutoShardCompute, NeuroShardCompute
from shardlab.costmodel.neural_comm import NeuroShardComm
from shardlab.errors import ShardlabError
from shardlab.profile.hardware import environment
from shardlab.profile.records import (CommRecord, ComputeRecord, PlanRecord, Record, as_comm_records,
                                     as_compute_records, as_plan_records, as_records)
from shardlab.profile.store import SampleStore, dataset_folder, kind_file, load_measured

KINDS = ("analytic", "neuroshard", "autoshard", "dreamshard")


def load_samples(kind: str, store: str | None = None, dataset: str = "cpu",
                 profile: str | None = None) -> list[dict[str, Any]]:
    """Measured samples of ``kind`` (``compute``, ``single``, ``comm`` = every ``comm:<G>``,
    ``plan`` = every ``plan:<G>``) as the stored JSON rows, each with its provenance, from a
    SQLite store if given, else from the shipped dataset (``"cpu+cpu/broad"``: several, joined);
    optionally one profile only. Cost
    models take the typed records of :func:`load_records`; the rows serve code that reads them
    as dicts (:func:`shardlab.evaluate.stats.subadditivity`, :mod:`shardlab.report.measured`)."""
    if store is not None:
        with SampleStore(store) as s:
            kinds = [k for k in s.kinds() if k == kind or (kind in ("comm", "plan") and k.startswith(kind + ":"))]
            out = [x for k in kinds for x in s.samples(k)]
    else:
        names = [d for d in dataset.split("+") if d]
        if not names:
            raise ShardlabError(f"load: field 'dataset' = {dataset!r} names no dataset")
        out = []
        for name in names:   # "cpu+cpu/broad": every named dataset that has the kind (one must)
            folder = dataset_folder(name)
            if kind in ("comm", "plan"):
                kinds = sorted(p.name[: -len(".jsonl.gz")].replace("_", ":")
                               for p in folder.glob(f"{kind}_*.jsonl.gz"))
            else:
                kinds = [kind] if len(names) == 1 or (folder / kind_file(kind)).exists() else []
            out += [x for k in kinds for x in load_measured(k, name)]
        if not out and len(names) > 1:
            raise ShardlabError(f"load: no dataset of {dataset!r} has measured samples of kind '{kind}'")
    if profile is not None:
        out = [x for x in out if x["provenance"]["profile"]["name"] == profile]
    return out


def load_records(kind: str, store: str | None = None, dataset: str = "cpu", profile: str | None = None) -> list[Any]:
    """:func:`load_samples` parsed once into typed records (:mod:`shardlab.profile.records`):
    :class:`~shardlab.profile.records.ComputeRecord` for ``compute`` and ``single``,
    :class:`~shardlab.profile.records.CommRecord` for ``comm``, :class:`~shardlab.profile.records.PlanRecord`
    for ``plan``: what every cost model's ``fit`` takes."""
    return as_records(load_samples(kind, store, dataset, profile))


def data_provenance(samples: Sequence[Record | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The distinct provenance records of ``samples`` (hardware, versions, command, date)."""
    seen: dict[str, dict[str, Any]] = {}
    for s in as_records(samples):
        p = dict(s.provenance)
        seen.setdefault(repr(sorted(p.items(), key=lambda kv: kv[0])), p)
    return list(seen.values())


def train_bundle(kind: str, compute_samples: Sequence[ComputeRecord | Mapping[str, Any]],
                 comm_samples: Sequence[CommRecord | Mapping[str, Any]], seed: int = 0, epochs: int | None = None,
                 progress: bool = True, data_label: str = "",
                 plan_samples: Sequence[PlanRecord | Mapping[str, Any]] = (),
                 pretrain_epochs: int = 0, comm_model: Any = None) -> CostModelBundle:
    """Fit a bundle of ``kind`` on the train/val splits (by key) of the records (or rows);
    test errors in ``heldout``. Every model is fitted the same way: ``fit(train, val)``.
    ``pretrain_epochs``: DreamShard's compute-only epochs before its joint training.
    ``comm_model``: an analytic comm model to bundle as it is (e.g.
    :class:`~shardlab.costmodel.topology_comm.TopologyComm`, where no comm was measured): no comm
    samples needed, none fitted, no comm errors."""
    if kind not in KINDS:
        raise ShardlabError(f"train: field 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
    if not compute_samples or not (comm_samples or comm_model is not None):
        raise ShardlabError("train: needs compute samples, and comm samples or a given comm model")
    compute_records = as_compute_records(compute_samples, "train")
    comm_records = [] if comm_model is not None else as_comm_records(comm_samples, "train")
    cs, ms = held_out_sets(compute_records), split_samples(comm_records)
    extra = {"seed": seed, "progress": progress, **({} if epochs is None else {"epochs": epochs})}
    compute: Any
    comm: Any = AnalyticComm()
    ps: dict[str, list[PlanRecord]] = {}
    if kind == "analytic":
        compute = AnalyticCompute().fit(cs["train"], cs["val"])
    elif kind == "dreamshard":
        if not plan_samples:
            raise ShardlabError("train dreamshard: needs measured plans (kind plan:<G>; `shardlab profile plans`)")
        ps = split_samples(as_plan_records(plan_samples, "train dreamshard"))
        compute = DreamShardCost(**extra, pretrain_epochs=pretrain_epochs).fit(ps["train"] + cs["train"], (ps["val"] or ps["train"][:1]) + cs["val"])
    else:
        cls = NeuroShardCompute if kind == "neuroshard" else AutoShardCompute
        compute = cls(**extra).fit(cs["train"], cs["val"])
        if kind == "neuroshard":
            comm = NeuroShardComm(**extra)
    if comm_model is not None:
        comm = comm_model
    else:
        comm.fit(ms["train"], ms["val"])
    heldout = heldout_errors(compute, comm, cs["seen_tables"], ms["test"])
    if cs["unseen_tables"]:
        unseen = heldout_errors(compute, comm, cs["unseen_tables"], [])
        heldout.update({f"{k}_unseen_tables": v for k, v in unseen.items()})
    heldout["split"] = {"rule": "sha256(key): 80% train, 10% validation, 10% test; compute samples on the "
                                "pool's test tables are all held out (unseen tables)",
                        "compute": {k: len(v) for k, v in cs.items()}, "comm": {k: len(v) for k, v in ms.items()}}
    if kind == "dreamshard":
        heldout["plans"] = dreamshard_plan_errors(compute, ps["test"])
    calibration = calibrate_if_possible(compute, compute_records, data_label or "given samples")
    prov = {**environment("cpu"), "kind": kind, "seed": seed, "epochs": epochs,
            **({"pretrain_epochs": pretrain_epochs} if kind == "dreamshard" else {}), "data": data_label,
            "command": " ".join(sys.argv),
            "data_provenance": data_provenance(compute_records + comm_records)}
    for m in (compute, comm):
        m.provenance_ = prov
        m.metrics_ = heldout
    if comm_model is not None:
        prov["comm"] = f"given, not fitted: {comm.source}"
    return CostModelBundle(compute, comm, prov, heldout, calibration)


def not_trained_on(records: Sequence[ComputeRecord]) -> list[ComputeRecord]:
    """The records no :func:`train_bundle` fit sees: validation and test splits by key, and
    every sample on the pool's test tables (:func:`~shardlab.costmodel.metrics.held_out_sets`)."""
    cs = held_out_sets(records)
    return cs["val"] + cs["seen_tables"] + cs["unseen_tables"]


def calibrate_held_out(compute: Any, records: Sequence[ComputeRecord], data: str,
                       quantile: float = C.SPLIT_GUARD_QUANTILE) -> SplitCalibration:
    """:func:`~shardlab.costmodel.bundle.calibrate_splits` of ``compute`` on the records it
    was not trained on (:func:`not_trained_on`); ``data`` names where the records came from."""
    return calibrate_splits(compute, not_trained_on(records), quantile=quantile,
                            data=f"{data}: validation and test splits by key")


def calibrate_if_possible(compute: Any, records: Sequence[ComputeRecord], data: str) -> dict[str, Any]:
    """:func:`calibrate_held_out` (JSON form), or ``{}`` when too few split shards are held out."""
    if len(split_shards(not_trained_on(records))) < MIN_SPLIT_SHARDS:
        return {}
    return calibrate_held_out(compute, records, data).to_dict()


def dreamshard_plan_errors(model: Any, plans: Sequence[PlanRecord | Mapping[str, Any]]) -> dict[str, Any]:
    """Held-out errors of DreamShard's overall head on measured plan costs (ms)."""
    records = as_plan_records(plans, "held-out plans")
    if len(records) < 2:
        return {"n": len(records)}
    return errors([model.predict_plan(p.devices)[1] for p in records], [p.cost_ms for p in records])
