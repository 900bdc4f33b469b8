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
from typing import Any, Sequence

from shardlab.costmodel.analytic import AnalyticComm, AnalyticCompute
from shardlab.costmodel.assess import held_out_sets
from shardlab.costmodel.bundle import CostModelBundle, heldout_errors
from shardlab.costmodel.metrics import split_samples
from shardlab.errors import ShardlabError
from shardlab.profile.dataset import load_measured
from shardlab.profile.provenance import environment
from shardlab.profile.store import SampleStore

KINDS = ("analytic", "neuroshard", "autoshard", "dreamshard")


def load_samples(kind: str, store: str | None = None, dataset: str = "cpu",
                 profile: str | None = None) -> list[dict[str, Any]]:
    """Measured samples of ``kind`` (``compute``, ``single``, ``comm`` = every ``comm:<G>``,
    ``plan`` = every ``plan:<G>``)
    from a SQLite store if given, else from the shipped dataset; optionally one profile only."""
    if store is not None:
        with SampleStore(store) as s:
            kinds = [k for k in s.kinds() if k == kind or (kind in ("comm", "plan") and k.startswith(kind + ":"))]
            out = [x for k in kinds for x in s.samples(k)]
    else:
        if kind in ("comm", "plan"):
            from shardlab.data.pool import datasets_dir

            kinds = sorted(p.name[: -len(".jsonl.gz")].replace("_", ":")
                           for p in (datasets_dir() / dataset).glob(f"{kind}_*.jsonl.gz"))
        else:
            kinds = [kind]
        out = [x for k in kinds for x in load_measured(k, dataset)]
    if profile is not None:
        out = [x for x in out if x["provenance"]["profile"]["name"] == profile]
    return out


def data_provenance(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The distinct provenance records of ``samples`` (hardware, versions, command, date)."""
    seen: dict[str, dict[str, Any]] = {}
    for s in samples:
        p = s.get("provenance", {})
        seen.setdefault(repr(sorted(p.items(), key=lambda kv: kv[0])), p)
    return list(seen.values())


def train_bundle(kind: str, compute_samples: Sequence[dict[str, Any]], comm_samples: Sequence[dict[str, Any]],
                 seed: int = 0, epochs: int | None = None, progress: bool = True,
                 data_label: str = "", plan_samples: Sequence[dict[str, Any]] = ()) -> CostModelBundle:
    """Fit a bundle of ``kind`` on the train/val splits (by key); test errors in ``heldout``."""
    if kind not in KINDS:
        raise ShardlabError(f"train: field 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
    if not compute_samples or not comm_samples:
        raise ShardlabError("train: needs both compute and comm samples")
    cs, ms = held_out_sets(compute_samples), split_samples(comm_samples)
    comm: Any
    if kind == "analytic":
        compute: Any = AnalyticCompute().fit(cs["train"] + cs["val"])
        comm = AnalyticComm().fit(ms["train"] + ms["val"])
    elif kind == "dreamshard":
        from shardlab.costmodel.dreamshard import DreamShardCost

        if not plan_samples:
            raise ShardlabError("train dreamshard: needs measured plans (kind plan:<G>; `shardlab profile plans`)")
        ps = split_samples(plan_samples)
        compute = DreamShardCost(seed=seed, progress=progress, **({} if epochs is None else {"epochs": epochs}))
        compute.fit(ps["train"], cs["train"], val_plans=ps["val"] or ps["train"][:1])
        comm = AnalyticComm().fit(ms["train"] + ms["val"])
    else:
        from shardlab.costmodel.neural import AutoShardCompute, NeuroShardCompute

        cls = NeuroShardCompute if kind == "neuroshard" else AutoShardCompute
        extra = {} if epochs is None else {"epochs": epochs}
        compute = cls(seed=seed, progress=progress, **extra).fit(cs["train"], cs["val"])
        if kind == "neuroshard":
            from shardlab.costmodel.neural_comm import NeuroShardComm

            comm = NeuroShardComm(seed=seed, progress=progress, **extra).fit(ms["train"], ms["val"])
        else:
            comm = AnalyticComm().fit(ms["train"] + ms["val"])
    heldout = heldout_errors(compute, comm, cs["seen_tables"], ms["test"])
    if cs["unseen_tables"]:
        unseen = heldout_errors(compute, comm, cs["unseen_tables"], [])
        heldout.update({f"{k}_unseen_tables": v for k, v in unseen.items()})
    heldout["split"] = {"rule": "sha256(key): 80% train, 10% validation, 10% test; compute samples on the "
                                "pool's test tables are all held out (unseen tables)",
                        "compute": {k: len(v) for k, v in cs.items()}, "comm": {k: len(v) for k, v in ms.items()}}
    if kind == "dreamshard":
        heldout["plans"] = dreamshard_plan_errors(compute, split_samples(plan_samples)["test"])
    prov = {**environment("cpu"), "kind": kind, "seed": seed, "epochs": epochs, "data": data_label,
            "command": " ".join(sys.argv),
            "data_provenance": data_provenance(list(compute_samples) + list(comm_samples))}
    for m in (compute, comm):
        m.provenance_ = prov
        m.metrics_ = heldout
    return CostModelBundle(compute, comm, prov, heldout)


def dreamshard_plan_errors(model: Any, plans: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Held-out errors of DreamShard's overall head on measured plan costs (ms)."""
    from shardlab.costmodel.metrics import errors
    from shardlab.tables import Table

    if len(plans) < 2:
        return {"n": len(plans)}
    pred = [model.predict_plan([[Table.from_dict(t) for t in d] for d in p["devices"]])[1] for p in plans]
    return errors(pred, [p["cost_ms"] for p in plans])
