#!/usr/bin/env python
"""Sealed set 1's twelve tasks measured again as development data (results/set1-<UTC>.*).

Set 1 has been run once as the judge and seen, so its tasks are development data; reruns go
here, never into ``studies/sealed_test/results/``, which holds the sealed runs as their judge
made them. The measurement is the sealed driver's (``studies/sealed_test/run.py``: every method
at its defaults, 8 paired rounds x 2 sittings, verdicts against the best baseline); only set 1
can be named, so a sealed set not yet run cannot be run from here. A finished run's ``.jsonl``
is stored gzipped.

    .venv/bin/python studies/set1_development/run.py [--profile NAME] [--budget DURATION]

``--budget 107s``: measured with a time budget of 107 s per task on average instead (the sealed
driver's ``--budget``: the run's 12 x 107 s shared, the time a task leaves going to the tasks after
it); 107 s per task is what 8 x 2 took on average in the first development run.
``--same-references RUN``: judge each task against the reference an earlier run of set 1 chose
(its ``.jsonl`` or ``.jsonl.gz``), so that the two runs measure the same comparisons.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shardlab.cli.arguments import duration  # noqa: E402
from shardlab.errors import ShardlabError  # noqa: E402
from studies.common.records import pack_run, read_run  # noqa: E402
from studies.sealed_test.run import run  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: The one set this study reruns: run and seen, development data since.
SET = "1"


def references_of(path: str | Path) -> dict[str, str]:
    """Task name -> the method an earlier run judged that task against."""
    _, records = read_run(Path(path))
    return {r["task"]["name"]: next(e["reference"] for e in r["evaluations"].values() if e.get("reference"))
            for r in records if r["evaluations"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=None, help="hardware profile (default: cpu when no GPU is visible)")
    ap.add_argument("--out", default=str(RESULTS), help="results folder (default: this study's results/)")
    ap.add_argument("--budget", type=duration, default=None, metavar="DURATION",
                    help="measure with a time budget of this much per task on average (e.g. 107s; the time "
                         "a task leaves goes to the tasks after it) instead of 8 rounds x 2 sittings")
    ap.add_argument("--same-references", default=None, metavar="RUN",
                    help="judge each task against the reference this earlier run of set 1 chose")
    args = ap.parse_args(argv)
    try:
        refs = references_of(args.same_references) if args.same_references else None
        jsonl, md = run(out=args.out, profile=args.profile, sealed_set=SET, prefix="set1", budget_s=args.budget,
                        references=refs)
    except ShardlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"set 1 again: {pack_run(jsonl)} and {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
