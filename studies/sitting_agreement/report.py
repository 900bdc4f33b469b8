"""The agreement report of ``run.py report``: for every two complete sittings kept, how many plan
pairs get the same verdict in both and how many get opposite ones, the pairs judged each on one
sitting's rounds alone. Nothing is measured; written to ``results/agreement.{json,md}`` and
``reports/sitting_agreement.md``."""

from __future__ import annotations

import datetime as dt
import itertools
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from shardlab import constants as C
from shardlab.data.hardware_profiles import profile_folder
from shardlab.evaluate.stats import VERDICTS, paired_ratio_ci, verdict
from shardlab.io import write_json_atomic, write_text_atomic
from shardlab.plan import Plan
from shardlab.measure.hardware import git_revision

HERE = Path(__file__).resolve().parent
REPORT = HERE.parents[1] / "reports" / "sitting_agreement.md"
OPPOSITE = {("faster", "slower"), ("slower", "faster")}
#: How each sitting's intervals are made: with the profile's between-sitting spread (what
#: shardlab reports) and from the rounds alone (the spread left out), side by side.
RULES = {"with the cpu spread": profile_folder("cpu").sitting_log_sd, "rounds alone": 0.0}


def plan_pairs(entry: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every two plans of a task that differ (identical plans share their rounds: not a comparison)."""
    placements = {m: frozenset(Plan.from_dict(p).placements) for m, p in entry["plans"].items()}
    return [(a, b) for a, b in itertools.combinations(entry["plans"], 2) if placements[a] != placements[b]]


def judged(evs: Mapping[str, Any], a: str, b: str, sitting_sd: float) -> tuple[float, str]:
    """Ratio b / a from one sitting's paired rounds and its verdict (margin 5%)."""
    ratio, ci = paired_ratio_ci([evs[b].rounds_ms], [evs[a].rounds_ms], seed=0, sitting_sd=sitting_sd)
    return ratio, verdict(ci, C.EQUIVALENCE_MARGIN)


def agreement(first: Mapping[str, Any], second: Mapping[str, Any], comparisons: Mapping[str, Any]) -> dict[str, Any]:
    """Verdict agreement between two sittings over every plan pair of every task both hold."""
    out: dict[str, Any] = {"sittings": [first["file"], second["file"]],
                           "started_utc": [first["header"]["started_utc"], second["header"]["started_utc"]]}
    t0, t1 = (dt.datetime.fromisoformat(s) for s in out["started_utc"])
    out["hours_apart"] = round(abs((t1 - t0).total_seconds()) / 3600, 2)
    for rule, sd in RULES.items():
        rows, same, opposite, table = [], 0, 0, Counter()
        for entry in comparisons["tasks"]:
            name = entry["task"]["name"]
            if name not in first["tasks"] or name not in second["tasks"]:
                continue
            for a, b in plan_pairs(entry):
                (r0, v0), (r1, v1) = judged(first["tasks"][name], a, b, sd), judged(second["tasks"][name], a, b, sd)
                rows.append({"task": name, "reference": a, "plan": b, "ratios": [r0, r1], "verdicts": [v0, v1]})
                same += v0 == v1
                opposite += (v0, v1) in OPPOSITE
                table[(v0, v1)] += 1
        out[rule] = {"pairs": len(rows), "same": same, "opposite": opposite,
                     "same_share": same / len(rows) if rows else float("nan"),
                     "table": {f"{a} / {b}": n for (a, b), n in sorted(table.items())}, "rows": rows}
    return out


def cmd_report(sittings: Sequence[Mapping[str, Any]], comparisons: Mapping[str, Any]) -> None:
    """Write the report over every two complete sittings (all of ``comparisons``' tasks measured)."""
    ntasks = len(comparisons["tasks"])
    complete = [s for s in sittings if len(s["tasks"]) == ntasks]
    pairs = [agreement(a, b, comparisons) for a, b in itertools.combinations(complete, 2)]
    data = {"made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git": git_revision(),
            "margin": C.EQUIVALENCE_MARGIN, "sitting_log_sd": profile_folder("cpu").sitting_log_sd,
            "sittings": [{"file": s["file"], "started_utc": s["header"]["started_utc"], "tasks": len(s["tasks"]),
                          "complete": len(s["tasks"]) == ntasks} for s in sittings],
            "pairs_of_sittings": pairs}
    write_json_atomic(HERE / "results" / "agreement.json", data)
    lines = ["# Do two sittings of the same comparison agree? (`studies/sitting_agreement`)", "",
             f"Made {data['made']} (git {data['git']}) from the sittings kept in `studies/sitting_agreement/results/` "
             "(regenerate: `.venv/bin/python studies/sitting_agreement/run.py report`; nothing is measured by it). "
             f"{ntasks} development tasks, 7 plans each (identical plans measured once and not paired), 8 paired "
             "rounds per sitting, every sitting in fresh processes. Each plan pair is judged on each sitting's rounds "
             f"alone (verdict margin {C.EQUIVALENCE_MARGIN:.0%}); the targets are the same verdict on >= 95% of pairs "
             "and no opposite verdicts (faster in one sitting, slower in the other).", "",
             "| sitting | started (UTC) | tasks measured | judged |", "|---|---|---|---|"]
    lines += [f"| `{s['file']}` | {s['started_utc']} | {s['tasks']}/{ntasks} | "
              f"{'yes' if s['complete'] else 'no (stopped before its tasks were done; kept)'} |" for s in data["sittings"]]
    for p in pairs:
        lines += ["", f"## `{p['sittings'][0]}` and `{p['sittings'][1]}` ({p['hours_apart']} h apart)", "",
                  "| intervals | plan pairs | same verdict | opposite verdicts |", "|---|---|---|---|"]
        for rule in RULES:
            r = p[rule]
            lines.append(f"| {rule} | {r['pairs']} | {r['same']} ({r['same_share']:.1%}) | {r['opposite']} |")
        lines += ["", "Verdicts (first sitting / second sitting), intervals with the cpu spread:", "",
                  "| first \\ second | " + " | ".join(VERDICTS) + " |", "|---|" + "---|" * len(VERDICTS)]
        t = p["with the cpu spread"]["table"]
        lines += [f"| {a} | " + " | ".join(str(t.get(f"{a} / {b}", 0)) for b in VERDICTS) + " |" for a in VERDICTS]
    if not pairs:
        lines += ["", "Fewer than two complete sittings so far: nothing to compare yet."]
    text = "\n".join(lines) + "\n"
    write_text_atomic(HERE / "results" / "agreement.md", text)
    write_text_atomic(REPORT, text)
    print(text)
