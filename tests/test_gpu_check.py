"""`make gpu-check` where it cannot run: one line each, nothing half-done (its sections run on a
GPU machine; benchmarks/results.md holds what they measured)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conftest import REPO

SCRIPT = str(REPO / "benchmarks" / "gpu_check.py")


def _check(*args: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path / "gc"), *args], capture_output=True,
                          text=True, timeout=120)


def test_an_unknown_section_is_one_line(tmp_path):
    proc = _check("--only", "p2,speed", tmp_path=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout.strip() == "gpu-check: error: --only speed: unknown (allowed: p2, precision, ddp, tests, bench)"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA runs the check itself")
def test_without_cuda_it_says_so_in_one_line(tmp_path):
    proc = _check(tmp_path=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout.strip().splitlines() == [
        "gpu-check: error: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine"]
    assert not (tmp_path / "gc" / "check.json").exists()
