"""Train cost-model bundles from a store or a shipped measured dataset, with provenance.

Kinds: ``analytic`` (AnalyticCompute + AnalyticComm), ``neuroshard`` (NeuroShardCompute +
NeuroShardComm), ``autoshard`` (AutoShardCompute + the analytic comm model: AutoShard's own
cost model covers compute only), ``dreamshard`` (DreamShardCost, trained on measured plans
``plan:<G>`` plus the compute samples, + the analytic comm model for simulations; its own
overall head predicts plan costs for DreamShard's MDP). Every bundle records the data it was trained on (dataset or
store, sample counts, the data's own provenance: hardware, versions, dates, command, how compute
was timed), how the data were timed (``data_compute_timing``, :func:`data_compute_timing`), the
training host's environment (hardware, versions, date, command, revision; no ``compute_timing``:
training times nothing), seed, and the held-out errors (test split by key).

**Held-out errors** (:func:`heldout_of`) are those of the bundle as users load it: a fitted
model's valid-range guard is on, so shards and all-to-alls outside its range are costed by its
analytic fallback, as in every search and evaluation; ``heldout["computed_by"]`` says so and
names the run. ``studies/valid_range/heldout_errors.py`` recomputes them for the shipped bundles.

**Composed plans** (:func:`compose_plans`): where no plan was measured and the comm model is
given (``--comm topology``: one GPU measured compute, no all-to-all), DreamShard's plans are
composed from measured fused ops: G ops with disjoint tables, one per device, each device's
fw/bw compute as measured (a whole plan's compute on one GPU is measured the same way: each
device's fused op timed in turn), comm from the given model, the plan cost as
:func:`~shardlab.costmodel.base.simulate` adds them. Plans of each split are composed from
that split's ops only, and the bundle's provenance says so (``plans``).

**Held-out whole plans' compute** (:func:`plan_compute_errors`): where the data holds
``plan_compute:<G>`` records (whole plans of held-out tasks, the slowest device's measured
fw + bw; never trained on), every bundle's ``heldout`` gets ``plan_compute_<G>``: its compute
model's slowest-device fw + bw against the measured one (median over the paired rounds).
"""

from __future__ import annotations

import sys
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.analytic import AnalyticComm, AnalyticCompute
from shardlab.costmodel.base import simulate_from
from shardlab.costmodel.bundle import (MIN_SPLIT_SHARDS, CostModelBundle, SplitCalibration, calibrate_splits,
                                       heldout_errors, load_bundle, split_shards)
from shardlab.costmodel.dreamshard import DreamShardCost
from shardlab.costmodel.metrics import errors, held_out_sets, split_samples
from shardlab.costmodel.neural import AutoShardCompute, NeuroShardCompute
from shardlab.costmodel.neural_comm import NeuroShardComm
from shardlab.costmodel.valid_range import CommRange, ComputeRange
from shardlab.data.lookups import device_tables
from shardlab.errors import ShardlabError
from shardlab.plan import Plan
from shardlab.measure.hardware import environment
from shardlab.measure.records import (CommRecord, ComputeRecord, PlanRecord, Record, as_comm_records,
                                     as_compute_records, as_plan_records, as_records)
from shardlab.measure.store import SampleStore, dataset_folder, kind_file, load_measured
from shardlab.tables import Task

KINDS = ("analytic", "neuroshard", "autoshard", "dreamshard")
#: Kinds measured per device count (``<kind>:<G>``, files ``<kind>_<G>.jsonl.gz``): asked for by the bare name.
PER_G_KINDS = ("comm", "plan", "plan_compute")
#: Device counts of composed plans (:func:`compose_plans`): those of the measured plan sets.
COMPOSED_NGPU = (4, 8)
#: How a bundle's held-out errors are computed (``heldout["computed_by"]`` says it and by which run).
HELDOUT_BY = ("shardlab.costmodel.train.heldout_of on the bundle as load_bundle gives it (a fitted model "
              "guarded by its valid range, its analytic fallback costing what lies outside)")


def load_samples(kind: str, store: str | None = None, dataset: str = "cpu",
                 profile: str | None = None, required: bool = True) -> list[dict[str, Any]]:
    """Measured samples of ``kind`` (``compute``, ``single``, ``comm`` = every ``comm:<G>``,
    ``plan`` = every ``plan:<G>``, ``plan_compute`` = every ``plan_compute:<G>``) as the stored
    JSON rows, each with its provenance, from a SQLite store if given, else from the shipped
    dataset (``"cpu+cpu/broad"``: several, joined; one of them must have the kind unless
    ``required`` is False); optionally one profile only. Cost
    models take the typed records of :func:`load_records`; the rows serve code that reads them
    as dicts (:func:`shardlab.evaluate.stats.subadditivity`, :mod:`shardlab.report.measured`)."""
    if store is not None:
        with SampleStore(store, create=False) as s:
            kinds = [k for k in s.kinds() if k == kind or (kind in PER_G_KINDS and k.startswith(kind + ":"))]
            out = [x for k in kinds for x in s.samples(k)]
    else:
        names = [d for d in dataset.split("+") if d]
        if not names:
            raise ShardlabError(f"load: field 'dataset' = {dataset!r} names no dataset")
        out = []
        for name in names:   # "cpu+cpu/broad": every named dataset that has the kind (one must)
            folder = dataset_folder(name)
            if kind in PER_G_KINDS:      # plan_<G>, not plan_compute_<G>: the rest is the device count
                kinds = sorted(f"{kind}:{p.name[len(kind) + 1: -len('.jsonl.gz')]}"
                               for p in folder.glob(f"{kind}_*.jsonl.gz")
                               if p.name[len(kind) + 1: -len(".jsonl.gz")].isdigit())
            else:
                kinds = [kind] if (len(names) == 1 and required) or (folder / kind_file(kind)).exists() else []
            out += [x for k in kinds for x in load_measured(k, name)]
        if not out and len(names) > 1 and required:
            raise ShardlabError(f"load: no dataset of {dataset!r} has measured samples of kind '{kind}'")
    if profile is not None:
        out = [x for x in out if x["provenance"]["profile"]["name"] == profile]
    return out


def load_records(kind: str, store: str | None = None, dataset: str = "cpu", profile: str | None = None) -> list[Any]:
    """:func:`load_samples` parsed once into typed records (:mod:`shardlab.measure.records`):
    :class:`~shardlab.measure.records.ComputeRecord` for ``compute`` and ``single``,
    :class:`~shardlab.measure.records.CommRecord` for ``comm``, :class:`~shardlab.measure.records.PlanRecord`
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
                 pretrain_epochs: int = 0, comm_model: Any = None,
                 plan_compute_samples: Sequence[Mapping[str, Any]] = (), rank_weight: float = 0.0) -> CostModelBundle:
    """Fit a bundle of ``kind`` on the train/val splits (by key) of the records (or rows);
    test errors in ``heldout``. Every model is fitted the same way: ``fit(train, val)``.
    ``pretrain_epochs``: DreamShard's compute-only epochs before its joint training.
    ``comm_model``: an analytic comm model to bundle as it is (e.g.
    :class:`~shardlab.costmodel.topology_comm.TopologyComm`, where no comm was measured): no comm
    samples needed, none fitted, no comm errors; DreamShard without measured plans then trains
    on plans composed from each split's measured ops (module docstring, :func:`compose_plans`).
    ``rank_weight``: the neural compute models' ranking-aware loss weight
    (:func:`~shardlab.costmodel.neural.pair_rank_loss`; 0: MSE alone).
    ``plan_compute_samples``: ``plan_compute:<G>`` rows of held-out tasks, judged, never
    trained on (``heldout["plan_compute_<G>"]``, :func:`plan_compute_errors`). A fitted model's
    bundle gets its valid range and an analytic fallback fitted to the same splits (:func:`with_valid_range`)."""
    if kind not in KINDS:
        raise ShardlabError(f"train: field 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
    if rank_weight and kind not in ("neuroshard", "autoshard"):
        raise ShardlabError(f"train: field 'rank_weight' = {rank_weight} applies to neuroshard and autoshard only")
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
        ps = dreamshard_plan_sets(cs, plan_samples, comm_model, seed)
        compute = DreamShardCost(**extra, pretrain_epochs=pretrain_epochs).fit(
            ps["train"] + cs["train"], (ps["val"] or ps["train"][:1]) + cs["val"])
    else:
        cls = NeuroShardCompute if kind == "neuroshard" else AutoShardCompute
        compute = cls(**extra, rank_weight=rank_weight).fit(cs["train"], cs["val"])
        if kind == "neuroshard":
            comm = NeuroShardComm(**extra)
    if comm_model is not None:
        comm = comm_model
    else:
        comm.fit(ms["train"], ms["val"])
    calibration = calibrate_if_possible(compute, compute_records, data_label or "given samples")
    env = {k: v for k, v in environment("cpu").items() if k != "compute_timing"}    # this host timed nothing
    prov = {**env, "kind": kind, "seed": seed, "epochs": epochs, **({"rank_weight": rank_weight} if rank_weight else {}),
            **({"pretrain_epochs": pretrain_epochs} if kind == "dreamshard" else {}), "data": data_label,
            "command": " ".join(sys.argv),
            "data_provenance": data_provenance(compute_records + comm_records)}
    prov["data_compute_timing"] = data_compute_timing(prov["data_provenance"])
    heldout: dict[str, Any] = {}        # filled below, by the bundle as it loads (its guard on)
    for m in (compute, comm):
        m.provenance_ = prov
        m.metrics_ = heldout
    if comm_model is not None:
        prov["comm"] = f"given, not fitted: {comm.source}"
    composed = kind == "dreamshard" and not plan_samples
    if composed:
        prov["plans"] = (f"composed from measured train-split fused ops, not measured plans: per plan G = "
                         f"{' or '.join(map(str, COMPOSED_NGPU))} ops with disjoint tables, one per device, compute "
                         f"(fw, bw) as measured; comm {comm.source}; plan cost = the straggler's compute + comm as "
                         f"simulated; seed {seed}; validation and test plans composed alike from the validation and "
                         "test splits' ops")
    judged = plan_compute_sets(plan_compute_samples)
    if judged:
        prov["heldout_plan_compute"] = (f"{data_label or 'given samples'}: " + ", ".join(
            f"plan_compute:{g} ({len(rs)} plans of {len({r['task']['name'] for r in rs})} held-out tasks)"
            for g, rs in judged.items()) + "; judged, never trained on")
    bundle = CostModelBundle(compute, comm, prov, heldout, calibration)
    if kind != "analytic":
        bundle = with_valid_range(bundle, cs, ms, ps.get("train", []), data_label or "given samples")
    heldout.update(heldout_of(bundle, cs, ms, ps, composed, plan_compute_samples))
    heldout["computed_by"] = f"{' '.join(sys.argv)}: the bundle as trained, through {HELDOUT_BY}"
    return bundle


def data_compute_timing(records: Sequence[Mapping[str, Any]]) -> str:
    """How the measured data were timed: the distinct ``compute_timing`` values of the data's
    provenance ``records`` (:data:`~shardlab.measure.hardware.TIMING_METHODS`,
    :data:`~shardlab.measure.hardware.HOST_SYNC_TIMING`), joined with ``", "``; a record
    without one counts as ``"not recorded"``."""
    return ", ".join(sorted({str(r.get("compute_timing", "not recorded")) for r in records})) or "not recorded"


def dreamshard_plan_sets(cs: Mapping[str, Sequence[ComputeRecord]], plan_samples: Sequence[Any],
                         comm_model: Any, seed: int) -> dict[str, list[PlanRecord]]:
    """DreamShard's plans by split: the measured ``plan_samples`` split by key, else -- with a
    given comm model -- plans composed from each split's measured ops of ``cs`` (module
    docstring; ``test`` from ``seen_tables``, ``unseen_tables`` from theirs)."""
    if plan_samples:
        return split_samples(as_plan_records(plan_samples, "train dreamshard"))
    if comm_model is None:
        raise ShardlabError("train dreamshard: needs measured plans (kind plan:<G>; `shardlab measure plans`), "
                            "or a given comm model (--comm topology) to compose plans from measured ops")
    return {part: [p for g in COMPOSED_NGPU for p in compose_plans(cs[ops], comm_model, g, seed, part)]
            for part, ops in (("train", "train"), ("val", "val"), ("test", "seen_tables"),
                              ("unseen_tables", "unseen_tables"))}


def heldout_of(bundle: CostModelBundle, cs: Mapping[str, Sequence[ComputeRecord]],
               ms: Mapping[str, Sequence[CommRecord]], ps: Mapping[str, Sequence[PlanRecord]], composed: bool,
               plan_compute_samples: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The manifest's ``heldout`` block of ``bundle`` as it costs plans -- its models guarded by
    its valid range where it has one, as :func:`~shardlab.costmodel.bundle.load_bundle` gives
    them: errors (ms) on the held-out compute splits ``cs`` (``seen_tables``, ``unseen_tables``)
    and comm split ``ms["test"]``, DreamShard's overall head on the test plans of ``ps``
    (``plans_composed`` where ``composed``), the whole plans' compute of
    ``plan_compute_samples`` (:func:`plan_compute_errors`), and the split's counts."""
    compute, comm = bundle.compute, bundle.comm
    heldout = heldout_errors(compute, comm, cs["seen_tables"], ms["test"])
    if cs["unseen_tables"]:
        unseen = heldout_errors(compute, comm, cs["unseen_tables"], [])
        heldout.update({f"{k}_unseen_tables": v for k, v in unseen.items()})
    heldout["split"] = {"rule": "sha256(key): 80% train, 10% validation, 10% test; compute samples on the "
                                "pool's test tables are all held out (unseen tables)",
                        "compute": {k: len(v) for k, v in cs.items()}, "comm": {k: len(v) for k, v in ms.items()}}
    if composed:       # composed plans' costs are measured compute + analytic comm: named apart
        heldout["plans_composed"] = dreamshard_plan_errors(compute, ps["test"])
        heldout["plans_composed_unseen_tables"] = dreamshard_plan_errors(compute, ps["unseen_tables"])
        heldout["split"]["plans_composed"] = {k: len(v) for k, v in ps.items()}
    elif ps:
        heldout["plans"] = dreamshard_plan_errors(compute, ps["test"])
    heldout.update(plan_compute_errors(compute, plan_compute_samples))
    return heldout


def with_valid_range(bundle: CostModelBundle, cs: Mapping[str, Sequence[ComputeRecord]],
                     ms: Mapping[str, Sequence[CommRecord]], plans: Sequence[PlanRecord], data: str) -> CostModelBundle:
    """``bundle`` with its models' valid range (``costmodel/valid_range.py``) and fallback: the
    compute range of the ``cs["train"]`` shards and the training ``plans``' devices, the comm
    range of ``ms["train"]`` where the comm model was fitted to them (a neural one; an analytic
    comm model has no range); the fallback is an analytic bundle fitted to the same train and
    validation splits (compute: :class:`AnalyticCompute`; comm: :class:`AnalyticComm`, or the
    bundle's own analytic comm model), saved beside the bundle as ``<name>.fallback.json``."""
    plain = bundle.unguarded()
    comm, compute = plain.comm, plain.compute
    fitted_comm = isinstance(comm, NeuroShardComm)
    shards = [r.tables for r in cs["train"]] + [d for p in plans for d in p.devices]
    fallback_comm = AnalyticComm().fit(ms["train"], ms["val"]) if fitted_comm else comm
    fallback = CostModelBundle(AnalyticCompute().fit(cs["train"], cs["val"]), fallback_comm,
                               {**bundle.provenance, "kind": "analytic", "fallback_of": bundle.provenance.get("kind")})
    valid: dict[str, Any] = {"compute": ComputeRange.of(shards, compute, fallback.compute).to_dict()}
    if fitted_comm:
        valid["comm"] = CommRange.of(ms["train"], comm, fallback_comm).to_dict()
    for m in (fallback.compute, fallback.comm):
        if m is not comm:
            m.provenance_ = fallback.provenance
    valid.update(data=f"{data}: train split by key", fallback="")
    return CostModelBundle(compute, comm, bundle.provenance, bundle.heldout,
                           bundle.calibration, valid, fallback_bundle=fallback)


def shipped_with_valid_range(name: str, profile: str, dataset: str) -> CostModelBundle:
    """The shipped bundle ``name`` of ``profile`` with :func:`with_valid_range` of the shipped
    ``dataset`` it was trained on (the same splits by key, as the dataset is shipped now)."""
    bundle = load_bundle(name, profile)
    records = load_records("compute", dataset=dataset)
    cs = held_out_sets(records)
    plain = bundle.unguarded()
    comm = plain.comm
    ms = split_samples(load_records("comm", dataset=dataset)) if isinstance(comm, NeuroShardComm) else {"train": [], "val": []}
    plans: list[PlanRecord] = []
    if isinstance(plain.compute, DreamShardCost):
        measured = as_plan_records(load_samples("plan", dataset=dataset, required=False), "valid range")
        plans = split_samples(measured)["train"] if measured else [
            p for g in COMPOSED_NGPU for p in compose_plans(cs["train"], comm, g, bundle.provenance.get("seed", 0))]
    return with_valid_range(bundle, cs, ms, plans, f"dataset:{dataset}")


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


def compose_plans(ops: Sequence[ComputeRecord], comm: Any, ngpu: int, seed: int = 0, label: str = "train",
                  n: int | None = None) -> list[PlanRecord]:
    """``n`` plans (default: one per op) over ``ngpu`` devices composed from the measured fused
    ops ``ops`` (module docstring): each plan takes ``ngpu`` ops with pairwise disjoint table
    names, in the order of a seeded permutation, one per device, their measured fw/bw compute
    as the devices'; the comm model ``comm`` (given, not fitted) predicts the all-to-alls and
    :func:`~shardlab.costmodel.base.simulate_from` the plan cost. Keys
    ``plan:<G>:composed:<label>:s<seed>:<i>``; each plan's provenance names its ops and the comm
    model. Same ops and seed -> the same plans; none where fewer than ``ngpu`` disjoint ops exist."""
    out: list[PlanRecord] = []
    rng = np.random.default_rng([seed, ngpu, 0xC0])
    for i in range(len(ops) if n is None else n):
        chosen: list[ComputeRecord] = []
        names: set[str] = set()
        for j in rng.permutation(len(ops)):
            tables = {t.name for t in ops[j].tables}
            if not tables & names:
                chosen.append(ops[j])
                names |= tables
                if len(chosen) == ngpu:
                    break
        if len(chosen) < ngpu:
            return out
        c = np.array([[r.fw_ms, r.bw_ms] for r in chosen])
        sim = simulate_from(c, [sum(t.dim for t in r.tables) for r in chosen], comm)
        prov = {"composed": "measured fused ops, one per device; comm predicted", "ops": [r.key for r in chosen],
                "comm": comm.source, "ops_provenance": dict(chosen[0].provenance)}
        out.append(PlanRecord(f"plan:{ngpu}:composed:{label}:s{seed}:{i}", tuple(r.tables for r in chosen),
                              tuple(c[:, 0]), tuple(c[:, 1]), tuple(sim.fw_comm), tuple(sim.bw_comm), sim.cost_ms,
                              dict(chosen[0].profile), prov))
    return out


def plan_compute_errors(compute: Any, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``plan_compute_<G>`` per device count G of the measured ``plan_compute:<G>`` rows
    (whole plans of held-out tasks; rows of plans skipped as infeasible are left out):
    :func:`~shardlab.costmodel.metrics.errors` of ``compute``'s predicted slowest-device fw + bw
    (ms) against the measured one (the median over the record's paired rounds), with ``tasks``
    and what the numbers cover."""
    out: dict[str, Any] = {}
    for g, rs in plan_compute_sets(rows).items():
        pred, meas = [], []
        for r in rs:
            shards = device_tables(Task.from_dict(r["task"]), Plan.from_dict(r["plan"]))
            busy = [k for k, s in enumerate(shards) if s]
            per = np.asarray(compute.predict([shards[k] for k in busy]), dtype=float).sum(axis=1)
            pred.append(float(per.max()))
            meas.append(float(np.median(r["rounds_cost_ms"])))
        out[f"plan_compute_{g}"] = {**errors(pred, meas), "tasks": len({r["task"]["name"] for r in rs}),
                                    "covers": "predicted vs measured slowest device's fused fw + bw (ms; median "
                                              "over paired rounds) of every method's plan of held-out tasks"}
    return out


def plan_compute_sets(rows: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """The measured ``plan_compute:<G>`` rows by device count G (ascending), leaving out the
    plans skipped as infeasible (no ``rounds_cost_ms``)."""
    by_g: dict[int, list[Mapping[str, Any]]] = {}
    for r in rows:
        if "rounds_cost_ms" in r:
            by_g.setdefault(int(r["ngpu"]), []).append(r)
    return dict(sorted(by_g.items()))
