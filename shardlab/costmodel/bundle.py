"""A plan cost model: one compute model + one comm model, saved as a manifest JSON beside its
two model files, with provenance, held-out errors and a split calibration; loadable by path or,
for the shipped pre-trained models (``datasets/<profile>/models/``), by name.

**Split calibration**: how far a compute model under-predicts shards that hold a column slice.
A column split turns one table into two sub-tables that each do all of the table's lookups
over fewer columns; whether that pays depends on per-lookup overheads a model may have learned
poorly. :func:`calibrate_splits` measures it: over measured shards holding at least one column
slice (named with ``constants.COLUMN_SLICE_MARK``, as the broad campaign makes them) that the
model was *not* trained on, the ``quantile`` of log(measured / predicted) fw+bw ms. NeuroShard's
split guard multiplies the predicted compute of every device holding a split by
:attr:`SplitCalibration.factor` before it lets a column-wise plan beat its table-wise one. A
calibration is data about a bundle, kept in its manifest (``"calibration"``), with the data it
came from; a bundle without one is searched unguarded and its plans say so.

**Valid range** (:mod:`shardlab.costmodel.valid_range`): a fitted model's range, taken from its
training data, kept in the manifest (``"valid_range"``: ``compute``, ``comm``, the ``data`` it was
taken from and the ``fallback`` bundle, an analytic one fitted to measurements). A bundle with one
costs everything outside it with the fallback's models (``compute`` and ``comm`` are then the
guarded models; the plain ones are ``compute.model`` and ``comm.model``), and a plan or Evaluation
costed partly by the fallback says so.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from shardlab import constants as C
from shardlab.costmodel.base import CommModel, ComputeModel, Simulated, simulate
from shardlab.costmodel.metrics import errors
from shardlab.costmodel.model_checks import first_non_finite, in_one_line, smoke_prediction
from shardlab.costmodel.valid_range import CommRange, ComputeRange, GuardedComm, GuardedCompute, guard_compute
from shardlab.data.tasks import datasets_dir
from shardlab.errors import ShardlabError
from shardlab.io import read_json, write_json_atomic
from shardlab.paths import check_output_path
from shardlab.data.hardware_profiles import known_profiles
from shardlab.measure.records import CommRecord, ComputeRecord, as_comm_records, as_compute_records
from shardlab.tables import Table

MANIFEST_FORMAT = "shardlab-costmodel-v1"


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
        """Parse the manifest's ``calibration`` block; one-line error naming a bad field (an
        unknown one too)."""
        if not isinstance(d, Mapping):
            raise ShardlabError(f"split calibration: must be an object, got {type(d).__name__}")
        unknown = sorted(set(d) - {"log_margin", "quantile", "n", "median_log_ratio", "data"})
        if unknown:
            raise ShardlabError(f"split calibration: field '{unknown[0]}' is not a calibration field")
        try:
            out = cls(float(d["log_margin"]), float(d["quantile"]), int(d["n"]),
                      float(d["median_log_ratio"]), str(d["data"]))
        except KeyError as e:
            raise ShardlabError(f"split calibration: missing field '{e.args[0]}'") from None
        except (TypeError, ValueError):
            raise ShardlabError("split calibration: fields 'log_margin', 'quantile', 'n', "
                                "'median_log_ratio' must be numbers") from None
        if not 0.0 < out.quantile < 1.0 or not np.isfinite(out.log_margin) or not np.isfinite(out.median_log_ratio):
            raise ShardlabError(f"split calibration: field 'quantile' = {out.quantile} must be in (0, 1) "
                                "and 'log_margin', 'median_log_ratio' finite")
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


@dataclass
class CostModelBundle:
    """``compute`` + ``comm`` models; ``provenance`` says what data and command made them;
    ``heldout`` holds :func:`~shardlab.costmodel.metrics.errors` per target on test samples;
    ``calibration`` the :class:`SplitCalibration` (JSON form) of
    the compute model, or nothing; ``valid_range`` the models' valid range and fallback (JSON
    form, module docstring), or nothing: given, ``compute`` and ``comm`` are guarded by it."""

    compute: ComputeModel
    comm: CommModel
    provenance: dict[str, Any] = field(default_factory=dict)
    heldout: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    valid_range: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = field(default=None, repr=False)
    fallback_bundle: "CostModelBundle | None" = field(default=None, repr=False)
    _comm_by_g: dict[int, tuple[CommModel, str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.valid_range:
            return
        fallback = self.fallback()
        vr = self.valid_range
        if vr.get("compute") and not isinstance(self.compute, GuardedCompute):
            self.compute = guard_compute(self.compute, fallback.compute, ComputeRange.from_dict(vr["compute"]))
        if vr.get("comm") and not isinstance(self.comm, GuardedComm):
            self.comm = GuardedComm(self.comm, fallback.comm, CommRange.from_dict(vr["comm"]))

    def fallback(self) -> "CostModelBundle":
        """The analytic bundle that costs what lies outside the range: ``fallback_bundle`` (fitted
        with this one, not saved yet), else the one ``valid_range["fallback"]`` names: a manifest
        beside this one, or a shipped bundle of the compute model's profile; it must have no range
        of its own."""
        if self.fallback_bundle is not None:
            return self.fallback_bundle
        name = self.valid_range.get("fallback")
        if not isinstance(name, str) or not name:
            raise ShardlabError("cost model: field 'valid_range.fallback' must name an analytic bundle")
        beside = None if self.folder is None else self.folder / f"{name}.json"
        profile = plain_model(self.compute).profile_.get("name", "cpu")
        out = load_bundle(beside if beside is not None and beside.is_file() else name, profile)
        if out.valid_range:
            raise ShardlabError(f"cost model: field 'valid_range.fallback' = {name!r} has a valid range of its own; "
                                "a fallback must be analytic")
        return out

    @property
    def source(self) -> str:
        """Evaluation label (the compute model's; both models share the profile)."""
        return self.compute.source

    def comm_for(self, ngpu: int) -> tuple[CommModel, str]:
        """The comm model for ``ngpu`` devices and the label to add to ``source``: the bundle's
        own, or -- where it has none for that G (a neural comm model is trained per G) -- the
        shipped analytic comm model, labelled ``+analytic-comm``. A comm model that is not fitted to
        the compute model's data (``labelled_apart``: the GPU-cluster topology model) is named in
        the label, ``+comm:<its source>``."""
        if ngpu not in self._comm_by_g:
            try:
                self.comm.predict([[4] * ngpu])
                apart = getattr(self.comm, "labelled_apart", False)
                self._comm_by_g[ngpu] = (self.comm, f"+comm:{self.comm.source}" if apart else "")
            except ShardlabError:
                profile = getattr(self.compute, "profile_", {}).get("name", "cpu")
                self._comm_by_g[ngpu] = (load_bundle("analytic", profile).comm, "+analytic-comm")
        return self._comm_by_g[ngpu]

    def unguarded(self) -> "CostModelBundle":
        """The same models without their valid range: what they predict everywhere, alone."""
        return CostModelBundle(plain_model(self.compute), plain_model(self.comm), self.provenance, self.heldout, self.calibration)

    def split_calibration(self) -> SplitCalibration | None:
        """The compute model's split calibration, or None when the bundle has none."""
        return SplitCalibration.from_dict(self.calibration) if self.calibration else None

    def simulate(self, shards: Sequence[Sequence[Table]]) -> Simulated:
        """Predicted per-device costs of one plan (ms), with :meth:`comm_for` the plan's G."""
        return simulate(shards, self.compute, self.comm_for(len(shards))[0])

    def save(self, path: str | os.PathLike) -> None:
        """Write a manifest JSON at ``path`` (``<name>.json``) and the two model files beside it
        (``<name>.compute.<ext>``, ``<name>.comm.<ext>``), each atomically; a fallback fitted with
        it goes beside as ``<name>.fallback.json`` (and its parts), written first."""
        p = Path(path)
        for f in self.output_files(p):          # the whole set is checked before anything is written
            check_output_path(f)
        if self.fallback_bundle is not None:
            self.valid_range = {**self.valid_range, "fallback": _save_fallback(self.fallback_bundle, p)}
        parts = {}
        for role, model in (("compute", plain_model(self.compute)), ("comm", plain_model(self.comm))):
            name = _part_name(p, role, model)
            model.save(str(p.parent / name))
            parts[role] = {"file": name, "class": f"{type(model).__module__}.{type(model).__name__}"}
        write_json_atomic(p, {"format": MANIFEST_FORMAT, "source": self.source, "parts": parts,
                              "provenance": self.provenance, "heldout": self.heldout,
                              **({"calibration": self.calibration} if self.calibration else {}),
                              **({"valid_range": self.valid_range} if self.valid_range else {})})


    def output_files(self, path: str | os.PathLike) -> list[Path]:
        """Every file :meth:`save` at ``path`` writes: the fallback's (when there is one), the
        two model parts, then the manifest."""
        p = Path(path)
        out = [] if self.fallback_bundle is None else \
            self.fallback_bundle.output_files(p.parent / f"{p.stem}.fallback.json")
        out += [p.parent / _part_name(p, role, plain_model(m)) for role, m in (("compute", self.compute), ("comm", self.comm))]
        return out + [p]


def _part_name(manifest: Path, role: str, model: Any) -> str:
    """File name of a bundle's ``role`` part (``compute`` / ``comm``) beside ``manifest``."""
    ext = getattr(model, "file_ext", "json" if type(model).__module__.endswith("analytic") else "pt")
    return f"{manifest.stem}.{role}.{ext}"


def plain_model(model: Any) -> Any:
    """The model a guard wraps (the model itself where none does)."""
    return model.model if isinstance(model, (GuardedCompute, GuardedComm)) else model


def _save_fallback(fallback: CostModelBundle, manifest: Path) -> str:
    """Write ``fallback`` beside the manifest ``manifest`` as ``<name>.fallback.json`` (and its
    parts); returns the name ``valid_range["fallback"]`` gives it."""
    fallback.save(manifest.parent / f"{manifest.stem}.fallback.json")
    return f"{manifest.stem}.fallback"


def _read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest JSON at ``path``: an object of :data:`MANIFEST_FORMAT`, else one line."""
    d = read_json(path)
    if not isinstance(d, dict):
        raise ShardlabError(f"cost model '{path}': must be a JSON object (a manifest), got {type(d).__name__}")
    if d.get("format") != MANIFEST_FORMAT:
        raise ShardlabError(f"cost model '{path}': field 'format' must be '{MANIFEST_FORMAT}'")
    for key, kind, what in (("source", str, "a string"), ("provenance", dict, "an object")):
        if key in d and not isinstance(d[key], kind):
            raise ShardlabError(f"cost model '{path}': field '{key}' must be {what}, got {type(d[key]).__name__}")
    return d


def write_calibration(path: str | os.PathLike, calibration: Mapping[str, Any]) -> None:
    """Set the ``calibration`` block of the manifest at ``path`` (atomically; the model files
    are left as they are)."""
    write_json_atomic(path, {**_read_manifest(path), "calibration": dict(calibration)})


def write_valid_range(path: str | os.PathLike, bundle: CostModelBundle) -> None:
    """Give the manifest at ``path`` ``bundle``'s valid range and write its fallback beside it
    (``<name>.fallback.json``; module docstring); the model files are left as they are."""
    p = Path(path)
    d = _read_manifest(p)
    if bundle.fallback_bundle is None:
        raise ShardlabError(f"cost model '{path}': the bundle given has no fallback fitted with it")
    write_json_atomic(p, {**d, "valid_range": {**bundle.valid_range,
                                               "fallback": _save_fallback(bundle.fallback_bundle, p)}})


def heldout_errors(compute: ComputeModel, comm: CommModel, compute_test: Sequence[ComputeRecord | Mapping[str, Any]],
                   comm_test: Sequence[CommRecord | Mapping[str, Any]]) -> dict[str, Any]:
    """Errors (:func:`~shardlab.costmodel.metrics.errors`) on held-out samples: compute fw/bw/total,
    and comm fw/bw per G."""
    out: dict[str, Any] = {}
    cs = as_compute_records(compute_test, "held-out compute samples")
    ms = as_comm_records(comm_test, "held-out comm samples")
    if cs:
        p = compute.predict([s.tables for s in cs])
        out["compute_fw"] = errors(p[:, 0], [s.fw_ms for s in cs])
        out["compute_bw"] = errors(p[:, 1], [s.bw_ms for s in cs])
        out["compute_total"] = errors(p.sum(axis=1), [s.fw_ms + s.bw_ms for s in cs])
    for g in sorted({s.world_size for s in ms}):
        ss = [s for s in ms if s.world_size == g]
        preds = list(np.asarray(comm.predict([s.dim_sums for s in ss], [s.delays_ms for s in ss])))
        out[f"comm{g}_fw"] = errors(np.concatenate([q[:, 0] for q in preds]),
                                    np.concatenate([s.fw_comm_ms for s in ss]))
        out[f"comm{g}_bw"] = errors(np.concatenate([q[:, 1] for q in preds]),
                                    np.concatenate([s.bw_comm_ms for s in ss]))
    return out


def models_dir(profile: str = "cpu") -> Path:
    """Folder of the trained models of a hardware profile: ``models/`` in its profile folder
    (:mod:`shardlab.data.hardware_profiles`; datasets/<profile>/models for a shipped one, the
    user's folder for theirs); datasets/<name>/models for a name that is no profile."""
    known = known_profiles()
    base = profile.split("[", 1)[0]
    return known[base].models_dir if base in known else datasets_dir() / profile / "models"


def shipped_bundles(profile: str = "cpu") -> list[str]:
    """Names of the cost-model bundles shipped for ``profile``: the manifests in
    :func:`models_dir` (``<name>.json`` whose ``format`` is a bundle's; part files such as
    ``<name>.compute.json`` and stand-alone models such as a row-wise comm model are not)."""
    names = []
    for q in sorted(models_dir(profile).glob("*.json")):
        if "." in q.stem:
            continue
        try:
            d = read_json(q)
        except ShardlabError:
            continue
        if isinstance(d, dict) and d.get("format") == MANIFEST_FORMAT:
            names.append(q.stem)
    return names


def resolve_model_path(name_or_path: str | os.PathLike, profile: str = "cpu") -> Path:
    """A manifest path as given, or a shipped model's by name (e.g. ``"analytic"``)."""
    p = Path(name_or_path)
    if p.suffix == ".json" or p.exists():
        return p
    shipped = models_dir(profile) / f"{name_or_path}.json"
    if not shipped.exists():
        names = shipped_bundles(profile)
        raise ShardlabError(f"cost model '{name_or_path}': no such file or shipped model for profile "
                            f"'{profile}' (shipped: {', '.join(names) or 'none'})")
    return shipped


def load_bundle(name_or_path: str | os.PathLike, profile: str = "cpu") -> CostModelBundle:
    """Load a bundle from its manifest path, or a shipped one by name; its models carry the
    manifest's provenance and held-out errors (``provenance_``, ``metrics_``), not the copies
    saved inside their part files, which may predate a correction of the manifest."""
    p = resolve_model_path(name_or_path, profile)
    if not p.exists():
        raise ShardlabError(f"cost model '{p}': no such file")
    d = _read_manifest(p)
    models = []
    parts = d.get("parts")
    for role in ("compute", "comm"):
        part = parts.get(role) if isinstance(parts, dict) else None
        if not isinstance(part, dict) or not isinstance(part.get("class"), str) or not isinstance(part.get("file"), str):
            raise ShardlabError(f"cost model '{p}': field 'parts.{role}' must name a 'class' and a 'file'")
        module, _, cls_name = part["class"].rpartition(".")
        if not module.startswith("shardlab.costmodel."):
            raise ShardlabError(f"cost model '{p}': field 'parts.{role}.class' must be a shardlab.costmodel class")
        try:
            cls = getattr(importlib.import_module(module), cls_name)
        except (ImportError, AttributeError):
            raise ShardlabError(f"cost model '{p}': field 'parts.{role}.class' = {part['class']!r} is no "
                                "shardlab cost model class") from None
        if not hasattr(cls, "load"):
            raise ShardlabError(f"cost model '{p}': field 'parts.{role}.class' = {part['class']!r} is no "
                                "shardlab cost model class")
        if Path(part["file"]).name != part["file"] or part["file"] in ("", ".", ".."):
            raise ShardlabError(f"cost model '{p}': field 'parts.{role}.file' = {part['file']!r} must be a file "
                                "name beside the manifest (parts never come from another folder)")
        file = p.parent / part["file"]
        if not file.is_file():
            raise ShardlabError(f"cost model '{p}': field 'parts.{role}.file' = {part['file']!r}: no such file")
        model = in_one_line(lambda: cls.load(str(file)), f"cost model '{p}'",
                            f"field 'parts.{role}.file' = {part['file']!r} is not a valid {cls_name} file")
        bad = first_non_finite(model)
        if bad:
            raise ShardlabError(f"cost model '{p}': {role} part {part['file']!r}: learned value '{bad}' is not finite")
        models.append(model)
    for model in models if "provenance" in d else ():
        model.provenance_, model.metrics_ = d["provenance"], d.get("heldout", {})
    valid = d.get("valid_range") or {}
    if not isinstance(valid, dict):
        raise ShardlabError(f"cost model '{p}': field 'valid_range' must be an object")
    try:
        bundle = CostModelBundle(models[0], models[1], d.get("provenance", {}), d.get("heldout", {}),
                                 d.get("calibration") or {}, valid, p.parent)
        bundle.split_calibration()
    except ShardlabError as e:
        raise ShardlabError(f"cost model '{p}': {e}") from None
    smoke_prediction(bundle, p)
    return bundle
