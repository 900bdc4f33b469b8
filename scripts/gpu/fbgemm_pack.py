#!/usr/bin/env python3
"""Pack fbgemm-gpu for a lent GPU machine in as few device calls as possible, and unpack it there.

The device image has torch but no fbgemm-gpu and no network, and one device call carries at
most 64 MiB (working tree included). The fbgemm-gpu 1.6.0 wheel is 465 MB (2.4 GB unpacked),
and ~70 % of that is CUDA device code for three GPU architectures (sm_80, sm_90, sm_100) of
which an H100 or H200 (compute capability 9.0) loads only sm_90. So:

``pack`` (here, no GPU needed; stdlib only):
  1. checks the wheel's sha256 against ``fbgemm-<version>.sha256`` beside this file;
  2. unpacks it and, in every shared library's ``.nv_fatbin`` section, overwrites with zeros the
     payload of each device-code entry whose architecture is not in ``KEEP_ARCHS`` (the entry
     headers stay, so every offset and size is unchanged and the driver still selects the sm_90
     image it would have selected from the original file; no byte of the kept code changes);
  3. compresses every file on its own with xz (the zeroed payloads cost almost nothing) into one
     uncompressed tar, ``.whl/fbgemm-sm90.tar``, split into the fewest equal parts of at most
     ``--part-mib`` MiB, ``.whl/fbgemm-sm90.part-NN`` (git-ignored; each travels in one device
     call): 61.6 MiB in two parts for 1.6.0, against 465 MB for the wheel;
  4. writes ``fbgemm-<version>-sm90.json`` beside this file: the wheel's sha256, the rule, and
     each unpacked file's size and sha256 after pruning (committed: the device checks the files
     against it, so a part that arrives damaged or a pack made by another rule is refused).

``stash`` (there): copies the carried parts to ``/tmp/fbw`` (kept while the machine stays warm).

``unpack`` (there): joins the parts, decompresses every file in parallel into ``/tmp/site``,
checks each against the committed manifest, and prints one line. Then
``PYTHONPATH=/tmp/site python3 -c "import fbgemm_gpu"`` works as with ``pip install``.

    python3 scripts/gpu/fbgemm_pack.py pack [--wheel PATH] [--part-mib 34]
    python3 scripts/gpu/fbgemm_pack.py stash
    python3 scripts/gpu/fbgemm_pack.py unpack [--site /tmp/site]

The fatbin layout read here (header: magic 0xBA55ED50, u16 version, u16 header size, u64 body
size; then entries: u16 kind, u16 version, u32 header size, u64 payload size, ..., u32
architecture at byte 28) is the one ``cuobjdump`` lists; ``scan`` prints it per file.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import os
import shutil
import struct
import sys
import tarfile
import tempfile
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VERSION = os.environ.get("FBGEMM_VERSION", "1.6.0")
WHEEL = f"fbgemm_gpu-{VERSION}-cp312-cp312-manylinux_2_28_x86_64.whl"
#: GPU architectures whose device code is kept (compute capability x 10): H100 and H200 are 9.0.
KEEP_ARCHS = (90,)
#: Most MiB per carried part: the working tree (~33 MiB, and growing) + one part stays under a
#: call's 64 MiB (tests/test_gpu_lease.py checks it against the tree as it is): three parts of
#: about 20.6 MiB, so the tree may grow by 10 MiB more.
PART_MIB = 22
PACK_DIR = ROOT / ".whl"
ARCHIVE = "fbgemm-sm90.tar"
STASH = Path("/tmp/fbw")
FATBIN_MAGIC = 0xBA55ED50


def manifest_path(version: str = VERSION) -> Path:
    """The committed manifest of the pruned files (sha256 and size of each)."""
    return HERE / f"fbgemm-{version}-sm90.json"


# ----------------------------------------------------------------------------- fatbin pruning

def _sections(elf: bytes | bytearray) -> dict[str, tuple[int, int]]:
    """``{section name: (file offset, size)}`` of a little-endian ELF64 file."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        return {}
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]
    out = {}
    for h in heads:
        start = names_at + h[0]
        out[elf[start:elf.index(b"\0", start)].decode()] = (h[4], h[5])
    return out


def fatbin_entries(elf: bytes | bytearray) -> Iterator[tuple[int, int, int, int]]:
    """``(kind, arch, payload offset, payload size)`` of every entry of the ELF's
    ``.nv_fatbin`` section (kind 1: PTX, 2: device ELF; arch: compute capability x 10)."""
    sec = _sections(elf).get(".nv_fatbin")
    if sec is None:
        return
    p, end = sec[0], sec[0] + sec[1]
    while p + 16 <= end:
        magic, _, head, body = struct.unpack_from("<IHHQ", elf, p)
        if magic != FATBIN_MAGIC:        # padding between fatbins
            p += 8
            continue
        q, stop = p + head, p + head + body
        while q < stop:
            kind, _, ehead, size = struct.unpack_from("<HHIQ", elf, q)
            arch, = struct.unpack_from("<I", elf, q + 28)
            yield kind, arch, q + ehead, size
            q += ehead + size
        if q != stop:
            raise ValueError(f"fatbin at {p:#x}: entries end at {q:#x}, not at {stop:#x}")
        p = stop


def prune(elf: bytearray, keep: tuple[int, ...] = KEEP_ARCHS) -> int:
    """Zero, in place, the payload of every fatbin entry whose arch is not in ``keep``; returns
    the bytes zeroed. Refuses a file that would keep no entry although it has some."""
    entries = list(fatbin_entries(elf))
    if entries and not any(a in keep for _, a, _, _ in entries):
        raise ValueError(f"no device code for archs {keep} (has {sorted({a for _, a, _, _ in entries})})")
    zeroed = 0
    for _, arch, at, size in entries:
        if arch not in keep:
            elf[at:at + size] = bytes(size)
            zeroed += size
    return zeroed


# ----------------------------------------------------------------------------- pack (here)

def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _pack_one(args: tuple[str, str]) -> tuple[str, int, str, int, bytes]:
    """Prune (if a shared library) and xz one unpacked file: (name, size, sha256, zeroed, xz)."""
    root, name = args
    data = bytearray(Path(root, name).read_bytes())
    zeroed = prune(data) if name.endswith(".so") else 0
    return name, len(data), hashlib.sha256(data).hexdigest(), zeroed, lzma.compress(bytes(data), preset=9)


def split_archive(archive: Path, max_part_mib: int) -> list[Path]:
    """Split ``archive`` into the fewest parts of at most ``max_part_mib`` MiB, of equal size
    (the last one a little smaller), named ``<archive stem>.part-NN`` beside it."""
    for old in archive.parent.glob(archive.stem + ".part-*"):
        old.unlink()
    size = archive.stat().st_size
    n = max(1, -(-size // (max_part_mib << 20)))
    part = -(-size // n)
    out = []
    with open(archive, "rb") as f:
        for i, block in enumerate(iter(lambda: f.read(part), b"")):
            out.append(archive.parent / f"{archive.stem}.part-{i:02d}")
            out[-1].write_bytes(block)
    return out


def pack(wheel: Path, out_dir: Path, part_mib: int, workers: int, expected_sha: str | None) -> dict:
    """Steps 1-4 of the module docstring; returns the manifest."""
    sha = sha256_file(wheel)
    if expected_sha is not None and sha != expected_sha:
        raise SystemExit(f"fbgemm_pack: {wheel.name}: sha256 {sha} is not the expected {expected_sha}")
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp)
            names = sorted(n for n in z.namelist() if not n.endswith("/"))
        with ProcessPoolExecutor(workers) as pool:
            packed = list(pool.map(_pack_one, [(tmp, n) for n in names]))
    files = {n: {"size": size, "sha256": digest} for n, size, digest, _, _ in packed}
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / ARCHIVE
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for n, _, _, _, blob in packed:
            info = tarfile.TarInfo(n + ".xz")
            info.size, info.mtime, info.mode = len(blob), 0, 0o644
            tar.addfile(info, io.BytesIO(blob))
    split_archive(archive, part_mib)
    manifest = {"wheel": wheel.name, "wheel_sha256": sha, "keep_archs": list(KEEP_ARCHS),
                "rule": "every fatbin entry of another architecture has its payload zeroed; headers, "
                        "offsets and kept code unchanged",
                "unpacked_bytes": sum(f["size"] for f in files.values()),
                "zeroed_bytes": sum(z for _, _, _, z, _ in packed),
                "archive_bytes": archive.stat().st_size, "archive_sha256": sha256_file(archive),
                "files": files}
    return manifest


# ----------------------------------------------------------------------------- stash, unpack (there)

def stash(src: Path, dest: Path = STASH) -> list[str]:
    """Copy the carried parts into ``dest``; returns what ``dest`` holds."""
    dest.mkdir(parents=True, exist_ok=True)
    for p in sorted(src.glob(ARCHIVE.replace(".tar", ".part-*"))):
        shutil.copyfile(p, dest / p.name)
    return sorted(p.name for p in dest.iterdir())


def _unpack_one(args: tuple[str, bytes, str, int]) -> str | None:
    """Decompress one file to its place; None if it matches the manifest, else why not."""
    target, blob, want_sha, want_size = args
    data = lzma.decompress(blob)
    if len(data) != want_size or hashlib.sha256(data).hexdigest() != want_sha:
        return f"{target}: not the packed file (size {len(data)}, want {want_size})"
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_bytes(data)
    return None


def unpack(parts: Path, site: Path, manifest: dict, workers: int) -> int:
    """Join the parts in ``parts``, check the archive's sha256, decompress every file into
    ``site`` in parallel and check each against ``manifest``; returns the files written."""
    names = sorted(parts.glob(ARCHIVE.replace(".tar", ".part-*")))
    h, blobs = hashlib.sha256(), io.BytesIO()
    for p in names:
        block = p.read_bytes()
        h.update(block)
        blobs.write(block)
    if h.hexdigest() != manifest["archive_sha256"]:
        raise SystemExit(f"fbgemm_pack: the {len(names)} parts in {parts} are not the packed archive "
                         f"(sha256 {h.hexdigest()[:16]}..., want {manifest['archive_sha256'][:16]}...)")
    blobs.seek(0)
    jobs = []
    with tarfile.open(fileobj=blobs, mode="r:") as tar:
        for m in tar.getmembers():
            name = m.name[:-3]
            want = manifest["files"].get(name)
            if want is None or not m.isfile() or ".." in Path(name).parts or Path(name).is_absolute():
                raise SystemExit(f"fbgemm_pack: archive member '{m.name}' is not in the manifest")
            jobs.append((str(site / name), tar.extractfile(m).read(), want["sha256"], want["size"]))
    if len(jobs) != len(manifest["files"]):
        raise SystemExit(f"fbgemm_pack: archive holds {len(jobs)} files, manifest {len(manifest['files'])}")
    with ProcessPoolExecutor(workers) as pool:
        bad = [b for b in pool.map(_unpack_one, jobs) if b]
    if bad:
        raise SystemExit(f"fbgemm_pack: {len(bad)} files differ from the manifest, first: {bad[0]}")
    return len(jobs)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="here: check, prune, compress and split the wheel")
    p.add_argument("--wheel", type=Path, default=PACK_DIR / WHEEL)
    p.add_argument("--out", type=Path, default=PACK_DIR)
    p.add_argument("--part-mib", type=int, default=PART_MIB)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--manifest", type=Path, default=manifest_path())
    s = sub.add_parser("stash", help="there: copy the carried parts to /tmp/fbw")
    s.add_argument("--parts", type=Path, default=PACK_DIR)
    u = sub.add_parser("unpack", help="there: join, check and decompress into --site")
    u.add_argument("--parts", type=Path, default=STASH)
    u.add_argument("--site", type=Path, default=Path("/tmp/site"))
    u.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    u.add_argument("--manifest", type=Path, default=manifest_path())
    sc = sub.add_parser("scan", help="list the fatbin entries (kind, arch, MiB) of shared libraries")
    sc.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "pack":
        sha_file = HERE / f"fbgemm-{VERSION}.sha256"
        expected = sha_file.read_text().split()[0] if sha_file.exists() else None
        m = pack(args.wheel, args.out, args.part_mib, args.workers, expected)
        args.manifest.write_text(json.dumps(m, indent=1, sort_keys=True) + "\n")
        nparts = len(list(args.out.glob(ARCHIVE.replace(".tar", ".part-*"))))
        print(f"packed {len(m['files'])} files: {m['unpacked_bytes'] / 2**20:.0f} MiB unpacked, "
              f"{m['zeroed_bytes'] / 2**20:.0f} MiB of other archs zeroed, archive "
              f"{m['archive_bytes'] / 2**20:.1f} MiB in {nparts} part(s) of <= {args.part_mib} MiB")
    elif args.cmd == "stash":
        print("stashed:", " ".join(stash(args.parts)))
    elif args.cmd == "unpack":
        if (args.site / "fbgemm_gpu" / "__init__.py").exists():
            print(f"fbgemm_gpu already in {args.site}")
            return
        n = unpack(args.parts, args.site, json.loads(args.manifest.read_text()), args.workers)
        print(f"unpacked {n} files into {args.site}, each matching {args.manifest.name}")
    else:
        for f in args.files:
            agg: dict[tuple[int, int], int] = {}
            for kind, arch, _, size in fatbin_entries(f.read_bytes()):
                agg[(kind, arch)] = agg.get((kind, arch), 0) + size
            print(f.name, {f"{'ptx' if k == 1 else 'elf'}:sm_{a}": round(v / 2**20, 1) for (k, a), v in sorted(agg.items())})


if __name__ == "__main__":
    sys.exit(main())
