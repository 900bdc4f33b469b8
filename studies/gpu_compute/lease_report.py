"""What a GPU lease measured (``scripts/gpu/lease.py``), judged here on the CPU.

**Plans** (``plan_rounds.jsonl``). Each round holds every plan's per-device fused forward and
backward compute (ms, CUDA events). A plan's cost in a round adds the all-to-alls of the
profile's labelled analytic comm model (its ``source`` is in every Evaluation; one GPU cannot
run NCCL between ranks), scheduled as every evaluator schedules them
(:func:`~shardlab.costmodel.base.simulate_from`: forward waits for the straggler; row-wise
collectives by the profile's row-wise model). The reference is the best baseline by median cost
in the selection rounds (baselines only, measured before the judged rounds); every plan is
judged against it on the judged rounds alone (:func:`~shardlab.evaluate.reference.compare_to_reference`:
paired per-round ratios, 95% bootstrap interval, verdict with a 5% equivalence margin).

**Floor** (``floor.db``). The same ops and single tables as ``datasets/h100`` (host wall clock
around ``torch.cuda.synchronize()``), timed again with CUDA events, paired by key: per op the
new / old ratio, the smallest op time (the floor) and the median relative spread
(p75 - p25) / median of the repeats.

    .venv/bin/python studies/gpu_compute/lease_report.py --lease DIR [--plans PATH] [--name NAME] [--comm-profile P]

writes ``results/<name>.json`` and ``results/<name>.md`` (never over an earlier run's).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from shardlab import constants as C  # noqa: E402
from shardlab.costmodel.base import simulate_from  # noqa: E402
from shardlab.costmodel.rowwise_comm import WithRowWise  # noqa: E402
from shardlab.evaluate.measured import _evaluation, measurable  # noqa: E402
from shardlab.evaluate.model import ModelEvaluator  # noqa: E402
from shardlab.evaluate.reference import SELECTED, compare_to_reference  # noqa: E402
from shardlab.evaluate.exchange import comm_pattern  # noqa: E402
from shardlab.data.lookups import device_tables  # noqa: E402
from shardlab.io import write_json_atomic  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from shardlab.measure.hardware import sitting_spread  # noqa: E402
from shardlab.measure.records import key_for_profile  # noqa: E402
from shardlab.measure.store import SampleStore, kind_file, load_measured  # noqa: E402
from shardlab.tables import Task  # noqa: E402
from studies.gpu_compute.lease_plans import PLANS, read_plans  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: The methods whose verdicts the summary counts.
JUDGED = ("neuroshard", "neuroshard[columns=false]", "dreamshard", "autoshard", "torchrec_free")


def read_rounds(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the round lines of ``plan_rounds.jsonl`` (a last line cut short by the
    call's limit is dropped)."""
    header, rounds = {}, []
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "header" in rec:
            header = rec["header"]
        else:
            rounds.append(rec)
    return header, rounds


def plan_costs(task: Task, plan: Plan, compute_ms: Sequence[Sequence[float]], evaluator: ModelEvaluator,
               bundle: Any, rowwise: Any, batch_size: int) -> tuple[np.ndarray, str]:
    """(G, 4) per device: measured fw / bw compute, modelled fw / bw all-to-all (ms); the comm label."""
    comm, label = bundle.comm_for(plan.ngpu)
    shards = device_tables(task, plan)
    shard_dims = np.array([sum(t.dim for t in ts) for ts in shards])
    dims, rw = comm_pattern(task, plan, batch_size)
    if rowwise is not None and not rw.empty and plan.ngpu > 1:
        comm = WithRowWise(comm, rowwise.increment(plan.ngpu, rw.to_dict()), shard_dims - np.asarray(dims))
        label += "+" + rowwise.source
    sim = simulate_from(np.asarray(compute_ms, dtype=float), list(shard_dims), comm)
    return np.column_stack([sim.fw_compute, sim.bw_compute, sim.fw_comm, sim.bw_comm]), label


def judge_task(entry: dict[str, Any], sittings: list[list[dict[str, Any]]], profile: str, batch_size: int,
               seed: int = 0, comm_profile: str | None = None) -> dict[str, Any]:
    """One task's Evaluations (measured compute + modelled comm) against the selected reference.
    ``sittings``: each lease's rounds of this task (one lease = one sitting); the reference is chosen
    on every sitting's selection rounds, and every plan judged on the judged rounds of all, grouped
    by sitting. ``comm_profile``: whose analytic comm model prices the all-to-alls (default:
    ``profile``'s)."""
    task = measurable(Task.from_dict(entry["task"]))[0]
    plans = {m: Plan.from_dict(p) for m, p in entry["plans"].items()}
    evaluator = ModelEvaluator("analytic", comm_profile or profile)
    bundle = evaluator.bundle()
    rowwise = evaluator.rowwise_model(bundle)
    same = {}
    for r in (r for rounds in sittings for r in rounds):
        same.update(r.get("same_as", {}))

    def rep(m: str) -> str:
        return same.get(m, m)

    def cost_rows(rounds: list[dict[str, Any]], kind: str, m: str) -> list[np.ndarray]:
        return [plan_costs(task, plans[m], r["compute_ms"][rep(m)], evaluator, bundle, rowwise, batch_size)[0]
                for r in rounds if r["sitting"] == kind and rep(m) in r["compute_ms"]]

    selection = {m: [float(x.sum(axis=1).max()) for rounds in sittings for x in cost_rows(rounds, "selection", m)]
                 for m in plans if plans[m].method in C.BASELINE_METHODS}
    selection = {m: v for m, v in selection.items() if v}
    judged = [{m: cost_rows(rounds, "judged", m) for m in plans} for rounds in sittings]
    counts = [min(len(v) for v in j.values()) for j in judged]      # paired: the rounds every plan has
    judged, counts = [j for j, n in zip(judged, counts) if n], [n for n in counts if n]
    if not selection or not judged:
        return {"task": task.name, "ngpu": task.ngpu, "tables": len(task.tables), "complete": False,
                "judged_rounds": sum(counts)}
    reference = min(selection, key=lambda m: (float(np.median(selection[m])), list(selection).index(m)))
    label = plan_costs(task, plans[reference], judged[0][reference][0][:, :2], evaluator, bundle, rowwise,
                       batch_size)[1]
    comm_of = f"{comm_profile}'s " if comm_profile and comm_profile != profile else ""
    source = f"measured:{profile} compute (CUDA events, one GPU) + {comm_of}{label}"
    spread = sitting_spread(profile)          # the profile's between-sitting spread, from its data
    evals = {m: _evaluation(task, plans[m], source, [j[m][:n] for j, n in zip(judged, counts)], None, seed, spread)
             for m in plans}
    evals = compare_to_reference(evals, reference, seed, chosen=SELECTED)
    n = sum(counts)
    return {"task": task.name, "ngpu": task.ngpu, "tables": len(task.tables), "complete": True,
            "judged_rounds": n, "selection_ms": selection, "reference": reference, "comm_source": label,
            "evaluations": {m: e.to_dict() for m, e in evals.items()}}


def _floor_samples(lease: Path, kind: str) -> list[dict[str, Any]]:
    """The floor's samples of ``kind``: from the lease's ``floor.db`` as it came back, or from its
    export (a ``datasets/<name>`` folder, e.g. ``datasets/h200-events``)."""
    if (lease / "floor.db").exists():
        with SampleStore(str(lease / "floor.db"), create=False) as st:
            return list(st.samples(kind))
    if (lease / kind_file(kind)).exists():
        return list(load_measured(kind, lease.name))
    return []


def floor_summary(lease: Path, dataset: str = "h100") -> dict[str, Any]:
    """Per kind (``compute``, ``single``): the ops timed again, paired by key with ``dataset``."""
    out: dict[str, Any] = {}
    for kind in ("compute", "single"):
        new = {s["key"]: s for s in _floor_samples(lease, kind)}
        if not new:
            continue
        profile = next(iter(new)).split(":")[1]          # keys pair with the profile segment as measured
        old = {k: s for s in load_measured(kind, dataset) if (k := key_for_profile(s["key"], profile)) in new}
        keys = sorted(old)
        ratio = np.array([new[k]["total_ms"] / old[k]["total_ms"] for k in keys])
        spread = np.array([(s["total_spread_ms"][1] - s["total_spread_ms"][0]) / s["total_ms"] for s in new.values()])
        totals = np.array([s["total_ms"] for s in new.values()])
        out[kind] = {"ops": len(new), "paired": len(keys), "floor_ms": float(totals.min()),
                     "median_ms": float(np.median(totals)), "median_relative_spread": float(np.median(spread)),
                     "old_floor_ms": float(min(old[k]["total_ms"] for k in keys)) if keys else None,
                     "new_over_old_median": float(np.median(ratio)) if keys else None,
                     "new_over_old_p10_p90": [float(np.percentile(ratio, 10)), float(np.percentile(ratio, 90))]
                     if keys else None,
                     "old_minus_new_median_ms": float(np.median([old[k]["total_ms"] - new[k]["total_ms"]
                                                                 for k in keys])) if keys else None}
    return out


def summarize(tasks: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per judged method: how many complete tasks it was faster / equivalent / slower /
    inconclusive on against the reference, or was the reference."""
    out: dict[str, dict[str, int]] = {}
    for t in tasks:
        if not t["complete"]:
            continue
        for m in JUDGED:
            e = t["evaluations"].get(m)
            if e is None:
                continue
            word = "reference" if m == t["reference"] else e.get("verdict", "none")
            out.setdefault(m, {}).setdefault(word, 0)
            out[m][word] += 1
    return out


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def markdown(name: str, header: dict[str, Any], tasks: list[dict[str, Any]], floor: dict[str, Any]) -> str:
    gpu = header.get("gpu", {}) if isinstance(header.get("gpu"), dict) else {}
    lines = [f"# GPU lease `{name}`", "",
             f"{header.get('hardware', '?')} ({gpu.get('name', '')}), torch {header.get('torch')}, fbgemm_gpu "
             f"{header.get('fbgemm_gpu')}, timing `{header.get('compute_timing')}`, profile "
             f"`{(header.get('profile') or {}).get('name')}`{' **(dry run: not a GPU result)**' if header.get('dry_run') else ''}; "
             f"plans `{header.get('plans_file')}` (sha256 {str(header.get('plans_sha256'))[:12]}...)."
             + (f" {len(header['sittings'])} sittings, judged together (rounds grouped by sitting): "
                + ", ".join(str(d) for d in header["sittings"]) + "." if header.get("sittings") else ""), "",
             "## Verdicts against the best baseline (measured compute + modelled comm)", "",
             "| method | " + " | ".join(("reference", "faster", "equivalent", "slower", "inconclusive")) + " |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for m, c in summarize(tasks).items():
        lines.append(f"| `{m}` | " + " | ".join(str(c.get(w, 0)) for w in
                                                 ("reference", "faster", "equivalent", "slower", "inconclusive")) + " |")
    lines += ["", "| task | GPUs | tables | rounds | reference | verdicts (ratio to reference, 95% interval) |",
              "| --- | ---: | ---: | ---: | --- | --- |"]
    for t in tasks:
        if not t["complete"]:
            lines.append(f"| `{t['task']}` | {t['ngpu']} | {t['tables']} | {t['judged_rounds']} | - | not finished |")
            continue
        words = []
        for m, e in t["evaluations"].items():
            if m != t["reference"] and e.get("ratio_ci95"):
                lo, hi = e["ratio_ci95"]
                words.append(f"`{m}` {e.get('verdict')} ({e['ratio_to_reference']:.3f}, {lo:.3f}-{hi:.3f})")
        lines.append(f"| `{t['task']}` | {t['ngpu']} | {t['tables']} | {t['judged_rounds']} | `{t['reference']}` | "
                     + ", ".join(words) + " |")
    if tasks and tasks[0].get("comm_source"):
        lines += ["", f"Comm (not measured): `{tasks[0]['comm_source']}`."]
    for kind, f in floor.items():
        lines += ["", f"## The floor: `{kind}` ops timed again", "",
                  f"{f['ops']} ops, {f['paired']} paired by key with datasets/h100 (host wall clock around "
                  f"torch.cuda.synchronize()).", "",
                  f"| | this lease (`{header.get('compute_timing')}`) | host-timed (datasets/h100) |", "| --- | ---: | ---: |",
                  f"| smallest op (the floor), ms | {f['floor_ms']:.4f} | {_num(f['old_floor_ms'])} |",
                  f"| median op, ms | {f['median_ms']:.4f} | |",
                  f"| median relative spread (p75 - p25) / median | {f['median_relative_spread']:.4f} | |", "",
                  f"Per op, new / old: median {_num(f['new_over_old_median'])}, p10-p90 "
                  f"{' - '.join(_num(x) for x in f['new_over_old_p10_p90'] or [])}; old - new, median "
                  f"{_num(f['old_minus_new_median_ms'])} ms."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lease", type=Path, required=True, nargs="+",
                    help="the folder the lease's files came back to (or its export); several: one sitting "
                         "each, of the same plans on the same hardware, judged together")
    ap.add_argument("--plans", type=Path, default=PLANS)
    ap.add_argument("--name", default=None, help="results/<name>.{json,md} (default: lease-<UTC time of the lease>)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--comm-profile", default=None,
                    help="whose analytic comm model prices the all-to-alls (default: the lease's profile); "
                         "for a profile without one, e.g. h200 -> h100: the same NVLink 4 and NVSwitch")
    args = ap.parse_args(argv)
    sittings, headers = [], []
    for lease in args.lease:
        found = [p for p in (lease / "plan_rounds.jsonl", lease / "plan_rounds.jsonl.gz") if p.exists()]
        header, rounds = read_rounds(found[0]) if found else ({}, [])
        sittings.append(rounds)
        headers.append(header)
    header = headers[0]
    if len({(h.get("hardware"), h.get("plans_sha256")) for h in headers}) > 1:
        raise SystemExit("lease_report: the leases differ in hardware or plans: judge each on its own")
    entries = read_plans(args.plans)[0]["tasks"]
    prof = (header.get("profile") or {})
    tasks = [judge_task(e, [[r for r in rounds if r["task"] == e["task"]["name"]] for rounds in sittings],
                        prof["name"], prof["batch_size"], comm_profile=args.comm_profile)
             for e in entries if any(r["task"] == e["task"]["name"] for rounds in sittings for r in rounds)]
    floor = next((f for f in map(floor_summary, args.lease) if f), {})
    if len(headers) > 1:
        header = {**header, "sittings": [h.get("date") for h in headers]}
    name = args.name or "lease-" + str(header.get("date", "unknown")).replace(":", "").replace("-", "")[:15]
    json_path, md_path = args.out / f"{name}.json", args.out / f"{name}.md"
    if json_path.exists() or md_path.exists():
        raise SystemExit(f"lease_report: {json_path.name} exists: give another --name (runs are never overwritten)")
    write_json_atomic(str(json_path), {"header": header, "tasks": tasks, "summary": summarize(tasks), "floor": floor})
    md_path.write_text(markdown(name, header, tasks, floor))
    print(md_path.read_text())


if __name__ == "__main__":
    main()
