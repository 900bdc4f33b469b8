#!/usr/bin/env python
"""The sealed sets' manifests (``datasets/<folder>/manifest.json``): tasks drawn from one fixed seed
per set, each set declared once in :data:`SETS`.

    .venv/bin/python studies/sealed_test/draw.py                # check: the newest set re-derives from its seed
    .venv/bin/python studies/sealed_test/draw.py --set 1        # the same for the first set
    .venv/bin/python studies/sealed_test/draw.py --write        # write it (only for a NEW sealed set)

The draw of set ``s`` (:func:`draw_manifest`), in this order and nothing else: ``rng =
numpy.random.default_rng(s.seed)``; for each family of ``s.families`` in order,
``s.tasks_per_family`` tasks, each drawing

1. its seed: ``rng.integers(SEED_LOW, SEED_HIGH)`` (drawn again if an earlier task has it); the
   range starts far above every seed used so far (campaigns use 0 .. about 1100);
2. its GPU count: ``rng.choice(s.ngpu_choices)``;
3. its table count: ``rng.integers(min(ngpu + 1, T), T + 1)``, T the family's table count;

then ``s.union_tasks`` tasks over all of the set's families together
(:func:`~shardlab.data.model_families.union_task`: a seeded sample of the union's tables, and
copies beyond its size, each copy saying so), each drawing its seed as in 1. and its table count
``rng.integers(lo, hi + 1)`` for ``(lo, hi) = s.union_tables``, on ``s.union_ngpu`` GPUs.

Every task has ``mem_cap_gb`` = :data:`MEM_CAP_GB` and ``batch_size`` = :data:`BATCH_SIZE`; its
tables are the family's seeded sample (:func:`~shardlab.data.model_families.family_task` with
the task's seed, lookups an assumed Zipf(:data:`ASSUME_ZIPF`), rows not capped). The manifest
also records each family file's sha256, so an edit of a family after the draw is refused by the
driver (:func:`check_manifest`) and makes the manifest stop re-deriving.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.data.model_families import (SEALED2_DIR, SEALED2_FAMILY_SETS, SEALED_DIR,  # noqa: E402
                                          SEALED_FAMILY_SETS, family_path, family_set, family_task,
                                          union_task)
from shardlab.data.tasks import datasets_dir  # noqa: E402
from shardlab.errors import ShardlabError, check_fields, field_error  # noqa: E402
from shardlab.io import read_json, write_json_atomic  # noqa: E402
from shardlab.tables import Task  # noqa: E402


@dataclass(frozen=True)
class SealedSet:
    """One sealed set: every setting its draw depends on (module docstring), declared once."""

    name: str                       #: the set's name on the command line ("1", "2", ...)
    folder: str                     #: ``datasets/<folder>/`` holds its family files and manifest
    seed: int                       #: the draw's seed; a new set needs a new seed and new families
    families: tuple[str, ...]       #: its family sets, in draw order
    tasks_per_family: int           #: single-family tasks per family
    ngpu_choices: tuple[int, ...]   #: GPU counts (devices) a single-family task may draw
    union_tasks: int = 0            #: tasks over all its families together (union_task)
    union_ngpu: int = 0             #: GPU count (devices) of every union task
    union_tables: tuple[int, int] = (0, 0)  #: inclusive range of a union task's table count


#: The sealed sets, oldest first. Set 1 (drawn 2026-11-25) has been run and seen: its families and
#: datasets/heldout_scale are development data now. Set 2 was drawn 2026-11-28 and not run.
SETS = {
    "1": SealedSet("1", SEALED_DIR, 20261125, SEALED_FAMILY_SETS, tasks_per_family=6, ngpu_choices=(2, 4)),
    "2": SealedSet("2", SEALED2_DIR, 20261128, SEALED2_FAMILY_SETS, tasks_per_family=5, ngpu_choices=(2, 4, 8),
                   union_tasks=6, union_ngpu=8, union_tables=(40, 300)),
}

#: The set the one command runs by default: the newest.
NEWEST = list(SETS)[-1]

#: Task seeds are drawn from [SEED_LOW, SEED_HIGH): never used by any campaign so far.
SEED_LOW, SEED_HIGH = 1_000_000, 2**31 - 1

#: Memory cap of every sealed task (GB per device), as the development campaigns use.
MEM_CAP_GB = 4.0

#: Samples per step of every sealed task: the ``cpu`` profile's batch, fixed here so that the
#: draw does not change if a profile does. The driver builds and measures every task at it.
BATCH_SIZE = 4096

#: Assumed Zipf exponent of the lookups (dimensionless; the families publish no access statistics).
ASSUME_ZIPF = 1.05

#: ``family`` of a manifest entry that shards all of the set's families together (its
#: ``families`` field lists them).
UNION = "union"

MANIFEST_NAME = "manifest.json"
TASK_FIELDS = ("index", "family", "seed", "ntables", "ngpu", "mem_cap_gb", "batch_size")


def sealed_set(name: str) -> SealedSet:
    """The set called ``name``; one-line ShardlabError naming an unknown one."""
    if name not in SETS:
        raise ShardlabError(f"sealed test: field 'set' = '{name}' is not one of {', '.join(SETS)}")
    return SETS[name]


def manifest_path(name: str = NEWEST) -> Path:
    """``datasets/<folder>/manifest.json`` of set ``name`` (under ``$SHARDLAB_DATASETS`` when set)."""
    return datasets_dir() / sealed_set(name).folder / MANIFEST_NAME


def family_sha256(name: str) -> str:
    """sha256 (hex) of the family's JSON file, byte for byte."""
    return hashlib.sha256(family_path(name).read_bytes()).hexdigest()


def _task_seed(rng: np.random.Generator, taken: set[int]) -> int:
    seed = int(rng.integers(SEED_LOW, SEED_HIGH))
    while seed in taken:
        seed = int(rng.integers(SEED_LOW, SEED_HIGH))
    taken.add(seed)
    return seed


def draw_manifest(spec: SealedSet | None = None) -> dict[str, Any]:
    """The manifest of set ``spec`` (default: the newest) as the module docstring draws it:
    deterministic in the set's settings and its family files (table counts and sha256)."""
    spec = spec if spec is not None else SETS[NEWEST]
    rng = np.random.default_rng(spec.seed)
    fams, tasks, taken = [], [], set()
    fixed = {"mem_cap_gb": MEM_CAP_GB, "batch_size": BATCH_SIZE}
    for name in spec.families:
        data = family_set(name)
        total = len(data["tables"])
        fams.append({"name": name, "family": data["family"], "file": f"datasets/{spec.folder}/{name}.json",
                     "tables": total, "sha256": family_sha256(name)})
        for _ in range(spec.tasks_per_family):
            task_seed = _task_seed(rng, taken)
            ngpu = int(rng.choice(spec.ngpu_choices))
            ntables = int(rng.integers(min(ngpu + 1, total), total + 1))
            tasks.append({"index": len(tasks), "family": name, "seed": task_seed, "ntables": ntables,
                          "ngpu": ngpu, **fixed})
    for _ in range(spec.union_tasks):
        task_seed = _task_seed(rng, taken)
        ntables = int(rng.integers(spec.union_tables[0], spec.union_tables[1] + 1))
        tasks.append({"index": len(tasks), "family": UNION, "families": list(spec.families), "seed": task_seed,
                      "ntables": ntables, "ngpu": spec.union_ngpu, **fixed})
    union = ({"union_tasks": spec.union_tasks, "union_ngpu": spec.union_ngpu,
              "union_table_range": list(spec.union_tables)} if spec.union_tasks else {})
    return {"name": f"sealed-{spec.seed}", "seed": spec.seed, "draw": "studies/sealed_test/draw.py (draw_manifest)",
            "seed_range": [SEED_LOW, SEED_HIGH], "tasks_per_family": spec.tasks_per_family,
            "ngpu_choices": list(spec.ngpu_choices), **union, "assume_zipf": ASSUME_ZIPF, "max_rows": None,
            "families": fams, "tasks": tasks}


def load_manifest(path: str | Path | None = None) -> dict[str, Any]:
    """The manifest at ``path`` (default :func:`manifest_path`), its fields checked (one-line
    ShardlabError naming a missing or bad field)."""
    path = Path(path) if path is not None else manifest_path()
    if not path.is_file():
        raise ShardlabError(f"sealed manifest: file '{path.name}' is missing (draw it: "
                            f".venv/bin/python studies/sealed_test/draw.py --write)")
    data = read_json(path)
    check_fields(data, "sealed manifest", "name", ("seed", "families", "tasks", "assume_zipf", "max_rows"),
                 owner="sealed manifest")
    if not isinstance(data["families"], list) or not data["families"]:
        raise field_error("sealed manifest", "families", data["families"], "must be a non-empty list")
    if not isinstance(data["tasks"], list) or not data["tasks"]:
        raise field_error("sealed manifest", "tasks", data["tasks"], "must be a non-empty list")
    names = set()
    for fam in data["families"]:
        check_fields(fam, "sealed family", "name", ("name", "sha256"))
        names.add(fam["name"])
    for entry in data["tasks"]:
        owner = check_fields(entry, "sealed task", "index", TASK_FIELDS)
        if entry["family"] == UNION:
            fams = entry.get("families")
            if not isinstance(fams, list) or not fams or not set(fams) <= names:
                raise field_error(owner, "families", fams, "must list some of the manifest's families")
        elif entry["family"] not in names:
            raise field_error(owner, "family", entry["family"], "is not one of the manifest's families")
    return data


def check_manifest(manifest: Mapping[str, Any]) -> None:
    """Refuse (one-line ShardlabError naming 'sha256') a family file whose sha256 is not the one
    recorded at the draw: the sealed set is defined by the files as drawn."""
    for fam in manifest["families"]:
        now = family_sha256(fam["name"])
        if now != fam["sha256"]:
            raise ShardlabError(
                f"sealed family '{fam['name']}': field 'sha256' = '{now[:12]}...' of "
                f"{fam.get('file', fam['name'])} is not the manifest's '{str(fam['sha256'])[:12]}...': "
                f"the file changed after the draw; restore it, or draw a new sealed set (new seed, new families)")


def sealed_task(manifest: Mapping[str, Any], entry: Mapping[str, Any]) -> Task:
    """The task of manifest entry ``entry``: family ``entry['family']``'s seeded sample of
    ``ntables`` tables (for a :data:`UNION` entry, :func:`union_task` over ``entry['families']``)
    on ``ngpu`` devices of ``mem_cap_gb`` GB, ``batch_size`` samples per step."""
    if entry["family"] == UNION:
        return union_task(tuple(entry["families"]), int(entry["ngpu"]), float(entry["mem_cap_gb"]),
                          int(entry["ntables"]), int(entry["batch_size"]), seed=int(entry["seed"]),
                          assume_zipf=float(manifest["assume_zipf"]), max_rows=manifest["max_rows"])
    return family_task(entry["family"], int(entry["ngpu"]), float(entry["mem_cap_gb"]), int(entry["batch_size"]),
                       ntables=int(entry["ntables"]), seed=int(entry["seed"]),
                       assume_zipf=float(manifest["assume_zipf"]), max_rows=manifest["max_rows"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check (default) or write a sealed set's manifest.")
    ap.add_argument("--set", default=NEWEST, choices=list(SETS),
                    help=f"which sealed set (default: {NEWEST}, the newest)")
    ap.add_argument("--write", action="store_true",
                    help="write the manifest; refused when one exists and differs (a new set gets a new folder)")
    args = ap.parse_args(argv)
    spec = sealed_set(args.set)
    path = manifest_path(spec.name)
    try:
        drawn = draw_manifest(spec)
        if args.write:
            if path.exists() and read_json(path) != drawn:
                raise ShardlabError(f"sealed manifest: '{path.parent.name}/{path.name}' exists and differs from the "
                                    f"draw of seed {spec.seed}: a new sealed set is a new entry of SETS (new seed, "
                                    f"new families, new folder), never a rewrite of an old one")
            write_json_atomic(path, drawn)
            print(f"sealed manifest: {len(drawn['tasks'])} tasks of set {spec.name} (seed {spec.seed}) -> {path}")
            return 0
        stored = load_manifest(path)
        if stored != json.loads(json.dumps(drawn)):
            raise ShardlabError(f"sealed manifest: '{path.parent.name}/{path.name}' does not re-derive from seed "
                                f"{spec.seed} (a family file or the draw changed)")
        print(f"sealed manifest: set {spec.name} re-derives from seed {spec.seed} ({len(drawn['tasks'])} tasks)")
        return 0
    except ShardlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
