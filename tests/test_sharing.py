"""Jobs take the devices their rules declared, and small variants share a GPU: through Snakemake,
on the CPU, with CUDA_VISIBLE_DEVICES naming one GPU that the seat locks stand in for (on a machine
with CUDA the same test trains on that GPU). Bad GPU requests stop the run before any job."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import snakemake

pytestmark = [pytest.mark.slow, pytest.mark.workflow, pytest.mark.devices]


def _config(tmp_path, resources, variants_seeds=(0, 1)):
    cfg = {"datasets": {"digits": {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}},
           "studies": {"shared": {
               "task": "image_classification", "dataset": "digits", "model": {"patch_size": 2},
               "recipe": {"epochs": 3, "batch_size": 64, "lr": 1.0e-2, "checkpoint_every": 20},
               "conditioning": {"samples": 32},
               "grid": {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [1, 2],
                        "mlp_ratio": [2], "seeds": list(variants_seeds)},
               "resources": {"threads": 1, "runtime": 5, "mem_mb": 1000, **resources}}},
           "theory": {"draws": 2, "seed": 0, "tokens": [17], "head_dim": [8], "width": [64], "heads": [1, 2]}}
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _env(monkeypatch, tmp_path):
    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # one GPU, real or standing in
    monkeypatch.setenv("LEANER_GPU_LOCK_DIR", str(tmp_path / "locks"))


def _runs(work):
    out = []
    for path in sorted((work / "results" / "shared").glob("*/metrics.json")):
        m = json.loads(path.read_text())
        out.append(m)
    return out


def _most_at_once(runs):
    """The most training runs that held their GPU at the same moment."""
    events = sorted([(m["run"]["gpu_claim"]["at_unix"], 1) for m in runs] +
                    [(m["run"]["finished_unix"], -1) for m in runs], key=lambda e: (e[0], e[1]))
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


@pytest.mark.parametrize("jobs_per_gpu", [2, 1])
def test_resources_gpu_counts_gpus_and_k_jobs_share_one(tmp_path, monkeypatch, jobs_per_gpu):
    """`--resources gpu=1` is one GPU: with jobs_per_gpu 2, two of the four variants train on it at
    once (never three, though four cores are free); without sharing, one at a time."""
    _env(monkeypatch, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    config = _config(tmp_path, {"gpu": 1, "jobs_per_gpu": jobs_per_gpu})
    proc = snakemake(work, "results/shared/summary.csv", "--cores", "4", "--resources", "gpu=1", configfile=config)
    assert "gpu_share=" in proc.stdout + proc.stderr
    runs = _runs(work)
    assert len(runs) == 4 and all(m["status"] == "ok" for m in runs)
    for m in runs:
        claim = m["run"]["gpu_claim"]
        assert claim["gpus"] == ["0"] and claim["lock_dir"] == str(tmp_path / "locks"), claim
        assert m["device"] in ("cpu", "cuda:0")
        if jobs_per_gpu > 1:
            assert claim["seats"] == jobs_per_gpu and claim["seat"] in range(jobs_per_gpu)
        else:
            assert "seat" not in claim
    assert _most_at_once(runs) == jobs_per_gpu
    for m in runs:  # conditioning took its seat too, and measured every checkpoint
        assert (work / "results" / "shared" / m["variant"] / "conditioning.csv").stat().st_size > 0


def test_a_gpu_0_study_trains_on_the_cpu_and_claims_nothing(tmp_path, monkeypatch):
    """The device follows the declared resources: no GPU asked, none taken, even where CUDA is
    present (on this machine the claim record shows it)."""
    _env(monkeypatch, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    config = _config(tmp_path, {}, variants_seeds=(0,))
    snakemake(work, "results/shared/summary.csv", "--cores", "2", "--resources", "gpu=1", configfile=config)
    runs = _runs(work)
    assert len(runs) == 2
    assert all(m["device"] == "cpu" and m["run"]["gpu_claim"] == {} and m["threads"] == 1 for m in runs)
    assert not (tmp_path / "locks").exists() or not any((tmp_path / "locks").iterdir())


@pytest.mark.parametrize("resources, args, message", [
    ({"gpu": 2}, ["--resources", "gpu=1"],
     "study shared: asks for 2 GPUs per variant, but --resources gpu=1 (allowed: resources.gpu <= 1, or more GPUs)"),
    ({"gpu": 1, "jobs_per_gpu": 4, "threads": 1}, ["--resources", "gpu=1"],
     "study shared: jobs_per_gpu 4 jobs of 1 threads share a GPU, which needs 4 cores at once, but --cores is 2 "
     "(allowed: jobs_per_gpu * threads <= 2)"),
    ({"gpu": 2, "jobs_per_gpu": 4}, [],
     "config error: studies.shared.resources.jobs_per_gpu: 4 jobs share one GPU, so gpu must be 1, got 2 "
     "(allowed: gpu: 1 with jobs_per_gpu > 1, or jobs_per_gpu: 1)"),
    ({"gpu": 1, "jobs_per_gpu": 65}, [], "jobs_per_gpu"),
])
def test_gpu_requests_the_machine_cannot_hold_stop_before_any_job(tmp_path, monkeypatch, resources, args, message):
    _env(monkeypatch, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    config = _config(tmp_path, resources)
    proc = snakemake(work, "--cores", "2", *args, configfile=config, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not (work / "results").exists() and not (work / "logs").exists()
