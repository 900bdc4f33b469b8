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
