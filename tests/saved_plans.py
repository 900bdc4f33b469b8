"""Saved plans: every sharder's plan on the benchmark tasks, written once before the package was
redesigned, so a test can check that the redesign changed no plan.

``python -m tests.saved_plans`` (re)writes ``tests/data/saved_plans.json``: the tasks as Task
JSON and, per task, each method's placements, plus NeuroShard's one-state-at-a-time search
(``batched=False``, the greedy path since removed) under the key ``neuroshard@one-by-one``.
Only run it to record a new reference; ``tests/test_saved_plans.py`` reads the file. It ran
before sharders took a hardware profile, when every one used the ``cpu`` profile's models: the
test asks for that profile.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PATH = Path(__file__).parent / "data" / "saved_plans.json"

#: Method name at the time of saving -> how the redesigned package spells the same sharder (NeuroShard
#: with the model it searched with then, `neuroshard_broad`, the cpu default of the time, and without
#: the polish its column-wise search has since gained: ``polish_moves=0``, ``search/polish.py``).
METHODS = {
    "random": "random", "size_greedy": "size_greedy", "dim_greedy": "dim_greedy", "lookup_greedy": "lookup_greedy",
    "size_lookup_greedy": "size_lookup_greedy",
    "torchrec": "torchrec", "torchrec_free": "torchrec_free",
    "neuroshard": "neuroshard[model=neuroshard_broad,polish_moves=0]",
    "neuroshard_tw": "neuroshard[model=neuroshard_broad,columns=false]",
    "neuroshard_pool": "neuroshard[model=neuroshard,polish_moves=0]",
    "neuroshard_unguarded": "neuroshard[model=neuroshard_broad,split_guard=false,polish_moves=0]",
    "neuroshard_rwcomm": "neuroshard[model=neuroshard_broad,rowwise_comm=shipped,polish_moves=0]",
    "dreamshard": "dreamshard", "autoshard": "autoshard",
}


def placements(plan) -> list[list]:
    """A plan's placements as sorted [table, row_offset, rows, col_offset, cols, device] lists."""
    return sorted([p.table, p.row_offset, p.rows, p.col_offset, p.cols, p.device] for p in plan.placements)


def tasks() -> list:
    """The benchmark's first task of each setting, and three row-wise benchmark tasks with
    tables that fit no device."""
    from shardlab.workflows.benchmark import benchmark_tasks
    from studies.row_wise.tasks import SPECS, build_task

    out = [t for _, t in benchmark_tasks(("4x10-60", "4x50", "8x80"), 1)]
    out += [build_task(SPECS[i], 4096) for i in (2, 3, 6)]
    return out


def main() -> None:
    from shardlab.search import get_sharder, run_sharder

    record = {"tasks": [], "plans": {}}
    for task in tasks():
        record["tasks"].append(task.to_dict())
        got = {}
        for old in METHODS:
            try:
                got[old] = placements(run_sharder(get_sharder(old), task))
            except Exception as exc:   # noqa: BLE001 -- the one-line error is part of the record
                got[old] = {"error": type(exc).__name__}
            print(task.name, old, "error" if isinstance(got[old], dict) else "ok", file=sys.stderr)
        try:
            got["neuroshard@one-by-one"] = placements(run_sharder(get_sharder("neuroshard", batched=False), task))
        except Exception as exc:   # noqa: BLE001
            got["neuroshard@one-by-one"] = {"error": type(exc).__name__}
        record["plans"][task.name] = got
    PATH.write_text(json.dumps(record, indent=0))


if __name__ == "__main__":
    main()
