"""GPU provenance without a GPU: the nvidia-smi answer is parsed from fixed lines, a missing,
failing or hanging nvidia-smi is recorded as such (never raised), and the environment names the
compute timer of its device."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest
import torch

from shardlab.measure.hardware import (NVIDIA_SMI_QUERY, TIMING_METHODS, environment, gpu_info, nvidia_smi,
                                       parse_nvidia_smi)

H100 = "NVIDIA H100 80GB HBM3, 570.86.15, 1980, 2619, 1980, 2619, P0, 700.00"


def test_query_asks_for_the_recorded_fields():
    assert NVIDIA_SMI_QUERY == ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,"
                                "clocks.max.mem,pstate,power.limit", "--format=csv,noheader,nounits"]


def test_parse_a_fixed_line():
    assert parse_nvidia_smi(H100) == {
        "name": "NVIDIA H100 80GB HBM3", "driver_version": "570.86.15", "sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 2619.0, "max_sm_clock_mhz": 1980.0, "max_mem_clock_mhz": 2619.0, "pstate": "P0",
        "power_limit_w": 700.0}


def test_parse_unsupported_fields_as_none_and_refuse_short_lines():
    got = parse_nvidia_smi("NVIDIA H200, 560.35, 345, [N/A], 1980, 3201, P8, [Not Supported]")
    assert got["driver_version"] == "560.35" and got["sm_clock_mhz"] == 345.0   # a version stays text
    assert got["mem_clock_mhz"] is None and got["power_limit_w"] is None and got["pstate"] == "P8"
    with pytest.raises(ValueError, match="8"):
        parse_nvidia_smi("NVIDIA H100, 570.86.15, 1980")


def _answer(stdout="", returncode=0, stderr=""):
    return lambda *a, **k: SimpleNamespace(stdout=stdout, stderr=stderr, returncode=returncode)


def test_the_named_gpu_is_picked_from_several():
    two = "NVIDIA A100-SXM4-40GB, 570.86.15, 210, 1215, 1410, 1215, P0, 400.00\n" + H100 + "\n"
    got = nvidia_smi("NVIDIA H100 80GB HBM3", run=_answer(two))
    assert got["name"] == "NVIDIA H100 80GB HBM3" and got["gpus_listed"] == 2
    assert nvidia_smi(None, run=_answer(two))["name"].startswith("NVIDIA A100")


def test_a_missing_nvidia_smi_is_recorded_not_raised(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))            # nothing to run here
    assert nvidia_smi() == {"nvidia_smi": "absent"}
    info = gpu_info("cuda")
    assert info["nvidia_smi"] == "absent" and info["cuda_runtime"] == torch.version.cuda


def test_a_failing_or_hanging_nvidia_smi_is_recorded_not_raised():
    assert nvidia_smi(run=_answer(returncode=9, stderr="NVIDIA-SMI has failed"))["nvidia_smi"].startswith(
        "failed: exit 9: NVIDIA-SMI has failed")
    assert nvidia_smi(run=_answer("garbage\n"))["nvidia_smi"].startswith("unreadable")
    assert nvidia_smi(run=_answer(""))["nvidia_smi"] == "no GPU listed"

    def hang(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    assert nvidia_smi(timeout_s=2, run=hang) == {"nvidia_smi": "timed out after 2 s"}


def test_environment_names_the_timer_and_gpu_only_on_cuda(monkeypatch, tmp_path):
    cpu = environment("cpu")
    assert cpu["compute_timing"] == TIMING_METHODS["cpu"] == "perf_counter" and "gpu" not in cpu
    monkeypatch.setenv("PATH", str(tmp_path))
    cuda = environment("cuda")
    assert cuda["compute_timing"] == "cuda_events"
    assert cuda["gpu"]["cuda_runtime"] == torch.version.cuda and cuda["gpu"]["nvidia_smi"] == "absent"
