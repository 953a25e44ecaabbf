"""One variant on several processes: DDP under torchrun, on the CPU with gloo.

Tolerance. Two processes compute the same global-batch gradient as one, summed in another order
(each rank's weighted mean, then gloo's sum), so the two runs agree to float32 rounding: measured
after 69 steps of the digits ViT, every weight tensor within ~1e-6 relative (Frobenius) of the
one-process run, except the key bias, whose true gradient is exactly zero (softmax ignores it):
Adam turns its rounding noise into steps of up to lr, so it differs by up to 5e-5 (8e-4 relative;
1e-3 on P2's encoder at lr 0.02). The tests ask: logged training losses within 1e-5 relative,
evaluation within one sample (accuracy) or 1e-4 relative (MSE), most tensors within 1e-5
relative, the whole weight vector within 1e-3 relative, no weight off by more than lr / 2.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from leaner.compute import distributed
from leaner.compute.devices import SHARE_UNITS, pick_device
from leaner.compute.distributed import check_split, shard, shard_bounds
from leaner.data import batch_indices
from leaner.training.resume import RESUME_DIR, RESUME_FILE
from leaner.training.train import train

from conftest import BIN, fault_env, kill_after_checkpoint, nearest_setup, saved_checkpoint, small_spec

pytestmark = pytest.mark.slow


def _train(spec, manifest, out, nproc, threads=2, **popen):
    cmd = [str(BIN / "leaner"), "train", "--spec", json.dumps(spec), "--data", str(manifest), "--out", str(out),
           "--threads", str(threads), "--nproc", str(nproc), "--no-progress", "--device", "cpu"]
    if popen:
        return subprocess.Popen(cmd, **popen)
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)


def _weights(path):
    return load_file(str(path))


def test_shards_partition_every_batch():
    for n in (1, 2, 7, 64, 65):
        for world in (1, 2, 3, 4):
            bounds = [shard_bounds(n, r, world) for r in range(world)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            sizes = [b - a for a, b in bounds]
            assert max(sizes) - min(sizes) <= 1
    x, y = torch.arange(10), torch.arange(10) * 2
    parts = [shard((x, y), r, 3) for r in range(3)]
    assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)
    # sharded epoch order: the union of the ranks' shares is the one-process batch, in order
    whole = batch_indices(100, 32, seed=0, epoch=2)
    ranks = [batch_indices(100, 32, seed=0, epoch=2, rank=r, world=3) for r in range(3)]
    for b, batch in enumerate(whole):
        assert (np.concatenate([r[b] for r in ranks]) == batch).all()


def test_a_batch_too_small_to_split_is_refused_clearly():
    check_split(1438, 64, 2)  # last batch 30: fine
    with pytest.raises(ValueError, match="leaves a batch of 1, fewer than the 2 processes"):
        check_split(1438, 1437, 2)
    with pytest.raises(ValueError, match="batch_size 2 over 2 samples leaves a batch of 2, fewer than the 4"):
        check_split(2, 2, 4)


class _Joined(Exception):
    """Raised by the stand-in for init_process_group to stop a worker once it has joined."""


def _gpu_worker(monkeypatch, local_rank: int, world: int, gpus: int, join=None) -> list:
    """This process as torchrun's worker `local_rank` of `world` on a machine of `gpus` GPUs: the
    torch.cuda and torch.distributed calls that need CUDA and NCCL are stand-ins that record what
    they were asked, in order (torch.cuda.current_device follows set_device, as in CUDA)."""
    calls, current = [], [0]
    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    monkeypatch.setenv("RANK", str(local_rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])

    def set_device(device):
        current[0] = torch.device(device).index
        calls.append(("set_device", torch.device(device)))

    def init_process_group(backend, **kwargs):
        calls.append(("init_process_group", backend, kwargs))
        if join is None:
            raise _Joined

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    for name, fn in (join or {}).items():
        monkeypatch.setattr(torch.distributed, name, fn)
    return calls


def test_a_gpu_worker_binds_its_own_gpu_before_joining_the_process_group(tmp_path, monkeypatch):
    """Worker 1 of 2 on a 2-GPU machine: train() makes cuda:1 the current device, then joins the
    NCCL group bound to cuda:1; nothing touched CUDA before that."""
    calls = _gpu_worker(monkeypatch, local_rank=1, world=2, gpus=2)
    with pytest.raises(_Joined):
        train(small_spec(), str(tmp_path / "no-data.json"), tmp_path / "v", progress=False,
              gpu_share=2 * SHARE_UNITS)
    assert [c[0] for c in calls] == ["set_device", "init_process_group"]
    assert calls[0][1] == torch.device("cuda", 1)
    backend, kwargs = calls[1][1:]
    assert backend == "nccl" and kwargs["device_id"] == torch.device("cuda", 1)


def test_a_gpu_workers_collectives_run_on_its_own_gpu(monkeypatch):
    """The object collectives and the closing barrier of worker 1 use cuda:1: broadcast and
    barrier are told so, and all_gather_object (which takes the current device) finds cuda:1
    current. Without the binding all of them would use GPU 0 on every rank."""
    seen = {}
    join = {"get_rank": lambda: 1, "get_world_size": lambda: 2,
            "broadcast_object_list": lambda box, src, device=None: seen.update(broadcast=device),
            "all_gather_object": lambda out, obj: seen.update(gather=torch.cuda.current_device()),
            "barrier": lambda device_ids=None: seen.update(barrier=device_ids),
            "destroy_process_group": lambda: seen.update(destroyed=True)}
    calls = _gpu_worker(monkeypatch, local_rank=1, world=2, gpus=2, join=join)
    ctx = distributed.init(pick_device(gpu_share=2 * SHARE_UNITS, local_rank=1))
    assert (ctx.device, ctx.rank, ctx.world, ctx.backend) == (torch.device("cuda", 1), 1, 2, "nccl")
    assert calls[1][2]["device_id"] == torch.device("cuda", 1)
    ctx.from_main("row")
    ctx.gather("rng")
    ctx.close()
    assert seen == {"broadcast": torch.device("cuda", 1), "gather": 1, "barrier": [1], "destroyed": True}


def test_a_worker_without_a_gpu_of_its_own_is_refused_in_one_line(monkeypatch):
    _gpu_worker(monkeypatch, local_rank=2, world=3, gpus=2)
    with pytest.raises(RuntimeError, match=r"^worker LOCAL_RANK=2 has no GPU of its own: this machine shows 2 "):
        pick_device(gpu_share=3 * SHARE_UNITS, local_rank=2)
    calls = _gpu_worker(monkeypatch, local_rank=1, world=2, gpus=2)
    with pytest.raises(ValueError, match=r"^worker LOCAL_RANK=1 of 2 trains on its own GPU, cuda:1, not cuda:0: "
                                         r"force --device cuda, not cuda:N$"):
        distributed.init(pick_device("cuda:0", local_rank=1))
    assert [c[0] for c in calls] == ["set_device"]  # refused before joining


@pytest.mark.parametrize("task", ["image_classification", "nearest_point"])
def test_two_gloo_processes_match_one_with_the_same_global_batch(tmp_path, digits_manifest, task):
    if task == "image_classification":
        spec, manifest = small_spec(), digits_manifest
        spec["recipe"].update(epochs=3, checkpoint_every=10)  # 1438 samples: 22 batches of 64, one of 30
    else:
        # 63 = 32 + 31: unequal shares, weighted
        spec, manifest = nearest_setup(tmp_path, model={"heads": 2, "head_dim": 4},
                                       recipe={"epochs": 4, "steps_per_epoch": 15, "batch_size": 63,
                                               "checkpoint_every": 10})
    _train(spec, manifest, tmp_path / "one", nproc=1)
    two = _train(spec, manifest, tmp_path / "two", nproc=2)
    assert "2 processes (gloo)" in two.stderr

    one_m = json.loads((tmp_path / "one" / "metrics.json").read_text())
    two_m = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert (one_m["processes"], two_m["processes"], two_m["backend"]) == (1, 2, "gloo")
    assert two_m["steps"] == one_m["steps"] and two_m["status"] == "ok"
    h1, h2 = pd.read_csv(tmp_path / "one" / "history.csv"), pd.read_csv(tmp_path / "two" / "history.csv")
    assert list(h1["step"]) == list(h2["step"])
    np.testing.assert_allclose(h2["train_loss"], h1["train_loss"], rtol=1e-5)
    if task == "image_classification":
        assert (h2["eval_acc"] - h1["eval_acc"]).abs().max() <= 1 / 360 + 1e-12
    else:
        np.testing.assert_allclose(h2["eval_mse"], h1["eval_mse"], rtol=1e-4)

    w1, w2 = _weights(tmp_path / "one" / "model.safetensors"), _weights(tmp_path / "two" / "model.safetensors")
    assert w1.keys() == w2.keys()
    i1 = _weights(tmp_path / "one" / "init.safetensors")
    moved = sum((w1[k] - i1[k]).abs().sum().item() for k in w1)
    assert moved > 0  # training changed the weights, so agreeing below is not trivial
    v1, v2 = torch.cat([w1[k].flatten() for k in w1]), torch.cat([w2[k].flatten() for k in w1])
    assert ((v1 - v2).norm() / v1.norm()).item() < 1e-3
    assert (v1 - v2).abs().max().item() < spec["recipe"]["lr"] / 2
    rel = sorted(((w1[k] - w2[k]).norm() / w1[k].norm().clamp_min(1e-12)).item() for k in w1)
    assert rel[len(rel) // 2] < 1e-5, rel


@pytest.mark.parametrize("task", ["image_classification", "nearest_point"])
def test_evaluation_shared_by_two_and_three_processes_equals_one_bit_for_bit(tmp_path, digits_manifest, task):
    """Every rank evaluates batches rank, rank + world, ... and the ranks add every batch's sums
    in the global order: the metrics of 2 and 3 gloo processes are one process's, exactly (8
    image batches, the last short, over 3 ranks: unequal shares; P2's chunks likewise)."""
    import sys

    if task == "image_classification":
        spec, manifest = small_spec(), digits_manifest
        spec["recipe"]["eval_batch_size"] = 50  # 360 evaluation images: 8 batches
    else:
        spec, manifest = nearest_setup(tmp_path, model={"heads": 2, "head_dim": 4})
    got = {}
    for n in (1, 2, 3):
        out = tmp_path / f"eval{n}.json"
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
                        str(Path(__file__).parent / "eval_shards.py"), json.dumps(spec), str(manifest), str(out)],
                       check=True, capture_output=True, timeout=300)
        got[n] = json.loads(out.read_text())
    scores = [got[n]["scores"] for n in (1, 2, 3)]
    assert scores[0] and scores[1] == scores[0] and scores[2] == scores[0], got
    total = got[1]["batches"][0]
    for n in (2, 3):  # each rank evaluated its share only, and together every batch once
        assert got[n]["batches"] == [len(range(r, total, n)) for r in range(n)], got


def _stop_spec() -> dict:
    spec = small_spec()
    spec["recipe"].update(epochs=6, checkpoint_every=10)
    return spec


@pytest.fixture(scope="module")
def two_process_reference(tmp_path_factory, digits_manifest):
    out = tmp_path_factory.mktemp("ref")
    _train(_stop_spec(), digits_manifest, out, nproc=2)
    return out


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "SIGINT"])
def test_stopped_two_process_run_resumes_from_rank0_checkpoint(tmp_path, digits_manifest, two_process_reference,
                                                               how):
    """SIGKILL the launcher after the first checkpoint: its workers stop with it (none is left
    writing), and the re-run on two processes resumes and ends as an uninterrupted one did.
    SIGTERM (a scheduler's time limit) while the first checkpoint is written: both ranks agree on
    the next step, save it and stop; the launcher exits with status 75 (stopped, resumable). Each
    write is held 16 s here, so the stop takes longer than the 30 s torchrun gives its workers once
    it is told to stop: the launcher, not torchrun, passes the signal on.
    SIGINT to the launcher's whole process group (Ctrl-C at a terminal): the same, each rank told
    once (torchrun's own forward of the signal must not reach a rank as a second Ctrl-C)."""
    import os
    import signal

    from leaner.training.stopping import STOPPED_EXIT

    spec = _stop_spec()
    out = tmp_path / "killed"
    ckpt = out / RESUME_DIR / RESUME_FILE
    if how == "SIGKILL":
        proc = _train(spec, digits_manifest, out, nproc=2, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        kill_after_checkpoint(proc, ckpt)
        assert saved_checkpoint(ckpt) and not (out / "metrics.json").exists(), "the kill came too late to test resume"
    else:
        # step 10's write held: a certain moment; and under SIGTERM a stop that outlasts torchrun's 30 s
        held = fault_env(slow_rename=["state.pt", 16 if how == "SIGTERM" else 2])
        proc = _train(spec, digits_manifest, out, nproc=2, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                      text=True, start_new_session=True, env=held)
        deadline = time.time() + 120
        while not list(ckpt.parent.glob(".state.pt.*.tmp")):
            assert time.time() < deadline and proc.poll() is None, "no checkpoint was written"
            time.sleep(0.02)
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        err = proc.communicate(timeout=60)[1]
        assert proc.returncode == STOPPED_EXIT, err[-3000:]
        assert err.count(f"stopped by {how} (it came after step 10): resume state saved at step 11") == 2, err[-3000:]
        assert torch.load(ckpt, weights_only=True)["step"] == 11
    state = torch.load(saved_checkpoint(ckpt), weights_only=True)
    assert len(state["rng"]) == 2  # every rank's RNG state, written by rank 0
    time.sleep(2.0)
    leftover = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split()
    assert not leftover, f"workers outlived their launcher: {leftover}"
    assert not (out / "metrics.json").exists()

    rerun = _train(spec, digits_manifest, out, nproc=2)
    assert "resumed from step" in rerun.stderr
    ref, got = _weights(two_process_reference / "model.safetensors"), _weights(out / "model.safetensors")
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    pd.testing.assert_frame_equal(pd.read_csv(two_process_reference / "history.csv").drop(columns="elapsed_s"),
                                  pd.read_csv(out / "history.csv").drop(columns="elapsed_s"))


def test_a_study_asking_two_gpus_per_variant_trains_each_on_two_processes(tmp_path):
    """Through Snakemake: the train rule asks for 2 GPUs and launches 2 processes (gloo here,
    with no GPU), and the conditioning stage reads what rank 0 wrote."""
    import yaml

    from conftest import TINY, snakemake

    config = yaml.safe_load(TINY.read_text())
    config["studies"]["tiny"]["resources"].update(gpu=2, threads=2)
    path = tmp_path / "two_gpus.yaml"
    path.write_text(yaml.safe_dump(config))
    target = "results/tiny/L2-H1-D16-hd16-mlp32-s0/conditioning.csv"
    dry = snakemake(tmp_path, target, "-n", "-p", "--cores", "2", configfile=path)
    assert "--nproc 2" in dry.stdout
    snakemake(tmp_path, target, "--cores", "2", configfile=path)
    metrics = json.loads((tmp_path / "results/tiny/L2-H1-D16-hd16-mlp32-s0/metrics.json").read_text())
    assert (metrics["processes"], metrics["backend"], metrics["status"]) == (2, "gloo", "ok")
    log = (tmp_path / "logs/train/tiny/L2-H1-D16-hd16-mlp32-s0.log").read_text()
    assert "2 processes (gloo)" in log and "torch.distributed.run" in log
    assert (tmp_path / target).stat().st_size > 0
