"""studies/set1_development/agreement.py: two runs of set 1 compared verdict by verdict, on the
stored development run and on a copy of it with verdicts and a reference changed."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

from studies.set1_development import agreement as ag

STORED = Path(ag.RESULTS) / "set1-20261129T095052Z.jsonl.gz"


def _lines():
    return [json.loads(x) for x in gzip.open(STORED, "rt")]


def test_a_run_agrees_with_itself():
    out = ag.agreement(STORED, STORED)
    first = out["first"]
    assert first["tasks"] == 12 and first["verdicts"] == 12 * 8 and out["opposite"] == 0
    assert out["same"] == out["compared"] == out["pairs"] and out["confirmed"] == out["decisive_first"]
    assert first["counts"]["inconclusive"] == round(first["inconclusive"] * first["verdicts"])
    assert first["mean_sittings"] == 2 and first["mean_rounds"] == 16 and first["seconds"] is None
    assert 12 * 16 < first["plan_rounds"] <= 12 * 9 * 16
    assert ag.run_summary(STORED, 1290.0)["seconds_per_plan_round"] == 1290.0 / first["plan_rounds"]


def test_opposite_verdicts_and_another_reference_are_counted(tmp_path):
    lines = _lines()
    changed = copy.deepcopy(lines)
    task = changed[2]
    ref = next(iter(task["evaluations"].values()))["reference"]
    flips = [m for m, e in task["evaluations"].items() if m != ref and e["verdict"] in ("faster", "slower")]
    other = next(m for m, e in changed[3]["evaluations"].items() if e["reference"] != m)
    for m in flips:
        task["evaluations"][m]["verdict"] = {"faster": "slower", "slower": "faster"}[task["evaluations"][m]["verdict"]]
    ref2 = next(iter(changed[3]["evaluations"].values()))["reference"]
    changed[3]["plans"][ref2] = changed[3]["plans"][other]          # the second run's reference is another plan
    path = tmp_path / "set1-20990101T000000Z.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in changed))
    out = ag.agreement(STORED, path)
    assert flips and out["opposite"] == len(flips) and out["other_reference"] == 8
    assert out["confirmed"] == out["decisive_first"] - len(flips)
    text = ag.markdown(out)
    assert f"opposite verdicts on **{len(flips)}**" in text and "(not compared)" in text


def test_a_rerun_can_name_each_tasks_reference_from_an_earlier_run():
    from studies.set1_development.run import references_of

    refs = references_of(STORED)
    lines = _lines()
    assert len(refs) == 12 and all(refs[r["task"]["name"]] == next(iter(r["evaluations"].values()))["reference"]
                                   for r in lines[1:])
