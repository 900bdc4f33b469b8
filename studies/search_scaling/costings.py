#!/usr/bin/env python
"""The column-wise beam's costings, weighed on drawn tasks: the seed's search (``grid`` costing,
no polish), the same beam with its cheapest states polished (``grid`` + polish, the default) and
the ``moved`` costing (candidates placed from their parent's placement, ``search/column_beam.py``).

For each task (``shardlab tasks``-style draws from the pool's test split: tables, GPUs and
device GB drawn from the run's sizes, seeded; or the scaling study's fixed points) every configuration searches once
(``neuroshard[portfolio=[]]``, task calibration off, the default profile's model, model loaded
before the clock): the search's plan -- the split guard's choice -- and its predicted cost (ms,
``model:neuroshard`` of the profile, nothing measured), its splits and the search's seconds. A
configuration is *worse* on a task where its plan's predicted cost exceeds the seed search's
by more than 1e-9 ms. Writes ``results/costings-<UTC time>.jsonl`` line by line (a cut run keeps
what it did) and its report ``.md``. Timing: run it alone.

    .venv/bin/python studies/search_scaling/costings.py --tasks 40 --sizes small
    .venv/bin/python studies/search_scaling/costings.py --tasks 12 --sizes large
    .venv/bin/python studies/search_scaling/costings.py --sizes scale     # 100 x 8 ... 2,000 x 128
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["SHARDLAB_TASK_CALIBRATION"] = "off"       # before shardlab reads its constants

import numpy as np  # noqa: E402

from shardlab.data.tasks import generate_task  # noqa: E402
from shardlab.io import write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from shardlab.search.neuroshard import NeuroShardSharder  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: Configuration name -> NeuroShard options (the first is the reference: the seed's search).
CONFIGS = {"seed": {"beam_costing": "grid", "polish_moves": 0},
           "grid+polish": {"beam_costing": "grid"},
           "moved": {"beam_costing": "moved"}}
#: Size ranges drawn from: (tables lo, hi), GPU counts, device GB.
SIZES = {"small": ((8, 60), (2, 4, 8), (1.0, 4.0, 16.0, 80.0)),
         "large": ((100, 400), (8, 16, 32), (80.0,))}
#: ``--sizes scale``: the scaling study's points instead of draws (tables, GPUs; 80 GB, seed 0;
#: the pool's whole table list from 2,000 tables, as ``shardlab tasks --split all``).
SCALE = ((100, 8), (400, 32), (800, 64), (2000, 128))


def draw(rng: np.random.Generator, sizes: str, k: int) -> dict:
    if sizes == "scale":
        n, g = SCALE[k % len(SCALE)]
        return {"ntables": n, "ngpu": g, "mem_cap_gb": 80.0, "seed": 0, "split": "all" if n >= 2000 else "test"}
    (lo, hi), gpus, mems = SIZES[sizes]
    return {"ntables": int(rng.integers(lo, hi + 1)), "ngpu": int(rng.choice(gpus)),
            "mem_cap_gb": float(rng.choice(mems)), "seed": int(rng.integers(0, 10**6)), "split": "test"}


def one_task(spec: dict) -> dict:
    """Every configuration's search of one drawn task (module docstring)."""
    task = generate_task(**spec)
    row = {"task": task.name, **spec, "configs": {}}
    for name, opts in CONFIGS.items():
        s = NeuroShardSharder(portfolio=(), **opts)
        s.bundle()
        t0 = time.perf_counter()
        ranked = s._search(task)[0]
        chosen = ranked[0].state
        row["configs"][name] = {"predicted_ms": chosen.simulated.cost_ms, "splits": chosen.splits,
                                "seconds": round(time.perf_counter() - t0, 3),
                                "costs": f"model:{s.model_name()} ({s.profile}), predicted"}
    ref = row["configs"]["seed"]["predicted_ms"]
    for c in row["configs"].values():
        c["worse"] = c["predicted_ms"] > ref + 1e-9
    return row


def report(header: dict, rows: list[dict]) -> str:
    env = header["environment"]
    lines = [f"# Beam costings on {len(rows)} drawn tasks ({header['sizes']})", "",
             f"{env.get('hardware')}, git {env.get('git')}. Predicted ms under {rows[0]['configs']['seed']['costs'] if rows else '-'}; "
             "seconds: the search alone, model loaded first. Worse: predicted above the seed search's plan.", "",
             "| configuration | worse | better | equal | mean ratio to seed | median s | max s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in CONFIGS:
        c = [r["configs"][name] for r in rows]
        ratio = [x["predicted_ms"] / r["configs"]["seed"]["predicted_ms"] for x, r in zip(c, rows)]
        better = sum(x < 1 - 1e-12 for x in ratio)
        worse = sum(x["worse"] for x in c)
        lines.append(f"| {name} | {worse} | {better} | {len(c) - worse - better} | {np.mean(ratio):.4f} | "
                     f"{np.median([x['seconds'] for x in c]):.2f} | {max(x['seconds'] for x in c):.2f} |")
    lines += ["", "| task | tables x GPUs | GB | " + " | ".join(f"{n} ms (splits, s)" for n in CONFIGS) + " |",
              "| --- | --- | ---: | " + " | ".join("---:" for _ in CONFIGS) + " |"]
    for r in rows:
        cells = [f"{c['predicted_ms']:.4f} ({c['splits']}, {c['seconds']:.2f}){' worse' if c['worse'] else ''}"
                 for c in r["configs"].values()]
        lines.append(f"| {r['task']} | {r['ntables']} x {r['ngpu']} | {r['mem_cap_gb']:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines + [""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=40, help="tasks drawn")
    ap.add_argument("--sizes", choices=sorted(SIZES) + ["scale"], default="small")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    stem = RESULTS / f"costings-{args.sizes}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    header = {"sizes": args.sizes, "tasks": args.tasks, "seed": args.seed, "configs": CONFIGS,
              "environment": environment("cpu")}
    rows = []
    with open(stem.with_suffix(".jsonl"), "w") as f:
        f.write(json.dumps(header) + "\n")
        for k in range(len(SCALE) if args.sizes == "scale" else args.tasks):
            rows.append(one_task(draw(rng, args.sizes, k)))
            f.write(json.dumps(rows[-1]) + "\n")
            f.flush()
            print(rows[-1]["task"], {n: round(c["predicted_ms"], 4) for n, c in rows[-1]["configs"].items()}, flush=True)
    write_text_atomic(stem.with_suffix(".md"), report(header, rows))
    print(stem.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
