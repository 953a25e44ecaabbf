"""The GPU path, on a machine with CUDA (every test here is skipped without one; CI has none).

Every task family trains a few steps in bf16 through the real CLI and Snakemake; conditioning on
the GPU equals the CPU's; a killed GPU run resumes and finishes close to an uninterrupted one; k
jobs of a jobs_per_gpu study train on one GPU at once."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import torch
import yaml
from conftest import TINY, kill_after_checkpoint, small_spec, snakemake
from test_sequence import _write_glue

pytestmark = [pytest.mark.gpu, pytest.mark.workflow]


def _on_gpu(cfg: dict) -> dict:
    for study in cfg["studies"].values():
        study["resources"] = {**study.get("resources", {}), "gpu": 1}
    return cfg


def test_every_task_family_trains_in_bf16_on_the_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    monkeypatch.setenv("LEANER_GPU_LOCK_DIR", str(tmp_path / "locks"))
    cfg = _on_gpu(yaml.safe_load(TINY.read_text()))
    seq = _on_gpu(yaml.safe_load((TINY.parent / "tiny_sequence.yaml").read_text()))
    _write_glue(tmp_path / "glue")
    cfg["datasets"].update(seq["datasets"])
    cfg["datasets"]["glue_local"] = {"kind": "glue", "source": "files", "path": str(tmp_path / "glue"),
                                     "tasks": ["sst2", "stsb"], "max_length": 32}
    cfg["studies"].update(seq["studies"])
    cfg["studies"]["tiny_bert"] = {
        "task": "glue", "dataset": "stories", "model": {"context": 32},
        "recipe": {"epochs": 1, "steps_per_epoch": 10, "batch_size": 8, "lr": 5.0e-3},
        "finetune": {"dataset": "glue_local", "recipe": {"epochs": 1, "batch_size": 16, "lr": 1.0e-3}},
        "conditioning": {"samples": 16}, "resources": {"gpu": 1, "threads": 1},
        "grid": {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [2], "mlp_ratio": [2],
                 "seeds": [0]}}
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    work.mkdir()
    snakemake(work, "--cores", "4", configfile=path)
    tasks = set()
    for metrics in (work / "results").glob("*/*/metrics.json"):
        m = json.loads(metrics.read_text())
        assert m["device"].startswith("cuda") and m["status"] == "ok", (metrics, m["device"], m["status"])
        tasks.add(m["spec"]["task"])
    for metrics in (work / "results").glob("tiny_bert/*/glue/*/metrics.json"):
        assert json.loads(metrics.read_text())["device"].startswith("cuda")
        tasks.add("glue_finetune")
    assert tasks == {"image_classification", "nearest_point", "listops", "language_model", "glue", "glue_finetune"}


def test_conditioning_on_the_gpu_equals_the_cpu(tmp_path, digits_manifest, monkeypatch):
    """The probe is run in float32 on either device (the GPU without TF32 for this comparison):
    kappa agrees within 1e-3 relative where kappa <= 1e4, where float32 rounding of the block is
    well below that."""
    from leaner.conditioning import conditioning_rows
    from leaner.train import train

    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    spec = small_spec()
    train(spec, str(digits_manifest), tmp_path / "v", device="cpu", progress=False)
    checkpoints = {"init": (0, str(tmp_path / "v" / "init.safetensors")),
                   "final": (1, str(tmp_path / "v" / "model.safetensors"))}
    cpu = pd.DataFrame(conditioning_rows(spec, checkpoints, str(digits_manifest), device="cpu"))
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = pd.DataFrame(conditioning_rows(spec, checkpoints, str(digits_manifest), device="cuda"))
    ok = cpu["kappa_median"] <= 1e4
    assert ok.any()
    rel = (gpu["kappa_median"][ok] - cpu["kappa_median"][ok]).abs() / cpu["kappa_median"][ok]
    assert rel.max() < 1e-3, rel.max()


def test_a_killed_gpu_run_resumes_and_ends_close_to_an_uninterrupted_one(tmp_path, digits_manifest, monkeypatch):
    """bf16 kernels are not bit-reproducible across a restart, so the two runs are compared by
    their result: the resumed run reaches the last step, and its eval accuracy is within 0.05 of an
    uninterrupted GPU run's (same seed, same data order)."""
    from leaner.train import RESUME_DIR, RESUME_FILE, train

    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    spec = small_spec()
    spec["recipe"] = {**spec["recipe"], "epochs": 20, "checkpoint_every": 20}
    whole = train(spec, str(digits_manifest), tmp_path / "whole", device="cuda", progress=False)
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "leaner", "train", "--spec", json.dumps(spec), "--data", str(digits_manifest),
           "--out", str(out), "--gpu-share", "10000", "--no-progress"]
    kill_after_checkpoint(subprocess.Popen(cmd), out / RESUME_DIR / RESUME_FILE)
    assert not (out / "metrics.json").exists()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from step" in proc.stderr
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["device"].startswith("cuda") and resumed["steps"] == whole["steps"]
    assert abs(resumed["final"]["eval_acc"] - whole["final"]["eval_acc"]) < 0.05


def test_k_jobs_train_on_one_gpu_at_once(tmp_path, monkeypatch):
    """jobs_per_gpu 4 with --resources gpu=1: four variants hold seats on the same GPU at the same
    time, each training on it."""
    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    monkeypatch.setenv("LEANER_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [1, 2], "mlp_ratio": [2],
                     "seeds": [0, 1]}
    study["recipe"]["epochs"] = 30
    study["resources"] = {"gpu": 1, "jobs_per_gpu": 4, "threads": 1}
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    work.mkdir()
    snakemake(work, "results/tiny/summary.csv", "--cores", "4", "--resources", "gpu=1", configfile=path)
    runs = [json.loads(p.read_text()) for p in (work / "results" / "tiny").glob("*/metrics.json")]
    assert len(runs) == 4 and all(m["device"] == "cuda:0" for m in runs)
    assert sorted(m["run"]["gpu_claim"]["seat"] for m in runs) == [0, 1, 2, 3]
    assert max(m["run"]["gpu_claim"]["at_unix"] for m in runs) < min(m["run"]["finished_unix"] for m in runs)
