"""The GPU lease, rehearsed without a GPU: fbgemm-gpu's sm_90 pack, the device plan's size and
time, the shipped plans, and the whole measuring call as a CPU dry run (scripts/gpu/README.md)."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import math
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from shardlab.plan import Plan, device_memory_bytes, validate_plan
from shardlab.measure.store import SampleStore
from shardlab.tables import Task

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "scripts" / "gpu"
MIB = 1 << 20
CALL_LIMIT = 64 * MIB          # what one device call may carry, working tree included
PLAN_LIMIT_S = 12 * 60         # the whole lease, start and give-back included
MEASURE_LIMIT_S = 7 * 60       # the one measuring call


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, GPU / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod                     # process pools pickle its functions by module name
    spec.loader.exec_module(mod)
    return mod


pack = _module("fbgemm_pack")
lease = _module("lease")


# ----------------------------------------------------------------------------- a synthetic shared library

def fatbin(payloads: dict[int, bytes]) -> bytes:
    """One fatbin: its header, then a 64-byte entry header (kind 2, arch at byte 28) per payload."""
    body = b""
    for arch, data in payloads.items():
        head = bytearray(64)
        struct.pack_into("<HHIQ", head, 0, 2, 0x101, 64, len(data))
        struct.pack_into("<I", head, 28, arch)
        body += bytes(head) + data
    return struct.pack("<IHHQ", pack.FATBIN_MAGIC, 1, 16, len(body)) + body


def elf_with(sections: dict[str, bytes]) -> bytes:
    """A minimal little-endian ELF64 file holding ``sections`` (and its section-name table)."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in list(sections) + [".shstrtab"])
    blobs, data, offset = [], b"", 64
    for n, b in list(sections.items()) + [(".shstrtab", names)]:
        blobs.append((names.index(n.encode() + b"\0"), offset, len(b)))
        data += b
        offset += len(b)
    head = bytearray(64)
    head[:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", head, 0x28, 64 + len(data))
    struct.pack_into("<HHH", head, 0x3A, 64, len(blobs) + 1, len(blobs))
    table = bytes(64) + b"".join(struct.pack("<IIQQQQIIQQ", nm, 1, 0, 0, off, size, 0, 0, 1, 0)
                                 for nm, off, size in blobs)
    return bytes(head) + data + table


PAYLOADS = {80: b"A" * 300, 90: b"B" * 200, 100: b"C" * 100}


def test_prune_zeroes_other_architectures_and_nothing_else():
    original = elf_with({".text": b"host code", ".nv_fatbin": fatbin(PAYLOADS)})
    pruned = bytearray(original)
    assert pack.prune(pruned) == 400
    assert len(pruned) == len(original)
    entries = {arch: (at, size) for _, arch, at, size in pack.fatbin_entries(pruned)}
    assert sorted(entries) == [80, 90, 100]               # every header is still there
    at, size = entries[90]
    assert pruned[at:at + size] == PAYLOADS[90]
    for arch in (80, 100):
        at, size = entries[arch]
        assert pruned[at:at + size] == bytes(size)
    changed = [i for i, (a, b) in enumerate(zip(original, pruned)) if a != b]
    inside = {i for arch in (80, 100) for i in range(entries[arch][0], sum(entries[arch]))}
    assert changed and set(changed) <= inside


def test_prune_refuses_a_library_without_the_kept_architecture():
    with pytest.raises(ValueError, match="no device code"):
        pack.prune(bytearray(elf_with({".nv_fatbin": fatbin({80: b"A" * 10})})))


def _wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("fbgemm_gpu/__init__.py", "x = 1\n")
        z.writestr("fbgemm_gpu/lib.so", elf_with({".nv_fatbin": fatbin(PAYLOADS)}))
        z.writestr("fbgemm_gpu-1.6.0.dist-info/RECORD", "")
    return path


def test_pack_then_unpack_gives_the_checked_pruned_files(tmp_path):
    wheel = _wheel(tmp_path / "w.whl")
    with pytest.raises(SystemExit, match="sha256"):
        pack.pack(wheel, tmp_path / "p", 1, 1, "0" * 64)
    m = pack.pack(wheel, tmp_path / "p", 1, 1, hashlib.sha256(wheel.read_bytes()).hexdigest())
    assert set(m["files"]) == {"fbgemm_gpu/__init__.py", "fbgemm_gpu/lib.so", "fbgemm_gpu-1.6.0.dist-info/RECORD"}
    assert m["zeroed_bytes"] == 400
    stash = tmp_path / "stash"
    assert pack.stash(tmp_path / "p", stash) == ["fbgemm-sm90.part-00"]
    assert pack.unpack(stash, tmp_path / "site", m, 1) == 3
    lib = (tmp_path / "site" / "fbgemm_gpu" / "lib.so").read_bytes()
    assert hashlib.sha256(lib).hexdigest() == m["files"]["fbgemm_gpu/lib.so"]["sha256"]
    assert b"B" * 200 in lib and b"A" * 300 not in lib


def test_unpack_refuses_a_damaged_part_and_a_file_not_in_the_manifest(tmp_path):
    wheel = _wheel(tmp_path / "w.whl")
    m = pack.pack(wheel, tmp_path / "p", 1, 1, None)
    part = tmp_path / "p" / "fbgemm-sm90.part-00"
    good = part.read_bytes()
    part.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(SystemExit, match="not the packed archive"):
        pack.unpack(tmp_path / "p", tmp_path / "site", m, 1)
    part.write_bytes(good)
    del m["files"]["fbgemm_gpu/lib.so"]
    with pytest.raises(SystemExit, match="not in the manifest"):
        pack.unpack(tmp_path / "p", tmp_path / "site", m, 1)


def test_split_archive_makes_the_fewest_equal_parts(tmp_path):
    archive = tmp_path / "a.tar"
    data = np.random.default_rng(0).bytes(5 * MIB + 7)
    archive.write_bytes(data)
    parts = pack.split_archive(archive, 2)
    assert [p.name for p in parts] == ["a.part-00", "a.part-01", "a.part-02"]
    sizes = [p.stat().st_size for p in parts]
    assert max(sizes) <= 2 * MIB and max(sizes) - min(sizes) <= 2
    assert b"".join(p.read_bytes() for p in parts) == data


# ----------------------------------------------------------------------------- the device plan

def _tree_bytes() -> int:
    """Bytes of what a device call carries besides its ``carry``: tracked and untracked,
    not-ignored files of the checkout."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode().split("\0")
    return sum((ROOT / f).stat().st_size for f in out if f and (ROOT / f).is_file())


def test_the_device_plan_fits_its_time_and_every_call_its_64_mib():
    calls = json.loads((GPU / "lease_calls.json").read_text())
    manifest = json.loads(pack.manifest_path().read_text())
    nparts = math.ceil(manifest["archive_bytes"] / (pack.PART_MIB * MIB))
    part_bytes = math.ceil(manifest["archive_bytes"] / nparts)
    carried = [p for c in calls["calls"] for p in c["carry"]]
    assert carried == [f".whl/fbgemm-sm90.part-{i:02d}" for i in range(nparts)]
    tree = _tree_bytes()
    for c in calls["calls"]:
        assert tree + part_bytes * len(c["carry"]) <= CALL_LIMIT, (c["what"], tree, part_bytes)
        assert c["device_s"] <= c["timeout_s"] <= 600
    total = (calls["start_s"] + sum(c["device_s"] for c in calls["calls"])
             + calls["gap_s"] * (len(calls["calls"]) - 1) + calls["give_back_s"])
    assert total <= calls["budget_s"] <= PLAN_LIMIT_S
    measuring = [c for c in calls["calls"] if "lease.py" in c["command"]]
    assert len(measuring) == 1 and measuring[0]["timeout_s"] <= MEASURE_LIMIT_S
    minutes = float(measuring[0]["command"].split("--minutes ")[1].split()[0])
    assert 60 * minutes + 30 <= measuring[0]["timeout_s"]      # unpack and imports fit beside the budget
    readme = (GPU / "README.md").read_text().replace("\\|", "|")
    for c in calls["calls"]:
        assert c["command"] in readme, c["what"]


def test_the_shipped_plans_cover_the_seeds_shapes_with_every_method():
    from studies.gpu_compute.lease_plans import FAMILIES, PLANS, SEED_TABLES, lease_methods, read_plans

    shipped, digest = read_plans(PLANS)
    # the digest the H200 lease reports cite: the plans timed there are these
    assert digest.startswith("b2a5e8749a49")
    assert shipped["made"]["profile"] == "h100" and shipped["made"]["methods"] == lease_methods()
    entries = shipped["tasks"]
    shapes = [(len(e["task"]["tables"]), e["task"]["ngpu"]) for e in entries]
    assert shapes[:len(SEED_TABLES)] == [(n, 4) for n in SEED_TABLES]
    assert [e["task"]["ngpu"] for e in entries[len(SEED_TABLES):]] == [8] * len(FAMILIES)
    for e in entries:
        task = Task.from_dict(e["task"])
        assert task.batch_size == 65536 and task.mem_cap_gb == 4.0
        assert set(e["plans"]) | set(e["skipped"]) == set(lease_methods())
        assert "torchrec" in e["plans"]
        for p in e["plans"].values():
            plan = Plan.from_dict(p)
            validate_plan(task, plan)
            assert max(device_memory_bytes(task, plan)) <= task.mem_cap_gb * 2**30


def test_stratified_picks_spread_over_the_cost_bins():
    samples = [{"key": f"k{i}", "total_ms": float(x)} for i, x in enumerate(np.random.default_rng(1).random(96))]
    picked = lease.stratified(samples, 24)
    assert len({s["key"] for s in picked}) == 24 and picked == lease.stratified(samples, 24)
    ranks = sorted(sorted(samples, key=lambda s: s["total_ms"]).index(s) for s in picked)
    assert [sum(1 for r in ranks if 12 * b <= r < 12 * (b + 1)) for b in range(8)] == [3] * 8


# ----------------------------------------------------------------------------- the measuring call, rehearsed

def test_the_measuring_call_rehearsed_on_the_cpu(tmp_path):
    """lease_plans --dry-run, lease --profile cpu --dry-run and lease_report, as the README runs
    them: every phase writes its file, rounds are paired and complete, the report judges every
    task and says it is not a GPU result."""
    py = sys.executable
    plans, out, res = tmp_path / "plans.json", tmp_path / "out", tmp_path / "results"
    run = lambda *a: subprocess.run([py, *a], cwd=ROOT, capture_output=True, text=True, timeout=1800)  # noqa: E731
    r = run("studies/gpu_compute/lease_plans.py", "--dry-run", "--out", str(plans))
    assert r.returncode == 0, r.stderr[-2000:]
    r = run("scripts/gpu/lease.py", "--profile", "cpu", "--dry-run", "--plans", str(plans), "--out", str(out),
            "--minutes", "60", "--workers", "2")   # deadlines never bind: load-proof
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["broad.db", "floor.db", "plan_rounds.jsonl"]
    lines = [json.loads(x) for x in (out / "plan_rounds.jsonl").read_text().splitlines()]
    header, rounds = lines[0]["header"], lines[1:]
    assert header["dry_run"] is True and header["compute_timing"] == "perf_counter"
    entries = json.loads(plans.read_text())["tasks"]
    for e in entries:
        mine = [x for x in rounds if x["task"] == e["task"]["name"]]
        assert [x["sitting"] for x in mine].count("judged") == lease.DRY["rounds"]
        judged = [x for x in mine if x["sitting"] == "judged"][0]
        measured = set(judged["compute_ms"]) | set(judged["same_as"])
        assert measured == set(e["plans"])
        ngpu = e["task"]["ngpu"]
        assert all(len(v) == ngpu and all(len(d) == 2 and min(d) >= 0 for d in v) for v in judged["compute_ms"].values())
    with SampleStore(str(out / "floor.db"), create=False) as st:
        assert len(list(st.samples("compute"))) == lease.DRY["fused"]
        assert len(list(st.samples("single"))) == lease.DRY["single"]
    with SampleStore(str(out / "broad.db"), create=False) as st:
        assert len(list(st.samples("compute"))) == lease.DRY["broad"]
    r = run("studies/gpu_compute/lease_report.py", "--lease", str(out), "--plans", str(plans), "--out", str(res),
            "--name", "dry")
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((res / "dry.json").read_text())
    assert [t["task"] for t in report["tasks"]] == [e["task"]["name"] for e in entries]
    assert all(t["complete"] and t["judged_rounds"] == lease.DRY["rounds"] for t in report["tasks"])
    for t in report["tasks"]:
        assert all(e.get("verdict") in ("faster", "slower", "equivalent", "inconclusive")
                   for m, e in t["evaluations"].items() if m != t["reference"])
    assert report["floor"]["compute"]["paired"] == lease.DRY["fused"]
    assert "not a GPU result" in (res / "dry.md").read_text()
    again = run("studies/gpu_compute/lease_report.py", "--lease", str(out), "--plans", str(plans), "--out", str(res),
                "--name", "dry")
    assert again.returncode != 0 and "never overwritten" in again.stderr


def test_the_kernel_check_passes_on_fbgemm_and_stops_a_wrong_kernel(monkeypatch):
    import shardlab.measure.compute as compute
    from shardlab.measure.hardware import get_profile

    prof = get_profile("cpu")
    assert lease.kernel_check(prof)["fused_op_forward_max_abs_error"] <= 1e-4
    real = compute.build_tbe

    class OffByOne(torch.nn.Module):
        def __init__(self, op):
            super().__init__()
            self.op = op

        def split_embedding_weights(self):
            return self.op.split_embedding_weights()

        def forward(self, indices, offsets):
            return self.op(indices, offsets) + 1e-3

    monkeypatch.setattr(compute, "build_tbe", lambda *a: OffByOne(real(*a)))
    with pytest.raises(SystemExit, match="forward is wrong"):
        lease.kernel_check(prof)


# What the lease image lacks (it has torch, numpy and tqdm, and fbgemm-gpu once unpacked): the
# measuring call must load without these. Its first run on a lent H200 stopped at ``import highspy``.
NOT_ON_THE_IMAGE = ("highspy", "scipy", "sklearn", "pandas", "plotly", "torchrec", "ipywidgets", "yaml")


def test_the_measuring_call_loads_without_what_the_image_lacks():
    blocker = (
        "import importlib.abc, runpy, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name.split('.')[0] in {NOT_ON_THE_IMAGE!r}:\n"
        "            raise ImportError('not on the image: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.argv = ['lease.py', '--help']\n"
        "runpy.run_path('scripts/gpu/lease.py', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--minutes" in done.stdout


def test_the_exact_planner_without_highspy_says_so_in_one_line(monkeypatch):
    from shardlab.errors import ShardlabError
    from shardlab.search import exact
    monkeypatch.setattr(exact, "highspy", None)
    with pytest.raises(ShardlabError, match="needs highspy") as err:
        exact.solver_name()
    assert "\n" not in str(err.value)
