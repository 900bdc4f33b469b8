#!/usr/bin/env python
"""Run the README's "In Python" example exactly as README.md holds it and keep its raw rounds:
``results/readme_example-<UTC time>.json`` (a new file per run, never overwritten) with the code
that ran, every line it printed, each plan's predicted and measured Evaluation (``to_dict()``:
per-round costs ``rounds_ms``, median, interval, ratio, verdict), the selection sitting that chose
the reference, the task and the plans, the wall time, the load average and the provenance.

    .venv/bin/python studies/quoted_figures/readme_example.py
    .venv/bin/python studies/quoted_figures/readme_example.py --show results/readme_example-<time>.json

``--show`` measures nothing: it prints the example's lines again from a record's stored rounds
(each comparison recomputed from ``rounds_ms``, the reference's rounds paired round by round) and
says whether they match the lines printed when it ran.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.evaluate import MeasuredEvaluator  # noqa: E402
from shardlab.evaluate.evaluation import Evaluation  # noqa: E402
from shardlab.io import read_json, write_json_atomic  # noqa: E402
from shardlab.measure.hardware import environment  # noqa: E402
from studies.quoted_figures.provenance import compare_again, new_record, package_diff, sitting_log_sd  # noqa: E402
from shardlab.report.uncertainty import comparison_text  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def readme_code(readme: Path) -> str:
    """The first ```python block after the heading "## In Python" of ``readme``."""
    text = readme.read_text()
    start = text.index("\n## In Python\n")
    block = re.search(r"```python\n(.*?)```", text[start:], re.S)
    if block is None:
        raise SystemExit(f"{readme}: no python block under '## In Python'")
    return block.group(1)


class Tee(io.TextIOBase):
    """Writes to the real stdout and keeps a copy."""

    def __init__(self, out: io.TextIOBase) -> None:
        self.out, self.copy = out, io.StringIO()

    def write(self, s: str) -> int:
        self.out.write(s)
        return self.copy.write(s)

    def flush(self) -> None:
        self.out.flush()


def run(readme: Path, out_dir: Path) -> Path:
    """Run the example once, write its record, return the record's path."""
    code = readme_code(readme)
    made, path = new_record(out_dir, "readme_example")
    diff_before = package_diff()
    evaluators: list = []
    evaluate = MeasuredEvaluator.evaluate

    def recording(self, task, plans):          # keeps the evaluator, for its selection sitting
        evaluators.append(self)
        return evaluate(self, task, plans)

    MeasuredEvaluator.evaluate = recording
    namespace = {"__name__": "__main__"}
    load_before = os.getloadavg()
    tee = Tee(sys.stdout)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(tee):
            exec(compile(code, f"{readme.name} (In Python)", "exec"), namespace)
    finally:
        MeasuredEvaluator.evaluate = evaluate
    seconds = time.perf_counter() - t0
    ev = evaluators[0]
    first = next(iter(namespace["measured"].values()))
    said = getattr(ev, "sitting_sd", None)
    sd = sitting_log_sd(first) if said is None else float(said)
    env = environment("cpu")
    record = {
        "what": "README.md's 'In Python' example, run as written there",
        "made": made.isoformat(timespec="seconds"), "seconds": seconds,
        "load_average_1_5_15_min": {"before": list(load_before), "after": list(os.getloadavg())},
        "git": env.get("git"), "environment": env, "package_diff": diff_before,
        "package_diff_unchanged_during_run": package_diff().get("sha256") == diff_before.get("sha256"),
        "code": code,
        "printed": tee.copy.getvalue().splitlines(),
        "task": namespace["task"].to_dict(),
        "plans": {k: p.to_dict() for k, p in namespace["plans"].items()},
        "predicted": {k: e.to_dict() for k, e in namespace["predicted"].items()},
        "measured": {k: e.to_dict() for k, e in namespace["measured"].items()},
        "measured_seed": ev.seed, "sitting_log_sd": sd, "equivalence_margin": ev.margin,
        "selection_sitting_ms": getattr(ev, "selection_", None), "warmup_ms": getattr(ev, "warmup_ms_", None),
        "round_orders": getattr(ev, "orders_", None), "evaluation_seconds": getattr(ev, "seconds_", None),
    }
    write_json_atomic(path, record)
    return path


def show(path: Path) -> int:
    """Print the example's lines again from the stored rounds; 0 when they match the printed ones."""
    rec = read_json(path)
    measured = {k: Evaluation.from_dict(d) for k, d in rec["measured"].items()}
    ref = next(iter(measured.values())).comparison.reference
    again = compare_again(measured, ref, rec["measured_seed"], rec["equivalence_margin"], rec["sitting_log_sd"])
    lines = [f"predicted {rec['predicted'][k]['cost_ms']:5.1f} ms | measured {comparison_text(k, e)}"
             for k, e in again.items()]
    for line in lines:
        print(line)
    same = lines == rec["printed"][:len(lines)]
    print(f"{'matches' if same else 'DIFFERS FROM'} the lines printed when it ran ({rec['made']})")
    return 0 if same else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", default=str(ROOT / "README.md"))
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--show", default=None, metavar="RECORD", help="print a record's lines from its rounds")
    args = ap.parse_args()
    if args.show:
        return show(Path(args.show))
    out = Path(args.out).resolve()
    os.chdir(ROOT)                               # the example writes reports/example.html
    path = run(Path(args.readme), out)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
