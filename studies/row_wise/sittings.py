#!/usr/bin/env python
"""Write results/row_wise_sittings.md: every sitting the row-wise benchmark's records hold, task
by task -- the current record (results/row_wise.json) and the earlier records kept beside it
(results/row_wise-<made>.json, restored from git history where a re-measurement had replaced
them). Per sitting: when it was measured, by which code, NeuroShard's paired ratio to
torchrec_free with its interval, the verdict as recorded and what the four verdicts make of it
(shardlab.evaluate.stats.read_verdict), and whether its NeuroShard plan is the current record's.
Measures nothing.

    .venv/bin/python studies/row_wise/sittings.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardlab.evaluate.stats import read_verdict  # noqa: E402
from shardlab.io import read_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
METHOD, REFERENCE = "neuroshard", "torchrec_free"


def records(folder: Path) -> list[tuple[str, dict]]:
    """(file name, record) for the current record first, then the earlier ones by name (= date)."""
    names = ["row_wise.json"] + sorted(p.name for p in folder.glob("row_wise-*.json"))
    return [(n, read_json(folder / n)) for n in names if (folder / n).exists()]


def code(said: str | None) -> str:
    """The commit a task record says it was measured with, short; older records did not say."""
    if not said:
        return "not recorded"
    head, _, rest = said.partition(" ")
    return head[:12] + (f" {rest}" if rest else "")


def sittings(recs: list[tuple[str, dict]]) -> dict[str, list[dict]]:
    """Task -> its distinct sittings (a sitting = NeuroShard's per-round costs), newest record first."""
    current = {t["task"]: t for t in recs[0][1]["tasks"]} if recs else {}
    out: dict[str, list[dict]] = {}
    for name, rec in recs:
        for t in rec["tasks"]:
            e = t["evaluations"].get(METHOD)
            if e is None or not e.get("rounds_ms"):
                continue
            key = tuple(e["rounds_ms"])
            seen = next((s for s in out.get(t["task"], []) if s["key"] == key), None)
            if seen is not None:
                seen["files"].append(name)
                continue
            now = current.get(t["task"], {}).get("plans", {}).get(METHOD)
            plan = t.get("plans", {}).get(METHOD)
            same = "not kept" if plan is None else ("yes" if now is not None and
                                                    plan["placements"] == now["placements"] else "no")
            ci = e.get("ratio_ci95")
            out.setdefault(t["task"], []).append({
                "key": key, "files": [name], "measured": t.get("measured_at") or f"by {rec['date']}",
                "code": code(t.get("code")), "rounds": len(key),
                "ratio": e.get("ratio_to_reference"), "ci": ci, "said": e.get("verdict"),
                "now": read_verdict(e.get("verdict"), ci), "same_plan": same})
    return out


def markdown(recs: list[tuple[str, dict]], by_task: dict[str, list[dict]]) -> list[str]:
    """The page, line by line."""
    lines = ["# Row-wise benchmark: every sitting kept", "",
             f"Made by `studies/row_wise/sittings.py` from {', '.join(f'`results/{n}`' for n, _ in recs)} "
             f"(nothing measured). One row per sitting of a task's plans: {METHOD} against {REFERENCE}, "
             "the median of the per-round ratios with its 95% interval, the verdict as the record says it and "
             "as the four verdicts read it (margin 5%: `equivalent` inside [1/1.05, 1.05], else `inconclusive` "
             "for an interval containing 1). `same plan`: the sitting's NeuroShard plan is the current "
             "record's (`not kept`: that record kept no plans).", "",
             "| task | measured | code | rounds | x torchrec_free [95% CI] | recorded | four verdicts | same plan | in |",
             "|---|---|---|---|---|---|---|---|---|"]
    for task, rows in by_task.items():
        for s in rows:
            ci = f" [{s['ci'][0]:.3f}, {s['ci'][1]:.3f}]" if s["ci"] else ""
            lines.append(f"| {task} | {s['measured']} | {s['code']} | {s['rounds']} | {s['ratio']:.3f}{ci} | "
                         f"{s['said']} | {s['now']} | {s['same_plan']} | {', '.join(s['files'])} |")
    lines += ["", "Per record, NeuroShard against torchrec_free in the four verdicts:", ""]
    for name, rec in recs:
        now = [read_verdict(t["evaluations"][METHOD].get("verdict"), t["evaluations"][METHOD].get("ratio_ci95"))
               for t in rec["tasks"] if METHOD in t["evaluations"] and REFERENCE in t["evaluations"]]
        counts = {v: now.count(v) for v in ("faster", "equivalent", "inconclusive", "slower")}
        ok = counts["faster"] + counts["equivalent"]
        lines.append(f"- `results/{name}` (made {rec['date']}): faster or equivalent {ok}/{len(now)}; "
                     + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(RESULTS))
    args = ap.parse_args()
    folder = Path(args.results)
    recs = records(folder)
    text = "\n".join(markdown(recs, sittings(recs))) + "\n"
    (folder / "row_wise_sittings.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
