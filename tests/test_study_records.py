"""A study run's records: packed once finished without losing a byte, read in either form."""

from __future__ import annotations

import gzip
import json

import pytest

from studies.common.records import append_record, pack_run, read_run, rewrite_report, run_name, run_paths


def _write_run(folder, name, tasks=2):
    jsonl = folder / f"{name}.jsonl"
    with open(jsonl, "x") as f:
        append_record(f, {"kind": "header", "run": name})
        for i in range(tasks):
            append_record(f, {"kind": "task", "i": i})
    (folder / f"{name}.journal.jsonl").write_text("".join(json.dumps({"round": r}) + "\n" for r in range(3)))
    return jsonl


def test_packing_keeps_every_byte_and_removes_only_the_plain_files(tmp_path):
    jsonl = _write_run(tmp_path, "scale-20260101T000000Z")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    packed = pack_run(jsonl)
    assert packed.name == "scale-20260101T000000Z.jsonl.gz"
    after = sorted(p.name for p in tmp_path.iterdir())
    assert after == ["scale-20260101T000000Z.journal.jsonl.gz", "scale-20260101T000000Z.jsonl.gz"]
    for name, data in before.items():
        assert gzip.decompress((tmp_path / f"{name}.gz").read_bytes()) == data
    assert read_run(packed) == read_run_plain(before["scale-20260101T000000Z.jsonl"])


def read_run_plain(data: bytes):
    rows = [json.loads(x) for x in data.decode().splitlines()]
    return rows[0], [r for r in rows[1:] if r["kind"] == "task"]


def test_the_same_lines_pack_to_the_same_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    pa = pack_run(_write_run(a, "oversized-20260101T000000Z"))
    pb = pack_run(_write_run(b, "oversized-20260101T000000Z"))
    assert pa.read_bytes() == pb.read_bytes()


def test_run_paths_lists_runs_not_journals_and_each_run_once(tmp_path):
    pack_run(_write_run(tmp_path, "scale-20260102T000000Z"))
    _write_run(tmp_path, "scale-20260101T000000Z")                   # an unfinished run, still plain
    _write_run(tmp_path, "probe-20260101T000000Z")                   # another prefix
    names = [p.name for p in run_paths(tmp_path, "scale-")]
    assert names == ["scale-20260101T000000Z.jsonl", "scale-20260102T000000Z.jsonl.gz"]
    assert [run_name(p) for p in run_paths(tmp_path, "scale-")] == ["scale-20260101T000000Z", "scale-20260102T000000Z"]


def test_a_report_is_rewritten_beside_a_packed_run(tmp_path):
    packed = pack_run(_write_run(tmp_path, "scale-20260101T000000Z", tasks=3))
    md = rewrite_report(packed, lambda header, records: f"{header['run']}: {len(records)} tasks\n")
    assert md.name == "scale-20260101T000000Z.md"
    assert md.read_text() == "scale-20260101T000000Z: 3 tasks\n"


def test_a_packed_file_that_does_not_read_back_is_refused(tmp_path, monkeypatch):
    import studies.common.records as records

    jsonl = _write_run(tmp_path, "scale-20260101T000000Z")
    monkeypatch.setattr(records.gzip, "decompress", lambda data: b"not the same")
    with pytest.raises(OSError, match="did not read back"):
        pack_run(jsonl)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale-20260101T000000Z.journal.jsonl",
                                                          "scale-20260101T000000Z.jsonl"]


def test_a_runs_budget_passes_what_a_task_leaves_to_the_tasks_after_it():
    from shardlab.evaluate.sequential import task_budget
    assert task_budget(None, 12, 0, 0.0) is None
    assert task_budget(100.0, 4, 0, 0.0) == 100.0                  # the first task: an even share
    assert task_budget(100.0, 4, 1, 40.0) == pytest.approx(120.0)  # 60 s left over, shared by the 3 left
    assert task_budget(100.0, 4, 3, 200.0) == pytest.approx(200.0)  # the last task: all that is left
    assert task_budget(100.0, 4, 2, 390.0) == pytest.approx(10.0)   # overrun: never below a tenth


def test_a_measured_run_keeps_each_record_as_measured_and_a_crash_loses_none_before_it(tmp_path):
    from studies.common.records import measure_run, new_run

    run_id, jsonl = new_run(tmp_path / "results", "demo-")
    assert run_id.startswith("demo-") and jsonl == tmp_path / "results" / f"{run_id}.jsonl"
    seen = []

    def report(header, records):
        seen.append(len(records))
        return f"{header['run']}: {len(records)} records\n"

    def measure(i, item):
        if item == "boom":
            raise RuntimeError("cut off")
        return {"kind": "task", "task": item, "index": i}

    header = {"kind": "header", "run": run_id}
    packed = measure_run(jsonl, header, ["a", "b"], measure, report, "demo", progress=False)
    got_header, records = read_run(packed)
    assert got_header == header and [(r["task"], r["index"]) for r in records] == [("a", 0), ("b", 1)]
    assert all(r["seconds"] >= 0 for r in records) and seen == [1, 2]
    assert (tmp_path / "results" / f"{run_id}.md").read_text() == f"{run_id}: 2 records\n"
    with pytest.raises(FileExistsError):                       # a run's file is never written twice
        measure_run(jsonl.with_suffix(".jsonl.gz"), header, ["c"], measure, report, "demo", progress=False)
    crashed = tmp_path / "crashed.jsonl"
    with pytest.raises(RuntimeError):
        measure_run(crashed, header, ["a", "boom"], measure, report, "demo", progress=False)
    lines = [json.loads(x) for x in crashed.read_text().splitlines()]
    assert lines[0] == header and [r["task"] for r in lines[1:]] == ["a"]      # what was measured is kept


def test_a_driver_reports_a_stored_run_or_runs_and_a_bad_input_is_one_line(tmp_path, capsys):
    import argparse

    from shardlab.errors import ShardlabError
    from studies.common.records import add_run_options, run_or_report

    ap = argparse.ArgumentParser()
    add_run_options(ap, rounds=6, results=tmp_path)
    args = ap.parse_args([])
    assert (args.rounds, args.sittings, args.out, args.report) == (6, 2, str(tmp_path), None)

    def bad():
        raise ShardlabError("field 'sizes' = 'x' must name sizes")

    assert run_or_report(args, lambda h, r: "", bad) == 2
    assert capsys.readouterr().err.strip() == "error: field 'sizes' = 'x' must name sizes"
    assert run_or_report(args, lambda h, r: "", lambda: tmp_path / "run.jsonl.gz") == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "run.jsonl.gz")
