#!/usr/bin/env python
"""The sealed set's manifest (``datasets/sealed/manifest.json``): tasks drawn from one fixed seed.

    .venv/bin/python studies/sealed_test/draw.py            # check: the manifest re-derives from the seed
    .venv/bin/python studies/sealed_test/draw.py --write    # write it (only for a NEW sealed set)

The draw (:func:`draw_manifest`), in this order and nothing else: ``rng =
numpy.random.default_rng(SEALED_SEED)``; for each family of
:data:`~shardlab.data.model_families.SEALED_FAMILY_SETS` in order, :data:`TASKS_PER_FAMILY`
tasks, each drawing

1. its seed: ``rng.integers(SEED_LOW, SEED_HIGH)`` (drawn again if an earlier task has it); the
   range starts far above every seed used so far (campaigns use 0 .. about 1100);
2. its GPU count: ``rng.choice(NGPU_CHOICES)``;
3. its table count: ``rng.integers(min(ngpu + 1, T), T + 1)``, T the family's table count.

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
from pathlib import Path
from typing import Any, Mapping

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.data.model_families import (SEALED_DIR, SEALED_FAMILY_SETS, family_path,  # noqa: E402
                                          family_set, family_task)
from shardlab.data.tasks import datasets_dir  # noqa: E402
from shardlab.errors import ShardlabError, check_fields, field_error  # noqa: E402
from shardlab.io import read_json, write_json_atomic  # noqa: E402
from shardlab.tables import Task  # noqa: E402

#: The seed of the sealed set's draw. A new sealed set needs a new seed (and new families).
SEALED_SEED = 20261125

#: Task seeds are drawn from [SEED_LOW, SEED_HIGH): never used by any campaign so far.
SEED_LOW, SEED_HIGH = 1_000_000, 2**31 - 1

#: Tasks drawn per sealed family.
TASKS_PER_FAMILY = 6

#: GPU counts a task may draw (devices; measured as that many ranks on this machine).
NGPU_CHOICES = (2, 4)

#: Memory cap of every sealed task (GB per device), as the development campaigns use.
MEM_CAP_GB = 4.0

#: Samples per step of every sealed task: the ``cpu`` profile's batch, fixed here so that the
#: draw does not change if a profile does. The driver builds and measures every task at it.
BATCH_SIZE = 4096

#: Assumed Zipf exponent of the lookups (dimensionless; the families publish no access statistics).
ASSUME_ZIPF = 1.05

MANIFEST_NAME = "manifest.json"
TASK_FIELDS = ("index", "family", "seed", "ntables", "ngpu", "mem_cap_gb", "batch_size")


def manifest_path() -> Path:
    """``datasets/sealed/manifest.json`` (under ``$SHARDLAB_DATASETS`` when set)."""
    return datasets_dir() / SEALED_DIR / MANIFEST_NAME


def family_sha256(name: str) -> str:
    """sha256 (hex) of the family's JSON file, byte for byte."""
    return hashlib.sha256(family_path(name).read_bytes()).hexdigest()


def draw_manifest(seed: int = SEALED_SEED, families: tuple[str, ...] = SEALED_FAMILY_SETS,
                  tasks_per_family: int = TASKS_PER_FAMILY) -> dict[str, Any]:
    """The manifest the draw of the module docstring gives: deterministic in ``seed`` and the
    family files (their table counts and sha256)."""
    rng = np.random.default_rng(seed)
    fams, tasks, taken = [], [], set()
    for name in families:
        data = family_set(name)
        total = len(data["tables"])
        fams.append({"name": name, "family": data["family"], "file": f"datasets/{SEALED_DIR}/{name}.json",
                     "tables": total, "sha256": family_sha256(name)})
        for _ in range(tasks_per_family):
            task_seed = int(rng.integers(SEED_LOW, SEED_HIGH))
            while task_seed in taken:
                task_seed = int(rng.integers(SEED_LOW, SEED_HIGH))
            taken.add(task_seed)
            ngpu = int(rng.choice(NGPU_CHOICES))
            ntables = int(rng.integers(min(ngpu + 1, total), total + 1))
            tasks.append({"index": len(tasks), "family": name, "seed": task_seed, "ntables": ntables,
                          "ngpu": ngpu, "mem_cap_gb": MEM_CAP_GB, "batch_size": BATCH_SIZE})
    return {"name": f"sealed-{seed}", "seed": seed, "draw": "studies/sealed_test/draw.py (draw_manifest)",
            "seed_range": [SEED_LOW, SEED_HIGH], "tasks_per_family": tasks_per_family,
            "ngpu_choices": list(NGPU_CHOICES), "assume_zipf": ASSUME_ZIPF, "max_rows": None,
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
        if entry["family"] not in names:
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
                f"datasets/{SEALED_DIR}/{fam['name']}.json is not the manifest's '{str(fam['sha256'])[:12]}...': "
                f"the file changed after the draw; restore it, or draw a new sealed set (new seed, new families)")


def sealed_task(manifest: Mapping[str, Any], entry: Mapping[str, Any]) -> Task:
    """The task of manifest entry ``entry``: family ``entry['family']``'s seeded sample of
    ``ntables`` tables on ``ngpu`` devices of ``mem_cap_gb`` GB, ``batch_size`` samples per step."""
    return family_task(entry["family"], int(entry["ngpu"]), float(entry["mem_cap_gb"]), int(entry["batch_size"]),
                       ntables=int(entry["ntables"]), seed=int(entry["seed"]),
                       assume_zipf=float(manifest["assume_zipf"]), max_rows=manifest["max_rows"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check (default) or write the sealed set's manifest.")
    ap.add_argument("--write", action="store_true",
                    help="write the manifest; refused when one exists and differs (keep it, under another name, first)")
    args = ap.parse_args(argv)
    path = manifest_path()
    try:
        drawn = draw_manifest()
        if args.write:
            if path.exists() and read_json(path) != drawn:
                raise ShardlabError(f"sealed manifest: '{path.name}' exists and differs from the draw of seed "
                                    f"{SEALED_SEED}: keep it (rename it manifest-<its seed>.json) before "
                                    f"writing a new one")
            write_json_atomic(path, drawn)
            print(f"sealed manifest: {len(drawn['tasks'])} tasks of seed {SEALED_SEED} -> {path}")
            return 0
        stored = load_manifest(path)
        if stored != json.loads(json.dumps(drawn)):
            raise ShardlabError(f"sealed manifest: '{path.name}' does not re-derive from seed {SEALED_SEED} "
                                f"(a family file or the draw changed)")
        print(f"sealed manifest: re-derives from seed {SEALED_SEED} ({len(drawn['tasks'])} tasks)")
        return 0
    except ShardlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
