#!/usr/bin/env python
"""Fidelity table: each claim the seeds make about DreamShard and AutoShard, against
what was measured here -- paired measured verdicts on held-out pool tasks (tables of the pool's
test half; the policies trained on tasks of its train half, 10-60 tables, 4 and 8 GPUs), the
inference benchmark and the cost-model report. ``--previous`` adds the same tallies for an
earlier campaign (earlier policies on the same tasks) as a before/after section. Reads shipped
data only; writes results/rl_fidelity.{json,md}.

    .venv/bin/python studies/rl_policies/fidelity.py --dataset cpu_rl_pool2/g4+cpu_rl_pool2/g8 \
        --previous cpu_rl_pool/g4+cpu_rl_pool/g8+cpu_rl_pool/g6
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab import constants as C  # noqa: E402
from shardlab.evaluate import VERDICTS, Evaluation, compare_to_reference  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402
from studies.common.heldout import heldout_samples  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
ROOT = HERE.parents[1]

POLICIES = ("dreamshard", "autoshard")
TRAINED_TABLES, TRAINED_GPUS = (10, 60), (4, 8)
TARGET_FASTER = 0.6          # target: significantly faster than lookup_greedy on >= 60% of tasks


def shown(path: str) -> str:
    """``path`` as the report names it: relative to the repository root when inside it."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else path


def task_rows(samples: list[dict]) -> list[dict]:
    """Per task and policy: verdict and ratio against lookup_greedy and the best baseline, and
    whether it is slower than any heuristic; a policy that found no plan is 'infeasible'."""
    rows = []
    for s in samples:
        evs = {m: Evaluation.from_dict(e) for m, e in s["evaluations"].items()}
        row = {"task": s["task"]["name"], "tables": len(s["task"]["tables"]), "gpus": s["task"]["ngpu"], "policies": {}}
        best = compare_to_reference(evs, None)
        lookup = compare_to_reference(evs, "lookup_greedy") if "lookup_greedy" in evs else None
        for m in POLICIES:
            if m not in evs:
                row["policies"][m] = {"infeasible": m in s.get("skipped", [])}
                continue
            heur = [h for h in C.HEURISTIC_METHODS if h in evs]
            said = {h: compare_to_reference(evs, h)[m].comparison.verdict for h in heur}
            slower = [h for h, v in said.items() if v == "slower"]
            row["policies"][m] = {
                "vs_lookup": None if lookup is None else {"ratio": lookup[m].comparison.ratio,
                                                          "verdict": lookup[m].comparison.verdict},
                "vs_best": {"reference": best[m].comparison.reference, "ratio": best[m].comparison.ratio,
                            "verdict": best[m].comparison.verdict},
                "slower_than": slower,
                "not_faster_or_equivalent": [h for h, v in said.items() if v not in ("faster", "equivalent")]}
        rows.append(row)
    return rows


def tally(rows: list[dict], m: str, keep=lambda r: True) -> dict:
    """Counts of one policy's verdicts over the rows ``keep`` selects."""
    got = [r["policies"][m] for r in rows if keep(r) and m in r["policies"]]
    ok = [p for p in got if "vs_best" in p]
    count = lambda key, v: sum(p[key]["verdict"] == v for p in ok if p[key])  # noqa: E731
    return {"tasks": len(got), "infeasible": sum(p.get("infeasible", False) for p in got),
            **{f"lookup_{v}": count("vs_lookup", v) for v in VERDICTS},
            **{f"best_{v}": count("vs_best", v) for v in VERDICTS},
            "faster_or_equivalent_to_every_heuristic": sum(not p["not_faster_or_equivalent"] for p in ok),
            "best_ratio_vs_best": min((p["vs_best"]["ratio"] for p in ok), default=float("nan")),
            "median_ratio_vs_lookup": float(np.median([p["vs_lookup"]["ratio"] for p in ok if p["vs_lookup"]]))
            if ok else float("nan")}


def tallies_of(rows: list[dict]) -> dict:
    """Each policy's tallies: all tasks, per trained device count, unseen table and device counts."""
    unseen_count = lambda r: not TRAINED_TABLES[0] <= r["tables"] <= TRAINED_TABLES[1]  # noqa: E731
    unseen_gpus = lambda r: r["gpus"] not in TRAINED_GPUS  # noqa: E731
    return {m: {"all": tally(rows, m), "g4": tally(rows, m, lambda r: r["gpus"] == 4),
                "g8": tally(rows, m, lambda r: r["gpus"] == 8),
                "unseen_table_counts": tally(rows, m, unseen_count),
                "unseen_gpu_counts": tally(rows, m, unseen_gpus)} for m in POLICIES}


def per_gpus(t: dict) -> str:
    """'significantly faster than lookup_greedy at 4 GPUs a/b, at 8 GPUs c/d' against the target."""
    parts = [f"at {g} GPUs {t[f'g{g}']['lookup_faster']}/{t[f'g{g}']['tasks']}" for g in TRAINED_GPUS
             if t[f"g{g}"]["tasks"]]
    return (f"significantly faster than lookup_greedy {', '.join(parts)} (target {TARGET_FASTER:.0%} at each)"
            if parts else "")


def describe(t: dict) -> str:
    """One cell: verdicts against lookup-greedy and the best baseline."""
    if not t["tasks"]:
        return "not measured"
    return (f"{t['tasks']} tasks: vs lookup_greedy {t['lookup_faster']} faster / {t['lookup_equivalent']} equivalent / "
            f"{t['lookup_inconclusive']} inconclusive / {t['lookup_slower']} slower (median ratio "
            f"{t['median_ratio_vs_lookup']:.3f}); vs the best baseline {t['best_faster']} / {t['best_equivalent']} / "
            f"{t['best_inconclusive']} / {t['best_slower']}; infeasible {t['infeasible']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True, help="held-out pool campaigns, '+'-joined dataset names")
    ap.add_argument("--previous", default=None, help="an earlier campaign on the same tasks ('+'-joined): before/after")
    ap.add_argument("--inference", default=str(RESULTS / "rl_inference.json"))
    ap.add_argument("--cost-models", default=str(HERE.parent / "cost_models" / "results" / "cost_models.json"))
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    samples = [s for d in args.dataset.split("+") for s in heldout_samples(d)]
    rows = task_rows(samples)
    tallies = tallies_of(rows)
    previous = (tallies_of(task_rows([s for d in args.previous.split("+") for s in heldout_samples(d)]))
                if args.previous else None)
    inference = json.loads(Path(args.inference).read_text()) if Path(args.inference).exists() else None
    cost = json.loads(Path(args.cost_models).read_text())
    unseen = cost["compute"]["unseen_tables"]["models"]
    mape = {m: unseen[m]["mape"] for m in ("dreamshard", "neuroshard_broad", "neuroshard") if m in unseen}
    big = {r["method"]: r["median_s"] for r in (inference or {}).get("rows", []) if (r["tables"], r["gpus"]) == (500, 16)}

    claims = []
    for m, name in (("dreamshard", "DreamShard"), ("autoshard", "AutoShard")):
        t = tallies[m]
        faster = t["all"]["lookup_faster"] / max(1, t["all"]["tasks"])
        claims.append((name, "beats the heuristics" + (" (up to 19% faster than the strongest baseline)"
                                                       if m == "dreamshard" else ""),
                       describe(t["all"]) + f"; best ratio to the best baseline {t['all']['best_ratio_vs_best']:.3f}; "
                       f"significantly faster than lookup_greedy on {faster:.0%}; {per_gpus(t)}"))
        claims.append((name, "transfers to unseen tables without fine-tuning", "every task above uses unseen tables"))
        claims.append((name, f"transfers to unseen table counts (trained on {TRAINED_TABLES[0]}-{TRAINED_TABLES[1]})",
                       describe(t["unseen_table_counts"])))
        if m == "dreamshard":
            claims.append((name, "transfers to unseen device counts (trained on 4 and 8)", describe(t["unseen_gpu_counts"])))
            ratio = mape.get("dreamshard", float("nan")) / mape.get("neuroshard_broad", float("nan"))
            claims.append((name, "a cost network predicts fused-op costs (target: within 1.5x of NeuroShard's MAPE)",
                           f"compute MAPE on the pool's unseen tables {mape.get('dreamshard', float('nan')):.3f} against "
                           f"neuroshard_broad's {mape.get('neuroshard_broad', float('nan')):.3f}: x{ratio:.2f}"))
        else:
            claims.append((name, "shards hundreds of tables in seconds (target: 500 x 16 in <= 2 s)",
                           f"500 tables x 16 GPUs: {big['autoshard']:.2f} s" if "autoshard" in big else "not benchmarked"))
    if "dreamshard" in big:
        claims.append(("DreamShard", "inference speed (target: 500 x 16 in <= 2 s)", f"{big['dreamshard']:.2f} s"))

    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "datasets": args.dataset,
              "tallies": tallies, "previous": {"datasets": args.previous, "tallies": previous}, "tasks": rows, "claims": [{"method": a, "claim": b, "measured": c} for a, b, c in claims]}
    out = Path(args.out)
    write_json_atomic(out / "rl_fidelity.json", report)
    lines = ["# DreamShard and AutoShard: the seeds' claims, measured here (`studies/rl_policies/fidelity.py`)", "",
             f"Made {report['date']} from `{args.dataset}` (each held-out pool task's plans measured together in "
             "paired, interleaved rounds: fused fbgemm ops, gloo all-to-alls; verdicts from the 95% interval of the "
             "paired ratio: faster or slower when it excludes 1, equivalent when it contains 1 and lies inside "
             f"[1/1.05, 1.05], else inconclusive), `{shown(args.inference)}` and `{shown(args.cost_models)}`.", "",
             "| method | claim | measured here |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in claims]
    if previous:
        lines += ["", f"## Before and after (earlier policies: `{args.previous}`)", "",
                  "| policy | tasks | campaign | measured |", "|---|---|---|---|"]
        for m in POLICIES:
            for key, label in (("all", "all"), ("g4", "4 GPUs"), ("g8", "8 GPUs"), ("unseen_gpu_counts", "other G")):
                for name, t in (("earlier", previous[m][key]), ("this", tallies[m][key])):
                    if t["tasks"]:
                        lines.append(f"| {m} | {label} | {name} | {describe(t)} |")
    lines += ["", "## Per task", "", "| task | tables x GPUs | " + " | ".join(
        f"{m} vs lookup_greedy | {m} vs best" for m in POLICIES) + " |", "|---|---|" + "---|---|" * len(POLICIES)]
    for r in rows:
        cells = []
        for m in POLICIES:
            p = r["policies"][m]
            if "vs_best" not in p:
                cells += ["infeasible" if p.get("infeasible") else "-", "-"]
                continue
            cells += [f"{p['vs_lookup']['ratio']:.3f} {p['vs_lookup']['verdict']}" if p["vs_lookup"] else "-",
                      f"{p['vs_best']['ratio']:.3f} {p['vs_best']['verdict']} ({p['vs_best']['reference']})"]
        lines.append(f"| {r['task']} | {r['tables']} x {r['gpus']} | " + " | ".join(cells) + " |")
    (out / "rl_fidelity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:len(claims) + 6]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
