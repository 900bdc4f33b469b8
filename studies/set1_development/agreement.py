#!/usr/bin/env python
"""Do two runs of set 1 agree, and how decisive is each? Reads stored runs (nothing is measured)
and writes ``results/agreement-<first>-<second>.{json.gz,md}``:

    .venv/bin/python studies/set1_development/agreement.py results/set1-A.jsonl.gz results/set1-B.jsonl.gz

Per run: the share of verdicts (method against the task's reference, the reference itself left
out) that are ``inconclusive``, the measuring time (s; the records' ``seconds`` where a run has
them, else ``--seconds``), the mean sittings and rounds of a verdict, and the timed plan-rounds
(each distinct plan's timed rounds; identical plans share theirs) with the seconds per plan-round
they cost, overheads included (warm-ups, the bound, the selection sitting, spawning ranks). Between the two runs, on each (task, method)
whose reference is the same plan in both: how many verdicts are the same, how many are opposite
(``faster`` in one, ``slower`` in the other), and the share of the first run's decisive verdicts
(faster / slower / equivalent) that the second confirms (decisive and the same). A pair whose
reference differs between the runs (each run picks the best baseline in its own selection
sitting) is counted apart, not compared.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.io import write_json_atomic, write_text_atomic  # noqa: E402
from shardlab.plan import Plan  # noqa: E402
from studies.common.records import read_run, run_name  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DECISIVE = ("faster", "slower", "equivalent")
OPPOSITE = {("faster", "slower"), ("slower", "faster")}


def verdicts(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(task, method) -> the method's verdict, reference plan, sittings and rounds, for every method
    that is not its task's reference."""
    out = {}
    for rec in records:
        evs = rec["evaluations"]
        for m, e in evs.items():
            ref = e.get("reference")
            if ref is None or ref == m:
                continue
            out[(rec["task"]["name"], m)] = {
                "verdict": e.get("verdict") or "inconclusive", "reference": ref,
                "reference_plan": frozenset(Plan.from_dict(rec["plans"][ref]).placements),
                "sittings": len(e.get("sittings_ms") or [0]), "rounds": len(e.get("rounds_ms") or [])}
    return out


def plan_rounds(records: Sequence[Mapping[str, Any]]) -> int:
    """Timed rounds of every distinct plan (identical plans' rounds counted once) over the tasks."""
    return sum(sum(len(r) for r in {tuple(e.get("rounds_ms") or []) for e in rec["evaluations"].values()})
               for rec in records)


def run_summary(path: Path, seconds: float | None = None) -> dict[str, Any]:
    """One run's decisiveness and time (module docstring); ``seconds``: its measuring time where
    its records do not hold it."""
    header, records = read_run(path)
    said = list(verdicts(records).values())
    n = len(said)
    took = sum(float(r.get("seconds", 0.0)) for r in records) or seconds
    return {"run": run_name(path), "tasks": len(records), "verdicts": n,
            "inconclusive": sum(v["verdict"] == "inconclusive" for v in said) / max(n, 1),
            "counts": {k: sum(v["verdict"] == k for v in said) for k in (*DECISIVE, "inconclusive")},
            "seconds": took, "plan_rounds": plan_rounds(records),
            "seconds_per_plan_round": None if not took else took / max(plan_rounds(records), 1),
            "mean_sittings": sum(v["sittings"] for v in said) / max(n, 1),
            "mean_rounds": sum(v["rounds"] for v in said) / max(n, 1),
            "settings": header.get("settings", {})}


def agreement(first: Path, second: Path, seconds: Sequence[float | None] = (None, None)) -> dict[str, Any]:
    """The two runs' summaries and their agreement (module docstring)."""
    a, b = (verdicts(read_run(p)[1]) for p in (first, second))
    both = [k for k in a if k in b]
    same_ref = [k for k in both if a[k]["reference_plan"] == b[k]["reference_plan"]]
    decisive = [k for k in same_ref if a[k]["verdict"] in DECISIVE]
    return {"first": run_summary(first, seconds[0]), "second": run_summary(second, seconds[1]), "pairs": len(both),
            "other_reference": len(both) - len(same_ref), "compared": len(same_ref),
            "same": sum(a[k]["verdict"] == b[k]["verdict"] for k in same_ref),
            "opposite": sum((a[k]["verdict"], b[k]["verdict"]) in OPPOSITE for k in same_ref),
            "decisive_first": len(decisive),
            "confirmed": sum(b[k]["verdict"] == a[k]["verdict"] for k in decisive),
            "rows": [{"task": t, "method": m, "first": a[(t, m)]["verdict"], "second": b[(t, m)]["verdict"],
                      "sittings": [a[(t, m)]["sittings"], b[(t, m)]["sittings"]]} for t, m in same_ref]}


def markdown(out: Mapping[str, Any]) -> str:
    """The agreement as markdown."""
    lines = [f"# Set 1, two runs: `{out['first']['run']}` and `{out['second']['run']}`", "",
             "Written by `studies/set1_development/agreement.py` from the stored runs; nothing measured.", "",
             "| run | settings | tasks | verdicts | faster / equivalent / slower / inconclusive | inconclusive | "
             "mean sittings | mean rounds | measuring s | plan-rounds | s per plan-round |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key in ("first", "second"):
        s = out[key]
        how = (f"budget {s['settings']['budget_s']:g} s per task" if s["settings"].get("budget_s")
               else f"{s['settings'].get('rounds')} rounds x {s['settings'].get('sittings')} sittings")
        c = s["counts"]
        lines.append(f"| `{s['run']}` | {how} | {s['tasks']} | {s['verdicts']} | {c['faster']} / {c['equivalent']} / "
                     f"{c['slower']} / {c['inconclusive']} | {s['inconclusive']:.0%} | {s['mean_sittings']:.2f} | "
                     f"{s['mean_rounds']:.1f} | {s['seconds'] or float('nan'):.0f} | {s['plan_rounds']} | "
                     f"{s['seconds_per_plan_round'] or float('nan'):.2f} |")
    n, d = out["compared"], out["decisive_first"]
    lines += ["", f"Of {out['pairs']} (task, method) verdicts in both runs, {out['other_reference']} had another reference "
              f"plan in the second run (not compared). Of the {n} compared: the same verdict on {out['same']}"
              f" ({out['same'] / max(n, 1):.0%}), opposite verdicts on **{out['opposite']}**; of the first run's {d} "
              f"decisive verdicts the second confirmed **{out['confirmed']} ({out['confirmed'] / max(d, 1):.0%})**.", "",
              "| task | method | first | second | sittings (first, second) |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{r['task']}` | `{r['method']}` | {r['first']} | {r['second']} | {r['sittings'][0]}, {r['sittings'][1]} |"
              for r in out["rows"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("--seconds", type=float, nargs=2, default=(None, None), metavar=("FIRST", "SECOND"),
                    help="measuring time (s) of runs whose records do not hold it (0: take the records')")
    ap.add_argument("--out", default=str(RESULTS), help="results folder (default: this study's results/)")
    args = ap.parse_args(argv)
    first, second = Path(args.first), Path(args.second)
    out = agreement(first, second, [x or None for x in args.seconds])
    stem = Path(args.out) / f"agreement-{run_name(first)}-{run_name(second)}"
    # gzip-compressed, no indent: the repository is carried whole on every device call (64 MiB)
    write_json_atomic(stem.with_name(stem.name + ".json.gz"), out, indent=None)
    write_text_atomic(stem.with_suffix(".md"), markdown(out))
    print(markdown(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
