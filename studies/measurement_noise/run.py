#!/usr/bin/env python
"""Benchmark (not a test): how reproducible are paired measured comparisons on this machine?

For each task (from the shipped pool's held-out tables, from Criteo Kaggle's public table sizes,
and from tables that carry only the Task JSON fields, whose lookups are fitted), every plan is
compared with the reference plan (lookup_greedy) by ``MeasuredEvaluator`` in R paired rounds,
twice (two separate runs, different round orders). Per plan pair it records the ratio of each
run, its 95% CI, the verdicts, and, as the "before" figure, the ratio a single round gives
(round 0 of each run). With ``--ablate``, some tasks are also run with the comm ranks and the
compute process not pinned to cores. Every run's raw rounds land in ``runs/noise/*.json`` as it
finishes (resumable: finished runs are skipped); the summary goes to
``results/measurement_noise.{json,md}``.

    .venv/bin/python studies/measurement_noise/run.py [--rounds 8] [--ablate] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.data.importers import load_table_list  # noqa: E402
from shardlab.data.tasks import generate_task, pool_tables  # noqa: E402
from shardlab.evaluate import Evaluation, MeasuredEvaluator, compare_to_reference  # noqa: E402
from shardlab.evaluate.stats import bootstrap_median_ci, paired_ratios, relative_half_width  # noqa: E402
from shardlab.io import read_json, write_json_atomic  # noqa: E402
from shardlab.paths import safe_filename  # noqa: E402
from shardlab.measure.compute import measure_compute  # noqa: E402
from shardlab.measure.hardware import environment, get_profile, profile_with  # noqa: E402
from shardlab.search import get_sharder, run_sharder  # noqa: E402
from shardlab.tables import Table  # noqa: E402
from studies.common.methods import TABLE_WISE, respelled  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
REFERENCE = "lookup_greedy"
METHODS = ["lookup_greedy", "random", "size_greedy", "dim_greedy", "size_lookup_greedy", TABLE_WISE]
BATCH = 4096


def bare(t: Table) -> Table:
    """The table with only the Task JSON fields (no generator: its lookups get fitted)."""
    return Table(t.name, t.rows, t.dim, t.pooling_factor, t.reuse_bins)


def study_tasks(quick: bool) -> list:
    """(label, task) pairs: pool test tables, Criteo Kaggle sizes, bare tables with fitted lookups."""
    criteo = load_table_list(Path("datasets/criteo/criteo_kaggle_dac.json"), batch_size=BATCH, assume_zipf=1.05)
    bare_2022 = [bare(t) for t in pool_tables("dlrm-synth-2022", "test")]
    if quick:
        return [("pool-test 8x2", generate_task(ntables=8, ngpu=2, mem_cap_gb=0.25, batch_size=BATCH, seed=7))]
    return [
        ("pool-test 24x4", generate_task(ntables=24, ngpu=4, mem_cap_gb=0.5, batch_size=BATCH, seed=1001)),
        ("criteo-kaggle 26x4", generate_task(ntables=26, ngpu=4, mem_cap_gb=4.0, batch_size=BATCH, seed=0,
                                             dims=None, tables=criteo, name="criteo-kaggle-26x4")),
        ("bare-2022 24x8", generate_task(ntables=24, ngpu=8, mem_cap_gb=0.25, batch_size=BATCH, seed=2002,
                                         tables=bare_2022, name="bare-2022-24x8")),
        ("criteo-kaggle 26x8", generate_task(ntables=26, ngpu=8, mem_cap_gb=4.0, batch_size=BATCH, seed=0,
                                             dims=None, tables=criteo, name="criteo-kaggle-26x8")),
    ]


def run_once(task, plans, rounds: int, seed: int, pin: bool, path: Path, prof=None) -> dict:
    """One compare run (or the stored one, method keys read as specs): evaluations, warm-up
    costs, seconds per plan-round."""
    if path.exists():
        data = read_json(path)
        return {**data, "evaluations": respelled(data["evaluations"]), "warmup_ms": respelled(data["warmup_ms"])}
    ev = MeasuredEvaluator(prof or get_profile("cpu"), rounds=rounds, warmup_rounds=1, seed=seed, reference=REFERENCE,
                           pin=pin, progress=True)
    out = ev.evaluate(task, plans)
    items = len({n for _, n in ev.measured_})
    data = {"task": task.name, "ngpu": task.ngpu, "seed": seed, "pin": pin, "rounds": rounds,
            "seconds": ev.seconds_, "seconds_per_plan_round": ev.seconds_ / ((rounds + 1) * items),
            "warmup_ms": ev.warmup_ms_, "evaluations": {k: e.to_dict() for k, e in out.items()}}
    write_json_atomic(path, data)
    return data


def pair_rows(label: str, a: dict, b: dict) -> list[dict]:
    """Per plan (not the reference): both runs' ratios, CIs, verdicts, single-round ratios."""
    rows = []
    ea = {k: Evaluation.from_dict(v) for k, v in a["evaluations"].items()}
    eb = {k: Evaluation.from_dict(v) for k, v in b["evaluations"].items()}
    for k in ea:
        if k == REFERENCE:
            continue
        ca, cb = ea[k].comparison, eb[k].comparison
        single = [float(paired_ratios(e[k].rounds_ms[:1], e[REFERENCE].rounds_ms[:1])[0]) for e in (ea, eb)]
        rows.append({"task": label, "ngpu": a["ngpu"], "plan": k, "ratio": [ca.ratio, cb.ratio],
                     "ratio_ci95": [ca.ratio_ci95, cb.ratio_ci95], "verdict": [ca.verdict, cb.verdict],
                     "run_diff": abs(ca.ratio / cb.ratio - 1.0),
                     "half_width": [relative_half_width(ca.ratio_ci95, ca.ratio),
                                    relative_half_width(cb.ratio_ci95, cb.ratio)],
                     "single_round_ratio": single, "single_run_diff": abs(single[0] / single[1] - 1.0),
                     "cost_run_diff": abs(ea[k].cost_ms / eb[k].cost_ms - 1.0),
                     "half_width_by_rounds": half_width_by_rounds(ea[k], ea[REFERENCE])})
    return rows


def half_width_by_rounds(e: Evaluation, ref: Evaluation) -> dict[int, float]:
    """Relative CI half-width of the ratio using only the first k rounds, k = 3..R."""
    r = paired_ratios(e.rounds_ms, ref.rounds_ms)
    return {k: relative_half_width(bootstrap_median_ci(r[:k]), float(np.median(r[:k]))) for k in range(3, len(r) + 1)}


def summary(rows: list[dict]) -> dict:
    """p50/p90 of run-to-run ratio differences (rounds vs single round) and CI half-widths."""
    q = lambda xs, p: float(np.quantile(xs, p)) if xs else float("nan")  # noqa: E731
    diffs = [r["run_diff"] for r in rows]
    singles = [r["single_run_diff"] for r in rows]
    costs = [r["cost_run_diff"] for r in rows]
    hw = [h for r in rows for h in r["half_width"]]
    agree = float(np.mean([r["verdict"][0] == r["verdict"][1] for r in rows])) if rows else float("nan")
    return {"pairs": len(rows), "tasks": len({r["task"] for r in rows}),
            "ratio_run_diff_p50": q(diffs, 0.5), "ratio_run_diff_p90": q(diffs, 0.9),
            "single_round_ratio_run_diff_p50": q(singles, 0.5), "single_round_ratio_run_diff_p90": q(singles, 0.9),
            "median_cost_run_diff_p50": q(costs, 0.5), "median_cost_run_diff_p90": q(costs, 0.9),
            "ci_half_width_p50": q(hw, 0.5), "ci_half_width_p90": q(hw, 0.9),
            "ci_half_width_le_3pct": float(np.mean([h <= 0.03 for h in hw])) if hw else float("nan"),
            "verdicts_agree": agree}


def without_warmup(data: dict) -> dict:
    """The same run as if its warm-up round had been timed: rounds = warm-up + the first R-1."""
    evs = {}
    for k, d in data["evaluations"].items():
        e = Evaluation.from_dict(d)
        twin = next(j for j, x in data["evaluations"].items() if j in data["warmup_ms"]
                    and x["rounds_ms"] == d["rounds_ms"])       # an identical plan was measured once
        rounds = tuple(data["warmup_ms"][k if k in data["warmup_ms"] else twin][:1]) + e.rounds_ms[:-1]
        evs[k] = Evaluation(e.task, e.method, e.source, e.per_device, e.lower_bound_ms, rounds,
                            bootstrap_median_ci(rounds), sitting_log_sd=e.sitting_log_sd)
    evs = compare_to_reference(evs, REFERENCE)
    return {**data, "evaluations": {k: e.to_dict() for k, e in evs.items()}}


def markdown(report: dict) -> str:
    """The human-readable report."""
    s, env = report["summary"], report["environment"]
    lines = [f"# Measurement noise: paired rounds on this machine ({report['date']})", "",
             f"Machine: {env.get('hardware', '?')}; profile "
             f"`{report['profile']['name']}` (batch {BATCH}, median of {report['profile']['repeats']} runs "
             f"per op after {report['profile']['warmup']} warm-ups); {report['rounds']} timed rounds + 1 warm-up round per run; reference "
             f"`{REFERENCE}`; each plan pair compared in two separate runs. Generated by "
             "`studies/measurement_noise/run.py`; raw rounds in the JSON beside this file.", "",
             "| what | measured | target |", "|---|---|---|",
             f"| plan pairs / tasks | {s['pairs']} / {s['tasks']} | >= 20 / >= 4 |",
             f"| run-to-run difference of the paired ratio, p50 / p90 | {s['ratio_run_diff_p50']:.1%} / "
             f"{s['ratio_run_diff_p90']:.1%} | p90 <= 3% |",
             f"| ... of a single round's ratio (the old way), p50 / p90 | {s['single_round_ratio_run_diff_p50']:.1%} / "
             f"{s['single_round_ratio_run_diff_p90']:.1%} | |",
             f"| ... of a plan's median cost alone, p50 / p90 | {s['median_cost_run_diff_p50']:.1%} / "
             f"{s['median_cost_run_diff_p90']:.1%} | |",
             f"| 95% CI half-width of a ratio, p50 / p90 | {s['ci_half_width_p50']:.1%} / {s['ci_half_width_p90']:.1%} "
             f"| <= 3% with <= 10 rounds |",
             f"| share of ratios with half-width <= 3% | {s['ci_half_width_le_3pct']:.0%} | |",
             f"| both runs give the same verdict | {s['verdicts_agree']:.0%} | |", ""]
    lines += ["## Cost", "", "| task | G | seconds per plan per round | whole run (s) |", "|---|---|---|---|"]
    for c in report["cost"]:
        lines.append(f"| {c['task']} | {c['ngpu']} | {c['seconds_per_plan_round']:.1f} | {c['seconds']:.0f} |")
    lines += ["", "## Per task", "", "| task | plan | ratio run 1 [95% CI] | ratio run 2 [95% CI] | verdicts | "
              "run diff | single-round diff |", "|---|---|---|---|---|---|---|"]
    for r in report["pairs"]:
        ci = [f"{x:.3f} [{c[0]:.3f}, {c[1]:.3f}]" if c else f"{x:.3f}" for x, c in zip(r["ratio"], r["ratio_ci95"])]
        lines.append(f"| {r['task']} | {r['plan']} | {ci[0]} | {ci[1]} | {' / '.join(map(str, r['verdict']))} | "
                     f"{r['run_diff']:.1%} | {r['single_run_diff']:.1%} |")
    hw = {}
    for r in report["pairs"]:
        for k, v in r["half_width_by_rounds"].items():
            hw.setdefault(int(k), []).append(v)
    lines += ["", "## CI half-width against rounds used (median over pairs, run 1)", "",
              "| rounds | " + " | ".join(str(k) for k in sorted(hw)) + " |", "|---" * (len(hw) + 1) + "|",
              "| half-width | " + " | ".join(f"{np.median(hw[k]):.1%}" for k in sorted(hw)) + " |"]
    if report.get("ablations"):
        lines += ["", "## What each noise step bought (same tasks, same statistics)", "",
                  "| variant | pairs | ratio run diff p50 / p90 | CI half-width p50 / p90 |", "|---|---|---|---|"]
        for name, a in report["ablations"].items():
            if name == "lookups":
                continue
            lines.append(f"| {name} | {a['pairs']} | {a['ratio_run_diff_p50']:.1%} / {a['ratio_run_diff_p90']:.1%} | "
                         f"{a['ci_half_width_p50']:.1%} / {a['ci_half_width_p90']:.1%} |")
    lk = report.get("ablations", {}).get("lookups")
    if lk:
        lines += ["", f"Shared lookups: the same op timed interleaved on the same lookup batches differs by "
                  f"{np.expm1(lk['median_abs_log_ratio_same_lookups']):.1%} (median; p90 "
                  f"{np.expm1(lk['p90_abs_log_ratio_same_lookups']):.1%}), on other batches of the same tables by "
                  f"{np.expm1(lk['median_abs_log_ratio_other_lookups']):.1%} (p90 "
                  f"{np.expm1(lk['p90_abs_log_ratio_other_lookups']):.1%}); {lk['shards']} shards x {lk['reps']} "
                  "interleaved repetitions."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8, help="timed rounds per run (<= 10)")
    ap.add_argument("--ablate", action="store_true", help="also run the first and last task unpinned")
    ap.add_argument("--quick", action="store_true", help="one tiny task (checks the script, not the machine)")
    ap.add_argument("--lookups", action="store_true", help="also measure what shared lookups buy (~2 min)")
    ap.add_argument("--runs-dir", default="runs/noise")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per op (default: the cpu profile's 10)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up runs per op (default: the cpu profile's 5)")
    ap.add_argument("--only", default=None, help="comma-separated task indices to run (default all)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    runs = Path(args.runs_dir)
    runs.mkdir(parents=True, exist_ok=True)
    prof = profile_with("cpu", repeats=args.repeats, warmup=args.warmup)
    tag = "" if prof.name == "cpu" else "-" + prof.name.replace("[", "_").replace("]", "").replace(",", "_").replace("=", "")
    tasks = study_tasks(args.quick)
    if args.only:
        keep = {int(i) for i in args.only.split(",")}
        tasks = [t for i, t in enumerate(tasks) if i in keep]
    rows, cost, unpinned, pinned_subset, nowarm = [], [], [], [], []
    t0 = time.time()
    for i, (label, task) in enumerate(tasks):
        plans = {m: run_sharder(get_sharder(m), task) for m in METHODS}
        a, b = (run_once(task, plans, args.rounds, seed, True, runs / safe_filename(f"{task.name}-pin-seed{seed}{tag}", ".json"), prof)
                for seed in (1, 2))
        mine = pair_rows(label, a, b)
        rows += mine
        nowarm += pair_rows(label, without_warmup(a), without_warmup(b))
        cost += [{"task": label, "ngpu": task.ngpu, "seconds_per_plan_round": x["seconds_per_plan_round"],
                  "seconds": x["seconds"]} for x in (a, b)]
        if args.ablate and i in (0, len(tasks) - 1):
            c, d = (run_once(task, plans, args.rounds, seed, False, runs / safe_filename(f"{task.name}-nopin-seed{seed}{tag}", ".json"), prof)
                    for seed in (1, 2))
            unpinned += pair_rows(label, c, d)
            pinned_subset += mine
        print(f"{label}: done ({time.time() - t0:.0f} s so far)", flush=True)
    ablations = {"pinned, warm-up round (shipped)": summary(rows),
                 "pinned, no warm-up round (warm-up round timed)": summary(nowarm)}
    if unpinned:
        ablations["pinned, on the tasks run unpinned too"] = summary(pinned_subset)
        ablations["not pinned, warm-up round"] = summary(unpinned)
    if args.lookups:
        ablations["lookups"] = lookups_ablation(3 if args.quick else 12)
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "environment": environment("cpu"), "profile": prof.to_dict(), "rounds": args.rounds,
              "reference": REFERENCE, "summary": summary(rows), "cost": cost, "pairs": rows, "ablations": ablations}
    out = Path(args.out)
    name = ("measurement_noise_quick" if args.quick else "measurement_noise") + tag
    write_json_atomic(out / f"{name}.json", report)
    (out / f"{name}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def lookups_ablation(n_shards: int = 12, reps: int = 5, seed: int = 0) -> dict:
    """What measuring every plan on the same lookups buys: per random shard (2-10 pool test
    tables), the op is timed ``reps`` times on lookup batches 0-2 twice (A, A') and on batches
    3-5 (B), interleaved; returns the median |log ratio| of A/A' (same lookups) and A/B (other
    lookups) over shards -- the extra difference other lookups would add to a paired ratio."""
    prof = get_profile("cpu")
    rng = np.random.default_rng(seed)
    tables = pool_tables("dlrm-synth", "test")
    same, other = [], []
    for _ in range(n_shards):
        idx = rng.choice(len(tables), size=int(rng.integers(2, 11)), replace=False)
        shard = [tables[int(i)].with_dim(int(rng.choice([16, 32, 64]))) for i in idx]
        shard = [t for t in shard if t.rows * t.dim < 50_000_000] or shard[:1]
        a, a2, b = [], [], []
        for _ in range(reps):
            a.append(measure_compute(shard, prof).total_ms)
            b.append(measure_compute(shard, prof, first_batch=3).total_ms)
            a2.append(measure_compute(shard, prof).total_ms)
        same.append(abs(np.log(np.median(a) / np.median(a2))))
        other.append(abs(np.log(np.median(a) / np.median(b))))
    return {"shards": n_shards, "reps": reps, "median_abs_log_ratio_same_lookups": float(np.median(same)),
            "median_abs_log_ratio_other_lookups": float(np.median(other)),
            "p90_abs_log_ratio_same_lookups": float(np.quantile(same, 0.9)),
            "p90_abs_log_ratio_other_lookups": float(np.quantile(other, 0.9))}


if __name__ == "__main__":
    raise SystemExit(main())
