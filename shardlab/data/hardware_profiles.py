"""Hardware profiles as data: one folder per profile, found in the shipped datasets folder and in a
user's folder, so that a profile of another machine needs no code edit.

A profile folder ``<dir>/<name>/`` holds :data:`FILE` (``hardware.json``) beside whatever was
measured and trained for the profile (``models/``, datasets, ``PROVENANCE.md``). Its fields:

- ``format`` (:data:`FORMAT`), ``name`` (the folder's name) and ``about`` (one line: the machine
  the profile stands for);
- how costs are measured there, the fields of :class:`HardwareProfile`: ``device``, ``batch_size``,
  ``weights_precision``, ``optimizer``, ``comm_backend``, ``threads``, ``warmup``, ``repeats``,
  ``input_batches``;
- ``search_model``: the bundle of ``models/`` that NeuroShard and the TorchRec perf estimator
  search with where no model is named (null: none; a method then needs its ``model``);
- ``split_guard_judges``: the bundles of ``models/`` NeuroShard's split guard asks beside the
  search's own model (may be empty);
- ``sitting_log_sd``: the between-sittings spread of a paired ratio measured there (log-sd,
  dimensionless; 0: unknown, measured intervals then cover the rounds' noise only);
- ``sources``: {field: where its value comes from}, for every figure that is not a setting;
- ``facts`` (optional): public or measured figures of the machine, each with its source under
  ``sources["facts.<key>"]`` (:data:`FACTS`: the GPU's name, HBM in GB and TB/s, GPUs per
  NVLink domain, the all-to-all bus bandwidths in GB/s inside a domain and between domains, the
  latency of one collective in µs);
- ``derive_from`` (optional): the profile whose fitted analytic model an **analytic profile** is
  derived from (nothing measured on its own hardware): ``shardlab hardware derive NAME`` writes its
  ``models/analytic`` from that profile's fit and these facts
  (:mod:`shardlab.workflows.hardware_derive`), labelled as derived in every source.

**Where.** The shipped profiles are the folders of the datasets folder
(:func:`~shardlab.data.tasks.datasets_dir`) holding ``hardware.json``; the environment variable
:data:`USER_DIR_ENV` names one more folder of profile folders. A name found in both is one line:
a user's profile never silently shadows a shipped one.

**Broken folders** are one line naming the file and the field, and change nothing: a missing or
unknown field, a value of the wrong type or range, a non-finite number, a ``name`` that is not the
folder's, a bundle its ``models/`` does not hold, a ``hardware.json`` or ``models`` that is a
symlink leading out of the folder.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from shardlab import constants as C
from shardlab.data.tasks import datasets_dir
from shardlab.errors import ShardlabError, check_fields, field_error
from shardlab.io import read_json

FILE = "hardware.json"
FORMAT = "shardlab-hardware-v1"
#: The environment variable naming a folder of the user's profile folders.
USER_DIR_ENV = "SHARDLAB_PROFILES"
#: The measuring settings of ``hardware.json`` (HardwareProfile's fields, ``name`` aside).
MEASURE_FIELDS = ("device", "batch_size", "weights_precision", "optimizer", "comm_backend", "threads", "warmup",
                  "repeats", "input_batches")
REQUIRED = ("format", "name", "about", "device", "batch_size", "search_model", "split_guard_judges",
            "sitting_log_sd", "sources")
FIELDS = REQUIRED + tuple(f for f in MEASURE_FIELDS if f not in REQUIRED) + ("facts", "derive_from")
#: The facts a profile may state, with the least each may be: (kind, minimum). Units: GB, TB/s
#: (1e12 bytes/s), GB/s (1e9 bytes/s), µs.
FACTS: dict[str, tuple[str, float]] = {"gpu": ("text", 0), "hbm_gb": ("number", 1e-9), "hbm_tbps": ("number", 1e-9),
                                       "gpus_per_domain": ("count", 1), "intra_gbps": ("number", 1e-9),
                                       "inter_gbps": ("number", 1e-9), "latency_us": ("number", 0)}


@dataclass(frozen=True)
class HardwareProfile:
    """How to measure. ``batch_size``: samples per timed batch; ``threads``: CPU threads for
    the kernels (1 is steadier than 2 on CPU); ``warmup`` / ``repeats``: untimed and timed runs
    (the median of ``repeats`` is the cost); ``input_batches``: distinct lookup batches rotated
    through the runs so caches do not flatter the result."""

    name: str
    device: str
    batch_size: int
    weights_precision: str = "fp32"
    optimizer: str = "exact_sgd"
    comm_backend: str = "gloo"
    threads: int = 1
    warmup: int = 5
    repeats: int = 10
    input_batches: int = 3

    def __post_init__(self) -> None:
        owner = f"hardware profile '{self.name}'"
        if self.device not in ("cpu", "cuda"):
            raise field_error(owner, "device", self.device, "must be 'cpu' or 'cuda'")
        if self.weights_precision not in C.BYTES_PER_WEIGHT:
            raise field_error(owner, "weights_precision", self.weights_precision,
                              f"must be one of {sorted(C.BYTES_PER_WEIGHT)}")
        if self.optimizer not in C.OPTIMIZERS:
            raise field_error(owner, "optimizer", self.optimizer, f"must be one of {list(C.OPTIMIZERS)}")
        if self.comm_backend not in ("gloo", "nccl"):
            raise field_error(owner, "comm_backend", self.comm_backend, "must be 'gloo' or 'nccl'")
        for key in ("batch_size", "threads", "repeats", "input_batches"):
            if getattr(self, key) < 1:
                raise field_error(owner, key, getattr(self, key), "must be >= 1")
        if self.warmup < 0:
            raise field_error(owner, "warmup", self.warmup, "must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stored with every sample."""
        return asdict(self)


@dataclass(frozen=True)
class ProfileFolder:
    """One hardware profile as read from its folder (module docstring): ``measure`` is its
    :class:`HardwareProfile`; ``folder`` where it lives."""

    name: str
    folder: Path
    about: str
    measure: Any
    search_model: str | None
    split_guard_judges: tuple[str, ...]
    sitting_log_sd: float
    sources: Mapping[str, str] = field(default_factory=dict)
    facts: Mapping[str, Any] = field(default_factory=dict)
    derive_from: str | None = None

    @property
    def derived(self) -> bool:
        """Whether it is an analytic profile: derived from another's fit and public figures."""
        return self.derive_from is not None

    @property
    def models_dir(self) -> Path:
        """The folder of the profile's trained bundles."""
        return self.folder / "models"


def profile_dirs() -> list[Path]:
    """The folders searched for profile folders: the shipped datasets folder, then the user's
    (:data:`USER_DIR_ENV`) when set."""
    out = [datasets_dir()]
    user = os.environ.get(USER_DIR_ENV, "").strip()
    if user:
        out.append(Path(user))
    return out


def _inside(path: Path, folder: Path, what: str, owner: str) -> None:
    """One line when ``path`` exists and resolves outside ``folder`` (a symlink out of it)."""
    if (path.exists() or path.is_symlink()) and not path.resolve().is_relative_to(folder.resolve()):
        raise ShardlabError(f"{owner}: field '{what}' is a symlink leading out of the profile folder")


def _number(owner: str, key: str, value: Any, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise ShardlabError(f"{owner}: field '{key}' = {value!r} must be a finite number >= {minimum:g}")
    return float(value)


def read_profile_folder(folder: Path) -> ProfileFolder:
    """The profile of ``folder`` (its ``hardware.json``), checked (module docstring)."""
    path = folder / FILE
    owner = f"hardware profile '{path}'"
    _inside(path, folder, FILE, owner)
    _inside(folder / "models", folder, "models", owner)
    d = read_json(path)
    if not isinstance(d, dict):
        raise ShardlabError(f"{owner}: must hold a JSON object")
    check_fields(d, "hardware profile", "name", REQUIRED, FIELDS)
    if d["format"] != FORMAT:
        raise ShardlabError(f"{owner}: field 'format' = {d['format']!r} must be '{FORMAT}'")
    if d["name"] != folder.name:
        raise ShardlabError(f"{owner}: field 'name' = {d['name']!r} must be its folder's name '{folder.name}'")
    if not isinstance(d["about"], str) or not d["about"].strip():
        raise ShardlabError(f"{owner}: field 'about' must be a non-empty string")
    model = d["search_model"]
    if model is not None and (not isinstance(model, str) or not model or Path(model).name != model):
        raise ShardlabError(f"{owner}: field 'search_model' = {model!r} must be a bundle name in models/ or null")
    judges = d["split_guard_judges"]
    if not isinstance(judges, list) or any(not isinstance(j, str) or not j or Path(j).name != j for j in judges):
        raise ShardlabError(f"{owner}: field 'split_guard_judges' must be a list of bundle names in models/")
    for key, names in (("search_model", [model] if model else []), ("split_guard_judges", judges)):
        for n in names:
            if not (folder / "models" / f"{n}.json").is_file():
                raise ShardlabError(f"{owner}: field '{key}' names bundle '{n}', which its models/ folder does not hold")
    sources = d["sources"]
    if not isinstance(sources, dict) or any(not isinstance(v, str) for v in sources.values()):
        raise ShardlabError(f"{owner}: field 'sources' must map fields to where their values come from")
    for key in MEASURE_FIELDS:
        if key in ("batch_size", "threads", "warmup", "repeats", "input_batches") and key in d:
            _number(owner, key, d[key], 0)
    facts = _facts(owner, d.get("facts", {}), sources)
    derive_from = d.get("derive_from")
    if derive_from is not None and (not isinstance(derive_from, str) or not derive_from or derive_from == folder.name):
        raise ShardlabError(f"{owner}: field 'derive_from' = {derive_from!r} must name another profile")
    settings = {k: d[k] for k in MEASURE_FIELDS if k in d}
    try:
        measure = HardwareProfile(name=folder.name, **settings)
    except (ShardlabError, TypeError) as e:
        raise ShardlabError(f"{owner}: {e}") from None
    return ProfileFolder(folder.name, folder, d["about"].strip(), measure, model, tuple(judges),
                         _number(owner, "sitting_log_sd", d["sitting_log_sd"], 0.0), dict(sources), facts, derive_from)


def _facts(owner: str, facts: Any, sources: Mapping[str, str]) -> dict[str, Any]:
    """``facts`` checked: known keys, values of their kind and range, each with its source."""
    if not isinstance(facts, dict):
        raise ShardlabError(f"{owner}: field 'facts' must be an object of {', '.join(FACTS)}")
    out: dict[str, Any] = {}
    for key, value in facts.items():
        if key not in FACTS:
            raise ShardlabError(f"{owner}: field 'facts.{key}' is unknown (known: {', '.join(FACTS)})")
        kind, least = FACTS[key]
        if kind == "text":
            if not isinstance(value, str) or not value.strip():
                raise ShardlabError(f"{owner}: field 'facts.{key}' must be a non-empty string")
            out[key] = value.strip()
            continue
        out[key] = _number(owner, f"facts.{key}", value, least)
        if kind == "count":
            if out[key] != int(out[key]):
                raise ShardlabError(f"{owner}: field 'facts.{key}' = {value!r} must be a whole number")
            out[key] = int(out[key])
        if not sources.get(f"facts.{key}", "").strip():
            raise ShardlabError(f"{owner}: field 'sources.facts.{key}' is missing: every figure says where it comes from")
    return out


_CACHE: dict[tuple, dict[str, ProfileFolder]] = {}


def known_profiles() -> dict[str, ProfileFolder]:
    """Every profile of :func:`profile_dirs`, by name (read again when a ``hardware.json``
    changes); one line for a broken folder or a name found twice."""
    found: list[tuple[Path, int]] = []
    for base in profile_dirs():
        if not base.is_dir():
            if base != datasets_dir():
                raise ShardlabError(f"{USER_DIR_ENV} = '{base}': no such folder")
            continue
        for sub in sorted(base.iterdir()):
            p = sub / FILE
            if sub.is_dir() and (p.exists() or p.is_symlink()):
                found.append((sub, p.lstat().st_mtime_ns))
    key = tuple((str(s), m) for s, m in found)
    if key not in _CACHE:
        out: dict[str, ProfileFolder] = {}
        for sub, _ in found:
            prof = read_profile_folder(sub)
            if prof.name in out:
                raise ShardlabError(f"hardware profile '{prof.name}' is in both '{out[prof.name].folder}' and "
                                    f"'{sub}': rename one (a user's profile never shadows a shipped one)")
            out[prof.name] = prof
        _CACHE.clear()
        _CACHE[key] = out
    return dict(_CACHE[key])


def profile_folder(name: str) -> ProfileFolder:
    """The profile called ``name`` (a :func:`~shardlab.measure.hardware.profile_with` name such as
    ``"cpu[batch_size=256]"`` reads its base profile); one line naming the known ones otherwise."""
    base = name.split("[", 1)[0]
    known = known_profiles()
    if base not in known:
        raise ShardlabError(f"hardware profile '{name}' is unknown (known: {', '.join(known)}; a profile is a "
                            f"folder holding {FILE}, shipped in datasets/ or in ${USER_DIR_ENV})")
    return known[base]
