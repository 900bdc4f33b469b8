#!/usr/bin/env python
"""Write results/cost_models.{json,md}: held-out accuracy of the shipped cost models on the
measured dataset (unseen shards of seen tables; shards of unseen tables), beside the analytic
model and the sum-of-single-table-costs baseline; and their plan-cost errors on the measured
plans of the held-out model families.

    .venv/bin/python studies/cost_models/accuracy.py [--dataset cpu] [--heldout cpu_heldout]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.costmodel.bundle import load_bundle, shipped_bundles  # noqa: E402
from shardlab.costmodel.metrics import assess, held_out_sets, markdown_table, singles_index  # noqa: E402
from shardlab.costmodel.train import load_records  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from shardlab.measure.store import dataset_folder, kind_file  # noqa: E402
from shardlab.report.costmodel import heldout_error_table  # noqa: E402
from studies.common.heldout import KIND, heldout_errors, heldout_samples, heldout_verdicts  # noqa: E402
from studies.common.methods import TABLE_WISE  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="cpu")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--heldout", default="cpu_heldout",
                    help="measured plans on the held-out model families (datasets/<name>; skipped if absent)")
    args = ap.parse_args()
    compute = load_records("compute", dataset=args.dataset)
    singles = singles_index(load_records("single", dataset=args.dataset))
    sets = held_out_sets(compute)
    names = shipped_bundles(args.dataset)
    bundles = {n: load_bundle(n, args.dataset) for n in names}
    result = assess({n: b.compute for n, b in bundles.items()}, sets, singles)
    comm = {n: {k: v for k, v in b.heldout.items() if k.startswith("comm")} for n, b in bundles.items()}
    report = {"dataset": args.dataset, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "environment": environment("cpu"), "sets": {k: len(v) for k, v in sets.items()},
              "compute": result, "comm": comm,
              "models": {n: {"source": b.source, "provenance": {k: b.provenance.get(k) for k in
                                                                ("kind", "seed", "epochs", "data", "date", "git")}}
                         for n, b in bundles.items()}}
    heldout = heldout_rows(bundles, args.heldout)
    if heldout:
        report["heldout_families"] = heldout
    out = Path(args.out)
    write_json_atomic(out / "cost_models.json", report)
    lines = [f"# Cost models: held-out accuracy on measured data (`datasets/{args.dataset}`)", "",
             f"Made {report['date']} by `studies/cost_models/accuracy.py` from the shipped models in "
             f"`datasets/{args.dataset}/models/`. Targets: fused TBE forward+backward ms per shard, measured "
             "(profile in each model's source). `sum_of_singles` = the same tables measured one by one, "
             "summed (exact if fused costs were additive); `analytic` is a fitted bandwidth model, labelled analytic.",
             "", f"Sets: {report['sets']}", ""]
    lines += markdown_table(result)
    one = result.get("unseen_tables", {}).get("models", {}).get("sum_of_singles", {}).get("by_tables", {}).get("1-1")
    if one:
        lines += [f"Noise floor: on one-table shards `sum_of_singles` is the *same* op measured twice (in the campaign "
                  f"and again alone): they differ by MAPE {one['mape']:.3f}, and by {result['unseen_tables']['models']['sum_of_singles']['mape']:.3f} "
                  "over all shards. A model cannot be judged more precisely than that; the 5% MAPE aim is below "
                  "this CPU's repeatability (median relative spread of one measurement ~0.04-0.05).", ""]
    lines += ["### Communication (per-rank ms, test split by key)", "", "| model | target | MAPE | Spearman | Kendall |",
              "|---|---|---|---|---|"]
    for n, entries in comm.items():
        for k, e in entries.items():
            lines.append(f"| {n} | {k} | {e['mape']:.3f} | {e['spearman']:.3f} | {e['kendall']:.3f} |")
    lines += ["", "### Error by tables per shard (unseen tables, MAPE)", ""]
    unseen = result.get("unseen_tables", {}).get("models", {})
    bins = sorted({b for e in unseen.values() for b in e["by_tables"]}, key=lambda b: int(b.split("-")[0]))
    lines += ["| model | " + " | ".join(bins) + " |", "|---|" + "---|" * len(bins)]
    for n, e in unseen.items():
        lines.append(f"| {n} | " + " | ".join(f"{e['by_tables'][b]['mape']:.3f}" if b in e["by_tables"] else "-"
                                              for b in bins) + " |")
    lines += heldout_markdown(heldout, args.heldout)
    (out / "cost_models.md").write_text("\n".join(lines) + "\n")
    print(json.dumps({k: {n: round(e["mape"], 4) for n, e in v["models"].items()} for k, v in result.items()}))
    return 0


def heldout_rows(bundles: dict, dataset: str) -> dict:
    """Per bundle and held-out set: shard compute MAPE, plan-cost error, Spearman (measured
    plans of datasets/<dataset>; {} when that dataset is absent)."""
    if not (dataset_folder(dataset) / kind_file(KIND)).exists():
        return {}
    samples = heldout_samples(dataset)
    return {"models": {n: heldout_errors(samples, b) for n, b in bundles.items()},
            "verdicts": heldout_verdicts(samples)}


def heldout_markdown(heldout: dict, dataset: str) -> list[str]:
    """The held-out families section of the markdown report."""
    if not heldout:
        return []
    lines = ["", f"### Held-out model families (measured plans, `datasets/{dataset}`)", "",
             "Tables from public model configs no training step saw (`datasets/heldout_models/`); every plan "
             "measured in paired rounds (median). Shard: each device's fused fw+bw compute; plan: max over devices "
             "of compute + comm, predicted with the bundle's comm model.", "",
             ]
    lines += heldout_error_table(heldout["models"])
    lines += ["", "Measured paired verdicts on the same tasks (ratio = median over rounds of plan / reference; "
              "verdicts from the 95% interval: faster or slower when it excludes 1, equivalent when it contains 1 "
              "and lies inside [1/1.05, 1.05], else inconclusive): NeuroShard column-wise against its own "
              "table-wise plan, "
              "and each NeuroShard variant against the best baseline (the cheapest heuristic, measured).", "",
              f"| set | task | tables x GPUs | neuroshard vs {TABLE_WISE} | splits? | {TABLE_WISE} vs best | "
              "neuroshard vs best |", "|---|---|---|---|---|---|---|"]

    def cell(c):
        return "-" if not c else f"{c['ratio']:.3f} {c['verdict'] or '(no interval)'}"

    for r in heldout["verdicts"]["tasks"]:
        vs = r["vs_best_baseline"]
        lines.append(f"| {r['set']} | {r['index']} | {r['tables']} x {r['ngpu']} | {cell(r['cw_vs_tw'])} | "
                     f"{'yes' if (r['cw_vs_tw'] or {}).get('splits') else 'no'} | {cell(vs.get(TABLE_WISE))} | "
                     f"{cell(vs.get('neuroshard'))} |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
