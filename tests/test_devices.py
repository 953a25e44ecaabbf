"""The GPU slot allocator, exercised with real processes and real file locks (no GPU needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from leaner.devices import claim_slot, pick_device, release

HOLDER = """
import sys, time
from leaner.devices import claim_slot
slot = claim_slot(int(sys.argv[1]), sys.argv[2], timeout_s=float(sys.argv[3]))
print(slot, flush=True)
time.sleep(float(sys.argv[4]))
"""


def _holder(n, directory, timeout=30.0, hold=30.0):
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(n), str(directory), str(timeout), str(hold)],
                            stdout=subprocess.PIPE, text=True)


def test_concurrent_jobs_get_distinct_slots_and_a_killed_job_frees_its_slot(tmp_path):
    first, second = _holder(2, tmp_path), _holder(2, tmp_path)
    slots = {int(first.stdout.readline()), int(second.stdout.readline())}
    assert slots == {0, 1}
    third = _holder(2, tmp_path, timeout=60)  # waits: both slots are taken
    time.sleep(1.0)
    assert third.poll() is None
    os.kill(first.pid, signal.SIGKILL)  # the kernel drops the dead job's lock
    first.wait()
    freed = int(third.stdout.readline())
    assert freed in (0, 1)
    for p in (second, third):
        p.kill()
        p.wait()


def test_all_slots_busy_times_out_with_a_clear_message(tmp_path):
    holder = _holder(1, tmp_path)
    assert holder.stdout.readline().strip() == "0"
    waiting = subprocess.run([sys.executable, "-c", HOLDER, "1", str(tmp_path), "0.5", "0"],
                             capture_output=True, text=True)
    assert waiting.returncode != 0
    assert "snakemake --resources gpu=1" in waiting.stderr
    holder.kill()
    holder.wait()


def test_slot_is_reentrant_within_a_process_and_released(tmp_path):
    assert claim_slot(3, tmp_path) == 0
    assert claim_slot(3, tmp_path) == 0  # the same job asking again keeps its slot
    release(0)
    assert claim_slot(3, tmp_path) == 0
    release(0)


def test_pick_device_falls_back_to_cpu(monkeypatch):
    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert pick_device().type == "cpu"
    monkeypatch.setenv("LEANER_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        pick_device()
