"""Measured datasets: export a store to JSON lines and load it back unchanged; every shipped
PROVENANCE.md says what its dataset holds and how its compute was timed, and nothing it lacks."""

from __future__ import annotations

import pytest

from shardlab.errors import ShardlabError
from shardlab.data.tasks import datasets_dir
from shardlab.measure.store import SampleStore, export_store, load_measured


def test_export_and_load_round_trip(tmp_path, monkeypatch):
    store = tmp_path / "s.db"
    with SampleStore(store) as s:
        s.add("compute", "a", {"total_ms": 1.0}, {"hardware": "x"})
        s.add("compute", "b", {"total_ms": 2.0}, {"hardware": "y"})
        s.add("comm:4", "c", {"fw_comm_ms": [1.0] * 4}, {"hardware": "x"})
        originals = {k: list(s.samples(k)) for k in ("compute", "comm:4")}
    counts = export_store(store, tmp_path / "ds" / "mine")
    assert counts == {"comm:4": 1, "compute": 2}
    monkeypatch.setenv("SHARDLAB_DATASETS", str(tmp_path / "ds"))
    for kind, rows in originals.items():
        assert list(load_measured(kind, "mine")) == rows
    with pytest.raises(ShardlabError, match="no kind 'comm:8'"):
        list(load_measured("comm:8", "mine"))


def test_shipped_cpu_dataset():
    compute = list(load_measured("compute", "cpu"))
    assert len(compute) >= 3000
    s = compute[0]
    assert s["total_ms"] > 0 and s["tables"] and s["provenance"]["profile"]["name"] == "cpu"
    assert {"hardware", "torch", "fbgemm_gpu", "date", "git", "command"} <= set(s["provenance"])
    comm4 = list(load_measured("comm:4", "cpu"))
    assert len(comm4) >= 1000 and len(comm4[0]["fw_comm_ms"]) == 4


def _export(tmp_path, name, samples, notes=False):
    """Export a store of ``samples`` ((kind, payload, provenance) triples) with the shipped
    generator; returns its PROVENANCE.md text."""
    from studies.tools.export_dataset import main

    store, out = tmp_path / f"{name}.db", tmp_path / name
    with SampleStore(store) as s:
        for i, (kind, payload, prov) in enumerate(samples):
            s.add(kind, f"{kind}:{i}", payload, {"hardware": "H", "torch": "t", "fbgemm_gpu": "f", "python": "p",
                                                 "git": "g", "profile": {"name": "h100"}, **prov})
    if notes:
        out.mkdir()
        (out / "NOTES.md").write_text("notes\n")
    assert main(["--store", str(store), "--out", str(out)]) == 0
    return (out / "PROVENANCE.md").read_text()


def test_provenance_md_says_only_what_the_dataset_holds_and_how_compute_was_timed(tmp_path):
    from shardlab.measure.hardware import HOST_SYNC_TIMING, TIMING_METHODS

    op = {"fw_ms": 1.0, "bw_ms": 2.0, "total_ms": 3.0, "total_spread_ms": [2.9, 3.1, 2.8, 3.2]}
    plan = {"rounds_cost_ms": [1.0, 1.2], "covers": "compute only", "task": {"name": "t"}, "method": "random"}
    gpu = _export(tmp_path, "gpu", [("compute", op, {"compute_timing": HOST_SYNC_TIMING}),
                                    ("plan_compute:4", plan, {"compute_timing": HOST_SYNC_TIMING})], notes=True)
    intro = gpu.split("\n")[2]
    assert "fbgemm TBE kernels (compute)" in intro and "all-to-all" not in intro and "(comm)" not in intro
    assert "around torch.cuda.synchronize() on both sides of each pass" in intro and f"`{HOST_SYNC_TIMING}`" in intro
    assert "Hand-written notes on these data: NOTES.md." in gpu and f"compute timing {HOST_SYNC_TIMING}" in gpu

    comm = {"fw_comm_ms": [1.0] * 4, "bw_comm_ms": [2.0] * 4}
    cpu = _export(tmp_path, "cpu", [("compute", op, {}), ("comm:4", comm, {})])
    intro = cpu.split("\n")[2]
    assert "(compute) or real torch.distributed all-to-alls between separate processes (comm)" in intro
    assert "timed with" not in intro and "NOTES.md" not in cpu          # none recorded; no notes beside it
    only_comm = _export(tmp_path, "rowcomm", [("rowcomm:4", comm, {})]).split("\n")[2]
    assert "row-wise collectives" in only_comm and "fbgemm" not in only_comm
    mixed = _export(tmp_path, "mixed", [("compute", op, {"compute_timing": TIMING_METHODS["cuda"]}),
                                        ("single", op, {"compute_timing": HOST_SYNC_TIMING})]).split("\n")[2]
    assert "(`compute_timing`: `cuda_events`; kinds compute)" in mixed and "; kinds single)" in mixed


#: A GPU lease's rounds as they came back (scripts/gpu/lease.py), kept beside its export: a record
#: the lease report reads, not a kind of samples.
LEASE_ROUNDS = "plan_rounds.jsonl.gz"


def _shipped_kinds(folder):
    """Kind -> the distinct compute_timing values of a shipped dataset folder's samples."""
    out = {}
    for f in sorted(p for p in folder.glob("*.jsonl.gz") if p.name != LEASE_ROUNDS):
        head, _, g = f.name[:-len(".jsonl.gz")].rpartition("_")
        kind = f"{head}:{g}" if g.isdigit() else f.name[:-len(".jsonl.gz")]
        rows = load_measured(kind, folder.relative_to(datasets_dir()).as_posix())
        out[kind] = {str(r["provenance"].get("compute_timing", "not recorded")) for r in rows}
    return out


def test_every_shipped_provenance_md_says_only_what_its_dataset_holds():
    from studies.tools.export_dataset import COMPUTE_KINDS, family, intro

    exported = [p for p in datasets_dir().rglob("PROVENANCE.md") if p.read_text().startswith("# Measured dataset")]
    measured = {f.parent for pattern in ("compute.jsonl.gz", "comm_*.jsonl.gz", "rowcomm_*.jsonl.gz", "plan_*.jsonl.gz")
                for f in datasets_dir().rglob(pattern)
                if f.name != LEASE_ROUNDS}
    assert {md.parent for md in exported} == measured          # every kernel / collective dataset, each exported
    assert {"cpu", "cpu/broad", "cpu/rows", "cpu/rowcomm", "h100"} <= {
        d.relative_to(datasets_dir()).as_posix() for d in measured}
    for md in exported:
        kinds = _shipped_kinds(md.parent)
        timings = {k: v for k, v in kinds.items() if family(k) in COMPUTE_KINDS}
        text = md.read_text()
        assert text.split("\n")[2] == intro(sorted(kinds), timings), md          # what the generator writes now
        assert ("NOTES.md" in text) == (md.parent / "NOTES.md").is_file(), md
    h100 = (datasets_dir() / "h100" / "PROVENANCE.md").read_text().split("\n")[2]
    assert "all-to-all" not in h100 and "torch.cuda.synchronize()" in h100


def test_every_shipped_held_out_plan_set_names_itself_and_only_the_tables_it_holds():
    from studies.common.heldout import POOL_SET, heldout_samples

    folders = sorted(p.parent for p in datasets_dir().rglob("heldout_plan.jsonl.gz"))
    assert len(folders) == 9
    for folder in folders:
        name = folder.relative_to(datasets_dir()).as_posix()
        text = (folder / "PROVENANCE.md").read_text()
        assert f'heldout_samples("{name}")' in text and heldout_samples(name)
        only_pool = {s["set"] for s in load_measured("heldout_plan", name)} == {POOL_SET}
        assert ("heldout_models" in text) != only_pool, name
