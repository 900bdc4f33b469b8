"""The machine measurements run on: hardware profiles (how costs are measured), core pinning,
and the provenance every measurement carries.

**Profiles.** A profile fixes the device kind, the batch size the kernels are timed at, weight
precision, optimizer, communication backend and timing settings. Every measured sample records
the profile it was taken under, and cost models are trained per profile. On CPU a batch of
65536 costs seconds per fused op, so the CPU profile times a smaller batch and says so.

**Pinning.** On a small shared VM the scheduler moves a timed process between cores (cold
caches, a neighbour's work); pinning each comm rank and the compute-measuring process to a core
of their own (round-robin over the cores this process may use) removes that part of the noise.
Where ``os.sched_setaffinity`` does not exist (macOS, Windows) or refuses, nothing is pinned and
the functions say so by returning None / False. What pinning buys here is measured in
``datasets/cpu/NOTES.md``.

**Provenance**: which machine, which versions, when, by which command, at which code revision,
how compute was timed (``compute_timing``), and on a CUDA device the GPU's state
(:func:`gpu_info`: name, driver, CUDA runtime, SM and memory clocks in MHz, current and
maximum, P-state, power limit in W), read from ``nvidia-smi`` where it answers.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

from shardlab.data.hardware_profiles import HardwareProfile, known_profiles, profile_folder
from shardlab.errors import ShardlabError

ROOT = Path(__file__).resolve().parents[2]

#: How the compute profiler times a pass on each device kind (shardlab.measure.compute).
TIMING_METHODS = {"cpu": "perf_counter", "cuda": "cuda_events"}
#: How GPU compute was timed before the CUDA-event timer, and so in ``datasets/h100``: the host's
#: wall clock (``time.perf_counter``) read around ``torch.cuda.synchronize()`` on both sides of
#: each pass, so every op carries the host's launch and synchronisation latency (about 0.5 ms on
#: an H100). No profiler times this way now; data made so say it in their ``compute_timing``.
HOST_SYNC_TIMING = "perf_counter_around_cuda_synchronize"
#: Every ``compute_timing`` value in words (ms per pass in each case), for PROVENANCE.md files.
TIMING_WORDS = {
    TIMING_METHODS["cpu"]: "the host's wall clock (time.perf_counter) around each pass on the CPU",
    TIMING_METHODS["cuda"]: "CUDA events recorded on the stream around each pass (the stream's own time)",
    HOST_SYNC_TIMING: "the host's wall clock (time.perf_counter) around torch.cuda.synchronize() on both "
                      "sides of each pass, so every op includes the host's launch and synchronisation "
                      "latency (about 0.5 ms on an H100), not CUDA events",
}

#: What :func:`gpu_info` asks ``nvidia-smi --query-gpu`` for, and the name each is recorded under
#: (clocks in MHz, power in W).
NVIDIA_SMI_FIELDS = (("name", "name"), ("driver_version", "driver_version"), ("clocks.sm", "sm_clock_mhz"),
                     ("clocks.mem", "mem_clock_mhz"), ("clocks.max.sm", "max_sm_clock_mhz"),
                     ("clocks.max.mem", "max_mem_clock_mhz"), ("pstate", "pstate"),
                     ("power.limit", "power_limit_w"))
NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=" + ",".join(q for q, _ in NVIDIA_SMI_FIELDS),
                    "--format=csv,noheader,nounits"]

class _Profiles(Mapping):
    """Every known hardware profile's :class:`HardwareProfile` by name, read from the profile
    folders (:mod:`shardlab.data.hardware_profiles`: ``datasets/<name>/hardware.json``, and the
    user's). Shipped: ``cpu`` (this machine's CPU, batch 4096 so that a campaign is practical
    on 2 cores), ``h100`` (the fused ops measured on one H100; its comm backend is gloo, one GPU
    running no NCCL between ranks) and ``h200`` (the seeds' batch of 65536 with NCCL)."""

    def _all(self) -> dict[str, HardwareProfile]:
        return {k: v.measure for k, v in known_profiles().items()}

    def __getitem__(self, name: str) -> HardwareProfile:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


PROFILES: Mapping[str, HardwareProfile] = _Profiles()


def get_profile(name: str | HardwareProfile) -> HardwareProfile:
    """The known profile called ``name`` (or ``name`` itself); one-line error otherwise."""
    if isinstance(name, HardwareProfile):
        return name
    if not isinstance(name, str) or "[" in name:
        raise ShardlabError(f"hardware profile '{name}' is unknown (known: {', '.join(PROFILES)})")
    return profile_folder(name).measure


def measurable_profile(name: str | HardwareProfile) -> HardwareProfile:
    """:func:`get_profile`, refused in one line when its device is CUDA and no GPU is visible
    (checked before a campaign opens or creates its store)."""
    prof = get_profile(name)
    if prof.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise ShardlabError(f"hardware profile '{prof.name}': field 'device' = 'cuda' but no GPU is visible")
    return prof


def profile_with(name: str | HardwareProfile, batch_size: int | None = None, repeats: int | None = None,
                 warmup: int | None = None) -> HardwareProfile:
    """A profile (shipped name or value) with some timing settings overridden; the name records the change."""
    prof = get_profile(name)
    changes = {k: v for k, v in (("batch_size", batch_size), ("repeats", repeats), ("warmup", warmup))
               if v is not None and v != getattr(prof, k)}
    if not changes:
        return prof
    suffix = ",".join(f"{k}={v}" for k, v in changes.items())
    return replace(prof, name=f"{prof.name}[{suffix}]", **changes)


def base_profile_name(profile: str | HardwareProfile) -> str:
    """The shipped profile a profile of :func:`profile_with` derives from (``"cpu[batch_size=256]"``
    -> ``"cpu"``): the one whose shipped models (cost models, policies) its sharders use."""
    name = profile if isinstance(profile, str) else profile.name
    return name.split("[", 1)[0]


def sitting_spread(profile: str | HardwareProfile) -> float:
    """The between-sitting spread (log-sd of a paired ratio, dimensionless) of measurements
    under ``profile``: the ``sitting_log_sd`` its shipped profile's folder records (that of the
    profile it derives from, :func:`base_profile_name`); 0 for a profile this shardlab does not
    ship."""
    folder = known_profiles().get(base_profile_name(profile))
    return 0.0 if folder is None else float(folder.sitting_log_sd)


def allowed_cores() -> list[int] | None:
    """The cores this process may run on, sorted (None where the OS has no affinity API)."""
    get = getattr(os, "sched_getaffinity", None)
    if get is None:
        return None
    try:
        return sorted(get(0))
    except OSError:
        return None


def core_for(index: int, cores: list[int] | None = None) -> int | None:
    """The core for the ``index``-th pinned process: round-robin over ``cores`` (default
    :func:`allowed_cores`); None where there is no affinity API."""
    cores = allowed_cores() if cores is None else cores
    return cores[index % len(cores)] if cores else None


def pin_to(core: int | None) -> bool:
    """Pin the calling process to ``core``; False (and nothing changed) where impossible."""
    setter = getattr(os, "sched_setaffinity", None)
    if core is None or setter is None:
        return False
    try:
        setter(0, {core})
        return True
    except OSError:
        return False


@contextmanager
def pinned(core: int | None, enabled: bool = True) -> Iterator[bool]:
    """Within the block the calling process runs on ``core`` only (if ``enabled`` and the OS
    allows); the previous affinity is restored after. Yields whether it is pinned."""
    before = allowed_cores()
    ok = enabled and pin_to(core)
    try:
        yield ok
    finally:
        if ok and before is not None:
            os.sched_setaffinity(0, set(before))


#: glibc's ``mallopt`` parameters (``malloc.h``) and their defaults, restored by :func:`kept_memory`.
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_MALLOC_DEFAULTS = ((_M_TRIM_THRESHOLD, 128 * 1024), (_M_MMAP_MAX, 65536))


@contextmanager
def kept_memory(enabled: bool = True) -> Iterator[bool]:
    """Within the block glibc's allocator keeps freed memory for the next allocation instead of
    returning it to the OS (``mallopt``: no ``mmap`` chunks, trim threshold 2 GB), so building a
    fused op does not fault in fresh pages for its weights each time: building a 1 GB op took
    0.49 s with the defaults and 0.14 s so on the 2-core development VM. glibc's static defaults
    are restored after (its dynamic mmap threshold stays off) and the kept memory released
    (``malloc_trim``). Yields whether it is in force (False off glibc)."""
    libc = None
    if enabled:
        try:
            libc = ctypes.CDLL("libc.so.6")
            ok = bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
        except (OSError, AttributeError):
            libc, ok = None, False
    else:
        ok = False
    try:
        yield ok
    finally:
        if libc is not None:
            for param, value in _MALLOC_DEFAULTS:
                libc.mallopt(param, value)
            libc.malloc_trim(0)


def available_memory_bytes() -> int | None:
    """Bytes of memory this host can give without swapping (``MemAvailable`` of
    ``/proc/meminfo``, Linux), or None where the OS does not say."""
    try:
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None
    return kb * 1024


@lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU model as the OS reports it (``/proc/cpuinfo``), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_name(device: str) -> str:
    """``"<gpu name>"`` for a CUDA device, else ``"<cpu model> (<n> cpus)"``."""
    import torch    # here, not at the top: the profiles are read by code that never measures

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"{cpu_name()} ({os.cpu_count()} cpus)"


@lru_cache(maxsize=1)
def git_revision() -> str:
    """The repository's commit, with ``+dirty`` when the package has uncommitted changes."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        # --no-optional-locks: a read, never a refresh of the user's .git/index
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--", "shardlab"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev or "unknown") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def fbgemm_version() -> str:
    """Installed fbgemm_gpu version, or ``"absent"``."""
    try:
        import fbgemm_gpu

        return str(getattr(fbgemm_gpu, "__version__", "unknown"))
    except ImportError:
        return "absent"


#: The nvidia-smi fields recorded as text; the others are numbers (MHz, W).
_SMI_TEXT = {"name", "driver_version", "pstate"}


def _smi_value(name: str, text: str) -> str | float | None:
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):   # [N/A], [Not Supported]
        return None
    if name in _SMI_TEXT:
        return text
    try:
        return float(text)
    except ValueError:
        return None


def parse_nvidia_smi(line: str) -> dict[str, Any]:
    """One CSV line of :data:`NVIDIA_SMI_QUERY`'s answer as ``{recorded name: value}``: name,
    driver version and P-state as text, clocks (MHz) and power limit (W) as floats,
    ``[N/A]`` / ``[Not Supported]`` as None. A line with the wrong number of fields is refused
    (``ValueError``), never guessed at."""
    parts = line.split(",")
    if len(parts) != len(NVIDIA_SMI_FIELDS):
        raise ValueError(f"nvidia-smi: {len(parts)} fields, expected {len(NVIDIA_SMI_FIELDS)}: {line!r}")
    return {name: _smi_value(name, v) for (_, name), v in zip(NVIDIA_SMI_FIELDS, parts)}


def nvidia_smi(gpu_name: str | None = None, timeout_s: float = 5.0,
               run: Callable[..., Any] = subprocess.run) -> dict[str, Any]:
    """:func:`parse_nvidia_smi` of the GPU called ``gpu_name`` (the first listed where none or
    several match), or ``{"nvidia_smi": why not}`` where ``nvidia-smi`` is missing, fails,
    times out (``timeout_s`` seconds) or answers something unreadable. Never raises."""
    try:
        res = run(NVIDIA_SMI_QUERY, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return {"nvidia_smi": "absent"}
    except subprocess.TimeoutExpired:
        return {"nvidia_smi": f"timed out after {timeout_s:g} s"}
    except (OSError, subprocess.SubprocessError) as e:
        return {"nvidia_smi": f"failed: {e}"}
    if res.returncode != 0:
        return {"nvidia_smi": f"failed: exit {res.returncode}: {(res.stderr or res.stdout or '').strip()[:200]}"}
    try:
        gpus = [parse_nvidia_smi(line) for line in res.stdout.splitlines() if line.strip()]
    except ValueError as e:
        return {"nvidia_smi": f"unreadable: {e}"}
    if not gpus:
        return {"nvidia_smi": "no GPU listed"}
    same = [g for g in gpus if gpu_name and g["name"] == gpu_name]
    return {**(same or gpus)[0], "gpus_listed": len(gpus)}


def gpu_info(device: str = "cuda") -> dict[str, Any]:
    """The GPU behind ``device``: torch's CUDA runtime version (``torch.version.cuda``), the
    device's name and compute capability as torch sees them, and :func:`nvidia_smi`'s driver,
    clocks (MHz), P-state and power limit (W). What cannot be read is left out or says why."""
    import torch

    out: dict[str, Any] = {"cuda_runtime": torch.version.cuda}
    name = None
    try:
        if torch.cuda.is_available():
            dev = torch.device(device)
            name = torch.cuda.get_device_name(dev)
            out["torch_name"] = name
            out["capability"] = ".".join(str(v) for v in torch.cuda.get_device_capability(dev))
        else:
            out["torch_name"] = None
    except (RuntimeError, AssertionError) as e:       # a driver torch cannot use
        out["torch_error"] = str(e)[:200]
    return {**out, **nvidia_smi(name)}


def environment(device: str = "cpu") -> dict[str, Any]:
    """Everything a measurement must carry: hardware, versions, time (UTC), command, revision,
    the compute timer (``compute_timing``, :data:`TIMING_METHODS`); on a ``cuda`` device also
    ``gpu``: :func:`gpu_info` (nothing GPU-related on CPU)."""
    import torch

    env = {"hardware": hardware_name(device), "device": device, "torch": str(torch.__version__),
           "fbgemm_gpu": fbgemm_version(), "python": platform.python_version(),
           "platform": platform.platform(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join(shlex.quote(a) for a in sys.argv), "git": git_revision(),
           "compute_timing": TIMING_METHODS["cuda" if device.startswith("cuda") else "cpu"]}
    if device.startswith("cuda"):
        env["gpu"] = gpu_info(device)
    return env
