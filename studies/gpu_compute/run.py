#!/usr/bin/env python
"""Write results/gpu_compute.{json,md}: what the measured GPU dataset says.

1. The same fused ops timed on this CPU (batch 4096) and on the GPU (batch 65536): does one
   rank the other's costs?
2. NeuroShard's compute model trained on the GPU's pool-train samples, judged on unseen shards
   of seen tables and on shards of the pool's unseen (test) tables; beside it, the shipped
   CPU-trained model (rank correlation only: it predicts CPU ms) and the sum of single-table costs.
3. Fused vs summed single-table costs on the GPU (subadditivity, the lower bound's premise).
4. Whole-plan compute of 7 methods on held-out tasks (public model families + pool test
   tables), paired rounds: each method vs lookup_greedy -> faster / slower / equivalent /
   inconclusive (equivalence margin 5%).

    .venv/bin/python studies/gpu_compute/run.py [--gpu h100] [--epochs 400]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.costmodel.bundle import load_bundle  # noqa: E402
from shardlab.costmodel.metrics import assess, errors, held_out_sets, markdown_table, singles_index  # noqa: E402
from shardlab.costmodel.neural import NeuroShardCompute  # noqa: E402
from shardlab.costmodel.train import load_records, load_samples  # noqa: E402
from shardlab.evaluate.stats import subadditivity  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.measure.store import dataset_folder, load_measured  # noqa: E402
from studies.gpu_compute.analysis import cross_device, plan_verdicts, same_ops  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h100", help="the GPU dataset (datasets/<gpu>)")
    ap.add_argument("--cpu", default="cpu", help="the CPU dataset with the same ops")
    ap.add_argument("--epochs", type=int, default=400)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    gpu_rows = load_samples("compute", dataset=args.gpu)
    prov = gpu_rows[0]["provenance"]
    pair = same_ops(load_samples("compute", dataset=args.cpu), gpu_rows)
    cross = cross_device(*pair)

    records = load_records("compute", dataset=args.gpu)
    sets = held_out_sets(records)
    t0 = time.perf_counter()
    model = NeuroShardCompute(epochs=args.epochs, seed=0).fit(sets["train"], sets["val"])
    fit_s = time.perf_counter() - t0
    singles = singles_index(load_records("single", dataset=args.gpu))
    result = assess({"neuroshard (GPU-trained)": model}, sets)
    versus_singles = assess({"neuroshard (GPU-trained)": model}, sets, singles)
    cpu_model = load_bundle("neuroshard", args.cpu).compute
    cpu_rank = {}
    for name in ("seen_tables", "unseen_tables"):
        samples = sets[name]
        if samples:
            pred = cpu_model.predict([s.tables for s in samples]).sum(axis=1)
            cpu_rank[name] = errors(pred, [s.fw_ms + s.bw_ms for s in samples])["spearman"]
    sub = subadditivity(gpu_rows, {r["key"]: r for r in load_samples("single", dataset=args.gpu)})

    plans = [r for g in (4, 8) if (dataset_folder(args.gpu) / f"plan_compute_{g}.jsonl.gz").exists()
             for r in load_measured(f"plan_compute:{g}", args.gpu)]
    verdicts = plan_verdicts(plans)

    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "gpu_dataset": args.gpu,
              "hardware": prov["hardware"], "profile": prov["profile"], "torch": prov["torch"],
              "fbgemm_gpu": prov["fbgemm_gpu"], "sets": {k: len(v) for k, v in sets.items()},
              "cpu_vs_gpu_same_ops": cross, "compute_models": result, "compute_models_vs_singles": versus_singles, "cpu_model_spearman_on_gpu": cpu_rank,
              "gpu_model": {"epochs": args.epochs, "fit_seconds": fit_s, "best_epoch": getattr(model, "best_epoch_", None)},
              "subadditivity": sub, "plan_compute": verdicts}
    out = Path(args.out)
    write_json_atomic(out / "gpu_compute.json", report)
    q = cross["ratio_quantiles"]
    lines = [f"# GPU dataset `datasets/{args.gpu}`: what it says", "",
             f"Made {report['date']} by `studies/gpu_compute/run.py`. Hardware: {prov['hardware']}, torch "
             f"{prov['torch']}, fbgemm_gpu {prov['fbgemm_gpu']}; profile `{prov['profile']['name']}` (batch "
             f"{prov['profile']['batch_size']}, {prov['profile']['weights_precision']}, {prov['profile']['optimizer']}). "
             "Every cost below is measured (fbgemm TBE on the GPU, timed with synchronisation, median of 10 runs "
             "after 5 warm-ups) or predicted by a model trained on such measurements, as labelled.", "",
             "## 1. The same ops on CPU and GPU", "",
             f"{cross['n']} fused ops measured in both `datasets/{args.cpu}` (CPU, batch 4096) and here (same "
             f"pool, seed and sample index: the same tables at the same dims). Spearman rank correlation of their "
             f"costs: **{cross['spearman']:.3f}**. GPU ms / CPU ms per op: p10 {q['0.1']:.4f}, median {q['0.5']:.4f}, "
             f"p90 {q['0.9']:.4f} (p90/p10 = {cross['ratio_p90_over_p10']:.1f}: no single scale factor turns one "
             "device's costs into the other's, so a CPU-trained model cannot simply be rescaled).", "",
             "## 2. Compute cost models on GPU measurements", "",
             f"NeuroShard's compute model trained on the GPU's pool-train samples ({len(sets['train'])} train, "
             f"{len(sets['val'])} val; {args.epochs} epochs, {fit_s:.0f} s on this CPU); judged on the held-out "
             "splits below; then, on the samples whose tables were all also measured alone, beside "
             "`sum_of_singles` (those tables measured alone on the GPU, summed).", ""]
    lines += markdown_table(result)
    lines += ["", "### Beside the sum of single-table costs", ""] + markdown_table(versus_singles)
    lines += ["", "The shipped CPU-trained NeuroShard model (it predicts CPU ms, so only its ranking is comparable): "
              "Spearman on the GPU's " + ", ".join(f"{k} {v:.3f}" for k, v in cpu_rank.items()) + ".", "",
              "## 3. Fused vs summed single-table costs on the GPU", "",
              f"{sub.get('compared', 0)} samples of 2+ tables whose tables were all measured alone: fused / summed "
              f"ratio median {sub.get('median_ratio', float('nan')):.3f} (p05 {sub.get('p05_ratio', float('nan')):.3f}, "
              f"p95 {sub.get('p95_ratio', float('nan')):.3f}, max {sub.get('max_ratio', float('nan')):.3f}); above 1: "
              f"{sub.get('above_1', float('nan')):.3f}; above 1 by more than the noise: {sub.get('violations', float('nan')):.3f}. "
              "Single ops of one table run near the GPU's floor "
              "(~0.6-1.5 ms per fw+bw, launch and synchronisation included), so a sum of singles counts that "
              "floor once per table.", "",
              "## 4. Whole-plan compute on held-out tasks (paired rounds)", "",
              "Tasks: 2 per public model family (`datasets/heldout_models`) and 2 of the pool's test tables, at G = 4 "
              "and 8, batch 65536, 16 GB per device. Each plan's cost per round = the slowest device's fused-op "
              "fw+bw on the one GPU (devices timed in turn); **all-to-alls not measured** (one GPU). 5 rounds, "
              "orders shuffled per round; ratio = method / lookup_greedy per round, median and 95% bootstrap "
              "interval; with 5 rounds the interval's ends are the extreme rounds. NeuroShard's plans were searched "
              "with the shipped **CPU-trained** models: this measures how they transfer to the GPU.", "",
              "| G, method | faster | slower | equivalent (margin 5%) | inconclusive |", "|---|---|---|---|---|"]
    for k, c in sorted(verdicts["counts"].items()):
        lines.append(f"| {k} | {c['faster']} | {c['slower']} | {c['equivalent']} | {c['inconclusive']} |")
    lines += ["", "| G | task | method | median ms | lookup_greedy ms | ratio | 95% CI | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for r in verdicts["per_task"]:
        ci = f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]" if r["ci95"] else "-"
        lines.append(f"| {r['ngpu']} | {r['task']} | {r['method']} | {r['median_ms']:.3f} | "
                     f"{r['reference_median_ms']:.3f} | {r['ratio']:.3f} | {ci} | {r['verdict']} |")
    (out / "gpu_compute.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'gpu_compute.md'}: cpu-vs-gpu spearman {cross['spearman']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
