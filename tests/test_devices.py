"""The GPU slot allocator, exercised with real processes and real file locks (no GPU needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from leaner.compute.devices import claim_slot, pick_device, release

from conftest import REPO

pytestmark = [pytest.mark.fast, pytest.mark.devices]

HOLDER = """
import sys, time
from leaner.compute.devices import claim_slot
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
    with pytest.raises(RuntimeError, match="LEANER_DEVICE='cuda' asks for CUDA, but this machine has no CUDA"):
        pick_device()


MULTI = """
import sys, time
from leaner.compute.devices import claim_slots
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
    from leaner.compute.devices import claim_slots

    with pytest.raises(ValueError, match=r"cannot claim 3 GPU\(s\): this machine shows 2"):
        claim_slots(3, 2, tmp_path)


SEAT = """
import sys, time
from leaner.compute.devices import claim_slots, claimed
slots = claim_slots(1, int(sys.argv[1]), sys.argv[2] or None, timeout_s=float(sys.argv[3]), seats=int(sys.argv[4]))
print(slots[0], claimed().get("seat"), flush=True)
time.sleep(30)
"""


def _seat(n, directory, timeout, seats, env=None):
    return subprocess.Popen([sys.executable, "-c", SEAT, str(n), str(directory), str(timeout), str(seats)],
                            stdout=subprocess.PIPE, text=True, env=env)


def _stop(*procs):
    for p in procs:
        p.kill()
        p.wait()


def test_k_jobs_share_a_gpu_seat_by_seat_and_a_whole_gpu_job_waits_for_them(tmp_path):
    """Two jobs of a jobs_per_gpu: 2 study sit on GPU 0 together, the lowest GPU first; a third goes
    to GPU 1; a job that wants a whole GPU waits until one is empty, and shared jobs wait for it."""
    a, b = _seat(2, tmp_path, 10, 2), _seat(2, tmp_path, 10, 2)
    seat_a, seat_b = a.stdout.readline().split(), b.stdout.readline().split()
    assert sorted([seat_a, seat_b]) == [["0", "0"], ["0", "1"]]
    c = _seat(2, tmp_path, 10, 2)
    assert c.stdout.readline().split() == ["1", "0"]
    whole = _claimer(1, 2, tmp_path, 60)
    time.sleep(1.0)
    assert whole.poll() is None  # both GPUs have a shared job on them
    _stop(c)
    assert whole.stdout.readline().strip() == "[1]"
    d = _seat(2, tmp_path, 60, 2)  # GPU 0's two seats are taken, GPU 1 is held whole
    time.sleep(1.0)
    assert d.poll() is None
    _stop(a)
    assert d.stdout.readline().split() == seat_a  # the seat a left
    _stop(b, d, whole)


def test_inside_a_slurm_job_the_locks_are_the_jobs_own(tmp_path):
    """With cgroup device constraints every Slurm job sees its GPU as device 0: two jobs on one node
    must not wait on each other's gpu-0.lock, while one job's own processes still share seats."""
    base = {**os.environ, "LEANER_GPU_LOCK_DIR": str(tmp_path), "CUDA_VISIBLE_DEVICES": "0"}
    a = _seat(1, "", 2, 1, env={**base, "SLURM_JOB_ID": "101"})
    b = _seat(1, "", 2, 1, env={**base, "SLURM_JOB_ID": "102"})
    assert a.stdout.readline().split() == ["0", "None"] and b.stdout.readline().split() == ["0", "None"]
    assert (tmp_path / "slurm-101" / "gpu-0.lock").exists() and (tmp_path / "slurm-102" / "gpu-0.lock").exists()
    same_job = subprocess.run([sys.executable, "-c", SEAT.replace("time.sleep(30)", ""), "1", "", "0.5", "1"],
                              capture_output=True, text=True, env={**base, "SLURM_JOB_ID": "101"})
    assert same_job.returncode != 0 and "did not come free" in same_job.stderr  # job 101's GPU is busy
    _stop(a, b)


def test_gpu_share_counts_exactly_k_jobs_per_gpu():
    from leaner.compute.devices import MAX_JOBS_PER_GPU, SHARE_UNITS, share_of, split_share

    for k in range(2, MAX_JOBS_PER_GPU + 1):
        share = share_of(1, k)
        assert k * share <= SHARE_UNITS < (k + 1) * share, k  # Snakemake starts k per GPU, not k + 1
        assert split_share(share) == (1, k)
    assert split_share(share_of(3)) == (3, 1) and split_share(share_of(0)) == (0, 0)
    with pytest.raises(ValueError, match="needs gpu: 1"):
        share_of(2, 4)


def test_a_job_that_declared_no_gpu_runs_on_the_cpu_even_with_cuda(monkeypatch):
    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    assert pick_device(gpu_share=0).type == "cpu"


def test_leaner_device_cuda_without_cuda_is_one_line(tmp_path, digits_manifest):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    import json

    from conftest import small_spec

    proc = subprocess.run([sys.executable, "-m", "leaner", "train", "--spec", json.dumps(small_spec()), "--data",
                           str(digits_manifest), "--out", str(tmp_path / "v")], capture_output=True, text=True,
                          env={**os.environ, "LEANER_DEVICE": "cuda"})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "LEANER_DEVICE='cuda' asks for CUDA, but this machine has no CUDA device" in proc.stderr
    assert "allowed here: cpu" in proc.stderr and not (tmp_path / "v" / "metrics.json").exists()


def test_a_bf16_study_on_a_gpu_without_bf16_is_one_line_per_study():
    """What onstart says (run_hooks, local_gpu_limits) on a GPU without bf16: each GPU study whose
    recipes ask for bf16, in one line; P2's fp32 studies and CPU studies pass."""
    from leaner.workflow.plan import load_plan
    from leaner.workflow.scheduling import bf16_problems

    problems = bf16_problems(load_plan(REPO / "configs" / "paper.yaml"), "Tesla V100-SXM2-32GB")
    backbones = ["xcit_m_imagenet", "xcit_l_imagenet", "tnt_b_imagenet", "davit_b_imagenet", "davit_l_imagenet"]
    assert [p.split(":")[0] for p in problems] == [f"study {s}" for s in ["vit_imagenet", *backbones, "lra_listops",
                                                                          "lm_tinystories", "bert_glue"]]
    assert problems[0] == ("study vit_imagenet: recipe.precision bf16 (28 variant(s), e.g. "
                           "L12-H12-D768-hd64-mlp1536-s0), but Tesla V100-SXM2-32GB does not support bf16 "
                           "(allowed here: precision fp32)")
    assert bf16_problems(load_plan(REPO / "config.yaml"), "Tesla V100-SXM2-32GB") == []  # gpu: 0 everywhere
