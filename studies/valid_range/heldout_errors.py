"""Recompute the held-out errors of every shipped cost-model bundle as users load it.

Each bundle of ``datasets/{cpu,h100}/models/`` is loaded the user's way (``load_bundle(name,
profile)``: a fitted model guarded by its valid range, its analytic fallback costing what lies
outside), and judged on the held-out splits (by key) of the shipped dataset its provenance names
(``data: "dataset:<name>"``) with the code ``shardlab train`` uses
(``shardlab.costmodel.train.heldout_of``). Only the manifest's ``heldout`` entries are rewritten,
with ``heldout.computed_by`` saying how and by which command; nothing is trained or measured,
the model files and every other field are left as they are. The splits are by key and the
models predict deterministically on a CPU, so a second run writes the same bytes. A bundle whose
split counts differ from its manifest's (the data changed since it was trained) is refused.
Run from the repository root (``--check``: write nothing, exit 1 where a manifest differs)::

    .venv/bin/python studies/valid_range/heldout_errors.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.costmodel.bundle import CostModelBundle, load_bundle, models_dir, shipped_bundles  # noqa: E402
from shardlab.costmodel.metrics import held_out_sets, split_samples  # noqa: E402
from shardlab.costmodel.train import (HELDOUT_BY, dreamshard_plan_sets, heldout_of, load_records,  # noqa: E402
                                      load_samples)
from shardlab.errors import ShardlabError  # noqa: E402
from shardlab.io import read_json, write_json_atomic  # noqa: E402
from shardlab.measure.store import current_dataset_name  # noqa: E402

PROFILES = ("cpu", "h100")
COMMAND = ".venv/bin/python studies/valid_range/heldout_errors.py"
#: The errors printed old -> new (fw + bw compute, per-rank comm, whole plans' compute).
SHOWN = ("compute_total", "compute_total_unseen_tables", "comm4_fw", "comm8_fw", "plans",
         "plans_composed", "plan_compute_4", "plan_compute_8")


def recompute(bundle: CostModelBundle, name: str, profile: str) -> dict[str, Any]:
    """The ``heldout`` block of the loaded ``bundle`` (shipped ``name`` of ``profile``) on the
    held-out splits of the dataset its provenance names, ``computed_by`` included."""
    prov = bundle.provenance
    data = str(prov.get("data", ""))
    if not data.startswith("dataset:"):
        raise ShardlabError(f"{profile}/{name}: provenance 'data' = {data!r} names no shipped dataset")
    recorded = data[len("dataset:"):]
    dataset = current_dataset_name(recorded)                 # recorded before a dataset moved: its name now
    cs = held_out_sets(load_records("compute", dataset=dataset))
    given = str(prov.get("comm", "")).startswith("given, not fitted")      # no comm measured: none judged
    ms = split_samples([] if given else load_records("comm", dataset=dataset))
    ps: dict[str, Any] = {}
    composed = False
    if prov.get("kind") == "dreamshard":
        plans = load_records("plan", dataset=dataset)
        composed = not plans
        ps = dreamshard_plan_sets(cs, plans, bundle.comm if given else None, int(prov.get("seed", 0)))
    out = heldout_of(bundle, cs, ms, ps, composed, load_samples("plan_compute", dataset=dataset, required=False))
    out["computed_by"] = (f"{COMMAND}: load_bundle({name!r}, {profile!r}) on the held-out splits of "
                          f"dataset:{recorded}, through {HELDOUT_BY}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 where a manifest differs")
    args = ap.parse_args(argv)
    differ = 0
    for profile in PROFILES:
        for name in shipped_bundles(profile):
            path = models_dir(profile) / f"{name}.json"
            manifest = read_json(path)
            old = manifest.get("heldout", {})
            new = recompute(load_bundle(name, profile), name, profile)
            if old.get("split") != new["split"]:
                raise ShardlabError(f"{profile}/{name}: the held-out split is not the one it was trained with "
                                    f"({old.get('split')} vs {new['split']}): refused")
            merged = {**old, **new}
            shown = "; ".join(f"{k} {old[k]['mape']:.3f} -> {new[k]['mape']:.3f}" for k in SHOWN
                              if k in new and "mape" in new[k] and "mape" in old.get(k, {}))
            print(f"{profile}/{name}: MAPE {shown}")
            if merged != old:
                differ += 1
                if not args.check:
                    write_json_atomic(path, {**manifest, "heldout": merged})
    print(f"{differ} manifest(s) {'differ' if args.check else 'rewritten'}")
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
