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


MULTI = """
import sys, time
from leaner.devices import claim_slots
print(claim_slots(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], timeout_s=float(sys.argv[4])), flush=True)
time.sleep(30)
"""


def _claimer(count, n, directory, timeout):
    return subprocess.Popen([sys.executable, "-c", MULTI, str(count), str(n), str(directory), str(timeout)],
                            stdout=subprocess.PIPE, text=True)


def test_multi_gpu_claims_are_all_or_nothing(tmp_path):
    """A job needing all three GPUs waits while one is taken, holding none of the others meanwhile,
    so a 1-GPU job still gets one; it starts once all three are free."""
    one = _claimer(1, 3, tmp_path, 5)
    assert one.stdout.readline().strip() == "[0]"
    big = _claimer(3, 3, tmp_path, 60)
    time.sleep(1.0)
    assert big.poll() is None
    small = _claimer(1, 3, tmp_path, 10)
    assert small.stdout.readline().strip() in ("[1]", "[2]")
    for p in (one, small):
        p.kill()
        p.wait()
    assert big.stdout.readline().strip() == "[0, 1, 2]"
    big.kill()
    big.wait()


def test_locks_are_named_after_the_physical_gpus(tmp_path, monkeypatch):
    """Two Slurm jobs on one node, each shown its own GPU as device 0, do not wait on each other."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert claim_slot(1, tmp_path) == 0
    assert (tmp_path / "gpu-3.lock").exists()
    other = subprocess.run([sys.executable, "-c", HOLDER, "1", str(tmp_path), "2", "0"], capture_output=True,
                           text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "GPU-5e1f:0a"})
    assert other.returncode == 0 and other.stdout.strip() == "0"
    assert (tmp_path / "gpu-GPU-5e1f_0a.lock").exists()
    release(0)


def test_claiming_more_gpus_than_the_machine_has_is_refused(tmp_path):
    from leaner.devices import claim_slots

    with pytest.raises(ValueError, match="cannot claim 3 GPU slots: this machine shows 2"):
        claim_slots(3, 2, tmp_path)
