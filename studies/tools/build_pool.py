#!/usr/bin/env python
"""Build a shipped table pool from a generator preset, or re-fit a preset (``--calibrate``).

Build (writes <out>/pool.json.gz and <out>/PROVENANCE.md):
    .venv/bin/python studies/tools/build_pool.py --preset dlrm2021 --seed 0 --out datasets/dlrm_synth
    .venv/bin/python studies/tools/build_pool.py --preset dlrm2022 --seed 0 --out datasets/dlrm_synth_2022

Calibrate (prints fitted hyperparameters to copy into ``shardlab.data.presets.PRESETS``):
    .venv/bin/python studies/tools/build_pool.py --preset dlrm2021 --calibrate

Calibration minimises L1(accesses) + 0.5 L1(unique rows) + |log(unique fraction / target)| of
the semi-analytic expected aggregate (shardlab.data.calibration, no sampling) by Adam on a
differentiable torch twin of it, over the preset's free hyperparameters (calibration.FREE); the result is
re-scored with the numpy model, and the pool is then verified by real sampling (the numbers in
PROVENANCE.md come from the sampled lookups, not from the model).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import multiprocessing as mp
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.data import generator as G  # noqa: E402
from shardlab.data.calibration import FREE, calibrate, expected_aggregate  # noqa: E402
from shardlab.data.tasks import POOLS, split_indices  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402


def _one(args: tuple[str, dict[str, Any], int, int, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    name, prm, dim, batch_size, source = args
    t, s = G.table_from_params(name, prm, dim, batch_size, prm["index_seed"], source)
    return t.to_dict(), s


#: The files a pool's content depends on (a change there marks the revision "+uncommitted").
_SOURCES = ("shardlab/data/generator.py", "shardlab/data/presets.py", "shardlab/data/features.py",
            "shardlab/tables.py", "studies/tools/build_pool.py")


def _git_revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *_SOURCES], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def build(preset: str, seed: int, n_tables: int | None, out: Path, name: str, dim: int = 64,
          workers: int = 2) -> dict[str, Any]:
    """Generate a pool, write ``out/pool.json.gz`` and ``out/PROVENANCE.md``; return the data."""
    p = G.get_preset(preset)
    n = n_tables or p.n_tables
    t0 = time.time()
    params = G.draw_params(p, n, seed)
    source = G.pool_source(p, seed)
    jobs = [(f"t{i}", prm, dim, p.batch_size, source) for i, prm in enumerate(params)]
    # Largest tables first so that the two workers finish together; results are put back in order.
    order = sorted(range(n), key=lambda i: -params[i]["pooling"])
    results: list[Any] = [None] * n
    with tqdm(total=n, desc=name) as bar:
        if workers <= 1:
            it = map(_one, [jobs[i] for i in order])
            pool = None
        else:
            pool = mp.get_context("fork").Pool(workers)
            it = pool.imap(_one, [jobs[i] for i in order], chunksize=1)
        try:
            for i, res in zip(order, it):
                results[i] = res
                bar.update()
        finally:
            if pool is not None:
                pool.close()
                pool.join()
    tables = [r[0] for r in results]
    stats = [r[1] for r in results]
    agg = G.aggregate_histograms(stats)
    cmp = G.compare_to_target(agg, p)
    train, test = split_indices(n, seed)
    model = [G.compare_to_target(expected_aggregate(p, n, s), p)["l1_access"]
             for s in (seed, *range(100, 108))]
    data = {
        "format": "shardlab-table-pool/1", "name": name, "preset": p.name,
        "batch_size": p.batch_size, "n_tables": n,
        "provenance": {
            "generator": f"shardlab.data.generator ({G.MODEL})", "preset": p.name,
            "hyperparameters": p.hyperparameters(), "seed": seed, "dim": dim,
            "command": " ".join(shlex.quote(a) for a in ["python"] + sys.argv),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "numpy": np.__version__,
            "git_revision": _git_revision(), "machine": f"{platform.machine()} {platform.node()}"
                                                        f" ({os.cpu_count()} cpus)",
            "build_seconds": round(time.time() - t0, 1), "target": G.published_target(p),
            "model_expected_l1_access": {"this_seed": G._sig(model[0], 4),
                                         "other_seeds_mean": G._sig(np.mean(model[1:]), 4),
                                         "other_seeds_max": G._sig(max(model[1:]), 4)},
        },
        "aggregate": {k: ([G._sig(x) for x in v] if isinstance(v, list) else v)
                      for k, v in agg.items()} | {k: G._sig(v) for k, v in cmp.items()},
        "split": {"seed": seed, "method": "numpy default_rng([seed, 0x5917]).permutation; first "
                  "half train", "train": train, "test": test},
        "tables": tables, "stats": stats,
    }
    os.chmod(write_json_atomic(out / "pool.json.gz", data, indent=None), 0o644)
    (out / "PROVENANCE.md").write_text(provenance_md(data))
    return data


def provenance_md(data: dict[str, Any]) -> str:
    """The PROVENANCE.md text of a pool (command, versions, achieved vs published numbers)."""
    pv, agg, tgt = data["provenance"], data["aggregate"], data["provenance"]["target"]
    files = tgt["files"][0] + (f" ... (mean of {len(tgt['files'])} files)" if len(tgt["files"]) > 1
                               else "")
    me = pv["model_expected_l1_access"]
    pf = f"{agg['avg_pooling']:.4f} ({100 * agg['pooling_rel_err']:+.2f}%)"
    uf = f"{agg['unique_fraction']:.5f} ({100 * agg['unique_fraction_rel_err']:+.1f}%)"
    fmt = lambda v: "[" + ", ".join(f"{x:.3f}" for x in v) + "]"  # noqa: E731
    return f"""# Table pool `{data['name']}`

Synthetic DLRM-like embedding tables: {data['n_tables']} tables drawn from generator preset
`{pv['preset']}` ({pv['generator']}) with seed {pv['seed']}, dim {pv['dim']}, one batch of
{data['batch_size']} samples per table. No real data is in this file: every table stores its
generator parameters (`index_seed`, `distribution`) and its lookups are regenerated exactly by
`shardlab.data.generator.generate_lookups`. Per-table `stats` hold the measured counts.

Made by `{pv['command']}` on {pv['date']} ({pv['build_seconds']} s, {pv['machine']},
python {pv['python']}, numpy {pv['numpy']}, git {pv['git_revision']}).

Target: {files},
{tgt['source']}. The preset's hyperparameters (also in the file's `provenance`) were fitted by
`studies/tools/build_pool.py --preset {pv['preset']} --calibrate`: Adam on the semi-analytic expected
model, averaged over 8 pool-sized draws (seeds 0-7, so this pool's draw was part of the fit; the
"other seeds" check below was not).

| quantity | this pool (sampled) | published |
|---|---|---|
| L1 distance, accesses histogram | {agg['l1_access']:.4f} | 0 |
| L1 distance, unique-rows histogram | {agg['l1_unique']:.4f} | 0 |
| avg pooling factor | {pf} | {tgt['avg_pooling']} |
| unique fraction | {uf} | {tgt['unique_fraction']} |
| lookups / unique rows | {agg['n_lookups']} / {agg['n_unique']} | |

Accesses histogram, pool:      {fmt(agg['access_hist'])}
Accesses histogram, published: {fmt(tgt['access_hist'])}
Unique rows, pool:      {fmt(agg['unique_hist'])}
Unique rows, published: {fmt(tgt['unique_hist'])}

Model check (semi-analytic expectation, no sampling): accesses L1 {me['this_seed']} for this
draw; over pools of the same size drawn with 8 other seeds, {me['other_seeds_mean']} on average
and {me['other_seeds_max']} at most (how much a pool's numbers depend on its seed).

Train/test split: {len(data['split']['train'])} / {len(data['split']['test'])} tables by a
seeded permutation (seed {data['split']['seed']}), index lists stored in the file.
"""


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="dlrm2021", choices=sorted(G.PRESETS))
    ap.add_argument("--seed", type=int, default=0, help="pool seed (table draws and split)")
    ap.add_argument("--n-tables", type=int, default=None, help="default: the preset's count")
    ap.add_argument("--out", type=Path, help="output folder, e.g. datasets/dlrm_synth")
    ap.add_argument("--name", help="pool name (default: from shardlab.data.tasks.POOLS)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2, help="processes (at most 2 on CI)")
    ap.add_argument("--calibrate", action="store_true", help="fit the preset instead")
    ap.add_argument("--steps", type=int, default=300, help="calibration Adam steps")
    a = ap.parse_args(argv)
    if a.calibrate:
        fitted, loss = calibrate(a.preset, steps=a.steps)
        print("fitted", {k: round(getattr(fitted, k), 4) for k in FREE}, f"loss {loss:.4f}")
        for seed in (100, 101, 102, 103):
            agg = expected_aggregate(fitted, fitted.n_tables, seed)
            print(f"expected vs target (seed {seed}):", G.compare_to_target(agg, fitted))
        return 0
    if a.out is None:
        ap.error("--out is required to build a pool")
    name = a.name or next((k for k, v in POOLS.items() if v[0] == a.out.name), a.out.name)
    data = build(a.preset, a.seed, a.n_tables, a.out, name, a.dim, a.workers)
    agg = data["aggregate"]
    print(f"{name}: L1 accesses {agg['l1_access']:.4f}, L1 unique {agg['l1_unique']:.4f}, "
          f"pooling {agg['avg_pooling']:.3f}, unique fraction {agg['unique_fraction']:.4f}, "
          f"{data['provenance']['build_seconds']} s -> {a.out / 'pool.json.gz'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
