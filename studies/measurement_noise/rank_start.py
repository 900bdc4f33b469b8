"""Do forked comm ranks time the all-to-all as spawned ones do?

A measured sitting's child of the sitting server forks its CPU comm ranks instead of spawning them
(``shardlab/measure/comm.py``): the same rank code, started in milliseconds instead of seconds.
This driver checks that the start method does not move the timings. Each pair is two fresh
processes, one per start method, in an order drawn per pair; each imports torch, starts a
``CommBench`` of G gloo ranks at the cpu profile's batch and measures the same all-to-all
patterns (forward + backward medians of the slowest rank, ms). Per pattern: the paired ratio
fork / spawn over the pairs, its 95% bootstrap interval and the verdict at the 5% margin.

Measurement, run it alone:

    .venv/bin/python studies/measurement_noise/rank_start.py --pairs 10

Writes ``results/rank_start-<UTC time>.{json,md}`` (a new file per run; none is overwritten).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shardlab.evaluate.stats import paired_ratio_ci, verdict  # noqa: E402
from shardlab.io import write_text_atomic  # noqa: E402
from shardlab.measure.hardware import environment, get_profile  # noqa: E402
from studies.common.records import fresh_process_row  # noqa: E402

#: (ranks, dim sums per rank): the all-to-alls timed, small to the cpu profile's largest G.
PATTERNS = [(2, [64, 64]), (2, [32, 256]), (4, [64, 64, 64, 64]), (4, [16, 128, 512, 64])]


def child(method: str, ranks: int, repeats: int, warmup: int) -> dict:
    """One fresh process's timings of the ``ranks``-rank patterns (one bench, started first: the
    process is clean when it forks): per pattern the slowest rank's forward + backward median
    (ms), and the bench's start (s)."""
    from shardlab.measure.comm import CommBench

    prof = get_profile("cpu")
    bench = CommBench(ranks, prof.batch_size, prof.comm_backend, "cpu", start_method=method)
    with bench:
        recs = bench.measure_many([(d, None, None) for g, d in PATTERNS if g == ranks], repeats=repeats,
                                  warmup=warmup)
    return {"method": method, "ranks": ranks, "startup_s": bench.startup_s,
            "ms": [max(f + b for f, b in zip(r.fw_comm_ms, r.bw_comm_ms)) for r in recs]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10, help="pairs of fresh processes (one spawn, one fork)")
    ap.add_argument("--repeats", type=int, default=20, help="timed exchanges per pattern and process")
    ap.add_argument("--warmup", type=int, default=5, help="untimed exchanges first")
    ap.add_argument("--seed", type=int, default=0, help="seed of the per-pair order")
    ap.add_argument("--out", default=str(HERE / "results"), help="folder of the reports")
    ap.add_argument("--child", choices=("spawn", "fork"), help=argparse.SUPPRESS)
    ap.add_argument("--ranks", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, a.ranks, a.repeats, a.warmup)))
        return 0
    rng = np.random.default_rng(a.seed)
    sizes = sorted({g for g, _ in PATTERNS})
    runs: list[dict] = []            # per pair and ranks count: {"order", "ranks", "spawn", "fork"}
    for p in range(a.pairs):
        for g in sizes:
            order = ["spawn", "fork"] if rng.random() < 0.5 else ["fork", "spawn"]
            pair = {}
            for m in order:
                got = fresh_process_row([sys.executable, __file__, "--child", m, "--ranks", str(g), "--repeats",
                                         str(a.repeats), "--warmup", str(a.warmup)], {}, 600.0)
                if "error" in got:
                    sys.exit(f"rank_start: the {m} process failed: {got['error']}")
                pair[m] = got
            runs.append({"order": order, "ranks": g, **pair})
        print(f"pair {p + 1}/{a.pairs} done", file=sys.stderr)
    rows = []
    for i, (g, dims) in enumerate(PATTERNS):
        k = [d for gg, d in PATTERNS if gg == g].index(dims)
        mine = [r for r in runs if r["ranks"] == g]
        fork, spawn = [r["fork"]["ms"][k] for r in mine], [r["spawn"]["ms"][k] for r in mine]
        centre, ci = paired_ratio_ci([fork], [spawn], seed=a.seed)
        rows.append({"ranks": g, "dim_sums": dims, "spawn_ms": float(np.median(spawn)),
                     "fork_ms": float(np.median(fork)), "ratio": centre, "ci": ci, "verdict": verdict(ci)})
    start = {m: {g: float(np.median([r[m]["startup_s"] for r in runs if r["ranks"] == g])) for g in sizes}
             for m in ("spawn", "fork")}
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    record = {"provenance": {**environment("cpu"), "pairs": a.pairs, "repeats": a.repeats, "warmup": a.warmup,
                             "seed": a.seed, "timing": "perf_counter per exchange in each rank; per pattern the "
                             "slowest rank's forward + backward median"},
              "patterns": rows, "startup_s_median": start, "runs": runs}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / f"rank_start-{stamp}.json", json.dumps(record, indent=1))
    lines = [f"# Forked against spawned comm ranks ({record['provenance']['hardware']}, {a.pairs} pairs of fresh "
             f"processes, {a.repeats} timed exchanges each)", "",
             "| ranks | dim sums | spawn ms | fork ms | fork / spawn [95%] | verdict (5% margin) |",
             "| ---: | --- | ---: | ---: | --- | --- |"]
    for r in rows:
        ci = f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" if r["ci"] else "-"
        lines.append(f"| {r['ranks']} | {r['dim_sums']} | {r['spawn_ms']:.3f} | {r['fork_ms']:.3f} | "
                     f"{r['ratio']:.3f} {ci} | {r['verdict']} |")
    lines += ["", "Bench start, median seconds: " + "; ".join(
        f"{m}: " + ", ".join(f"{g} ranks {s:.2f} s" for g, s in start[m].items()) for m in start)]
    write_text_atomic(out / f"rank_start-{stamp}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
