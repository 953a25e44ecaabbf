"""The SLURM profile against a real single-node Slurm (tests/slurm_cluster.py): every training job
goes through sbatch with a GPU request, results equal a local run of the same config, and a failing
job is reported with its log while the others finish."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch
import yaml
from safetensors.torch import load_file

from conftest import BIN, REPO, TINY
from slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.workflow,
              pytest.mark.skipif(os.geteuid() != 0, reason="starting slurmctld/slurmd/munged needs root")]

FAILING = "L1-H2-D16-hd8-mlp32-s1"
# what a cluster without accounting (no slurmdbd) needs on top of profiles/slurm
NO_ACCOUNTING = ["--slurm-status-command", "squeue", "--slurm-no-account",
                 "--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2",
                 "--latency-wait", "5"]


def _config(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [1, 2], "mlp_ratio": [2],
                     "seeds": [0, 1]}
    study["resources"] = {"gpu": 1, "gpu_model": "fake", "threads": 1, "runtime": 5, "mem_mb": 1000}
    # one variant fails on purpose: its parameter count cannot match
    study["expect_params"] = [{"variant": FAILING, "params": 1, "tolerance": 0}]
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _snakemake(workdir, config, *args, env=None):
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args,
           "--configfile", str(config)]
    env = dict(env or os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SlurmCluster(tmp_path_factory.mktemp("slurm")) as c:
        yield c


def test_study_on_a_real_slurm(cluster, tmp_path):
    config = _config(tmp_path)
    local, remote = tmp_path / "local", tmp_path / "slurm"
    local.mkdir()
    remote.mkdir()
    ok = ["L1-H1-D16-hd16-mlp32-s0", "L1-H1-D16-hd16-mlp32-s1", "L1-H2-D16-hd8-mlp32-s0"]

    on_slurm = _snakemake(remote, config, "--profile", str(REPO / "profiles" / "slurm"), *NO_ACCOUNTING,
                          "--verbose", env=cluster.env)
    out = on_slurm.stdout + on_slurm.stderr
    assert on_slurm.returncode != 0, "the failing variant must fail the run"

    # every training job went through sbatch, with a GPU request
    calls = [line.split("--wrap")[0] for line in out.splitlines() if "sbatch call:" in line]
    train_calls = [c for c in calls if "rule_train_" in c]
    submitted = {re.search(r"rule_train_wildcards_tiny_(\S+)", c).group(1) for c in train_calls}
    assert submitted == set(ok) | {FAILING}, calls
    assert all("--gpus=fake:1" in c for c in train_calls), train_calls  # gpu and gpu_model
    assert sum(FAILING in c for c in train_calls) == 2  # the profile's retry, then reported
    # aggregation and figures stay on the submitting host
    assert not any(re.search(r"rule_(summary|figures|tables|overview|theory_report)", c) for c in calls)
    jobs = subprocess.run(["squeue", "-t", "all", "-h", "-O", "Comment:|,TresPerJob:|,State"], env=cluster.env,
                          capture_output=True, text=True, check=True).stdout.splitlines()
    jobs = ["|".join(part.strip() for part in j.split("|")) for j in jobs]
    train_jobs = [j for j in jobs if j.startswith("rule_train_")]
    assert len(train_jobs) == 5 and sum(j.endswith("|FAILED") for j in train_jobs) == 2, jobs
    for v in ok:  # each training ran inside its own Slurm job, on the (fake) GPU Slurm gave it
        meta = json.loads((remote / "results" / "tiny" / v / "metrics.json").read_text())["run"]
        assert meta["slurm_job_id"] and meta["cuda_visible_devices"] in ("0", "1"), meta

    # the failure is reported with its log; the other variants finished
    assert f"logs/train/tiny/{FAILING}.log" in out
    assert "expects 1" in (remote / "logs" / "train" / "tiny" / f"{FAILING}.log").read_text()
    for v in ok:
        assert (remote / "results" / "tiny" / v / "conditioning.csv").exists(), v
    assert not (remote / "results" / "tiny" / FAILING / "metrics.json").exists()
    # `leaner status` reads the same files a shared filesystem gives the submitting host
    status = subprocess.run([str(BIN / "leaner"), "status", str(config)], cwd=remote, capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert status[0] == "4 variants: 3 done, 1 failed", status
    failed = next(line for line in status if FAILING in line)
    assert failed.split()[2] == "failed" and "expects 1" in failed, failed

    # the same config run locally gives the same results
    local_run = _snakemake(local, config, "--cores", "2", "--keep-going")
    assert local_run.returncode != 0
    for v in ok:
        a = json.loads((remote / "results" / "tiny" / v / "metrics.json").read_text())
        b = json.loads((local / "results" / "tiny" / v / "metrics.json").read_text())
        assert a["final"] == b["final"] and a["params"] == b["params"] and a["steps"] == b["steps"], v
        # the same tensors, bit for bit (the file bytes may differ: safetensors writes its header's
        # metadata map in hash order)
        wa = load_file(str(remote / "results" / "tiny" / v / "model.safetensors"))
        wb = load_file(str(local / "results" / "tiny" / v / "model.safetensors"))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), v
        assert (remote / "results" / "tiny" / v / "conditioning.csv").read_text() == \
            (local / "results" / "tiny" / v / "conditioning.csv").read_text()


def test_a_cancelled_job_is_resubmitted_and_resumes(cluster, tmp_path):
    """scancel a training job mid-run (as preemption would): the profile's retry submits it again
    and the new job resumes from the rolling checkpoint instead of step 0."""
    import time

    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [2], "mlp_ratio": [2],
                     "seeds": [0]}
    study["recipe"].update(epochs=40, checkpoint_every=10)
    study["resources"] = {"gpu": 1, "threads": 1, "runtime": 5, "mem_mb": 1000}
    config = tmp_path / "long.yaml"
    config.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    work.mkdir()
    variant = work / "results" / "tiny" / "L1-H2-D16-hd8-mlp32-s0"
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work),
           "results/tiny/L1-H2-D16-hd8-mlp32-s0/metrics.json", "--profile", str(REPO / "profiles" / "slurm"),
           *NO_ACCOUNTING, "--verbose", "--configfile", str(config)]
    env = {**cluster.env, "PATH": f"{BIN}{os.pathsep}{cluster.env['PATH']}"}
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while not (variant / ".resume" / "state.pt").exists():
        assert time.time() < deadline and proc.poll() is None, "training never wrote a checkpoint"
        time.sleep(0.1)
    jobs = subprocess.run(["squeue", "-h", "-t", "running", "-o", "%i|%k"], env=cluster.env, capture_output=True,
                          text=True, check=True).stdout.split()
    train_jobs = [j.split("|")[0] for j in jobs if "rule_train" in j]
    assert len(train_jobs) == 1, jobs
    subprocess.run(["scancel", train_jobs[0]], env=cluster.env, check=True)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    assert sum("sbatch call:" in line and "rule_train_" in line for line in out.splitlines()) == 2, out[-4000:]
    log = (work / "logs" / "train" / "tiny" / "L1-H2-D16-hd8-mlp32-s0.log").read_text()
    assert "resumed from step" in log, log[-2000:]
    metrics = json.loads((variant / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["steps"] == metrics["total_steps"]
    assert metrics["run"]["slurm_job_id"] != train_jobs[0]  # finished by the second job


def _shared_config(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [1, 2], "mlp_ratio": [2],
                     "seeds": [0]}
    study["conditioning"] = {"samples": 32}
    study["resources"] = {"gpu": 1, "jobs_per_gpu": 2, "threads": 1, "runtime": 5, "mem_mb": 1000}
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.devices
def test_k_shared_variants_are_one_slurm_job_of_one_gpu(cluster, tmp_path):
    """jobs_per_gpu: 2 -> the two variants (training and conditioning) are one Snakemake group,
    submitted as one Slurm job that asks for one GPU; inside it both train at once, each on a seat
    of that GPU, with the job's own lock folder."""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in cluster.env.items() if k != "LEANER_DEVICE"}
    proc = _snakemake(work, _shared_config(tmp_path), "--profile", str(REPO / "profiles" / "slurm"),
                      *NO_ACCOUNTING, "--verbose", env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    calls = [line.split("--wrap")[0] for line in out.splitlines() if "sbatch call:" in line]
    gpu_calls = [c for c in calls if "--gres" in c or "--gpus" in c]
    assert len(gpu_calls) == 1, calls  # one allocation for 2 trainings + 2 conditionings
    assert "--gres=gpu:1" in gpu_calls[0] and "--gpus" not in gpu_calls[0], gpu_calls
    assert not any(re.search(r"rule_(train|conditioning)_", c) for c in calls), calls  # no job of its own
    runs = [json.loads(p.read_text()) for p in sorted((work / "results" / "tiny").glob("*/metrics.json"))]
    assert len(runs) == 2
    job_ids = {m["run"]["slurm_job_id"] for m in runs}
    assert len(job_ids) == 1 and None not in job_ids
    claims = [m["run"]["gpu_claim"] for m in runs]
    assert sorted(c["seat"] for c in claims) == [0, 1] and all(c["seats"] == 2 for c in claims), claims
    (job_id,) = job_ids
    assert all(c["lock_dir"].endswith(f"slurm-{job_id}") for c in claims), claims
    first, second = sorted(runs, key=lambda m: m["run"]["gpu_claim"]["at_unix"])
    assert second["run"]["gpu_claim"]["at_unix"] < first["run"]["finished_unix"], "the two did not train at once"
    for m in runs:
        assert (work / "results" / "tiny" / m["variant"] / "conditioning.csv").exists()


HOLD_GPU_0 = """
import json, sys, time
from leaner.compute.devices import claim_slot, claimed
claim_slot(1, timeout_s=5)
time.sleep(4)
print(json.dumps({**claimed(), "released_unix": time.time()}))
"""


@pytest.mark.devices
def test_two_slurm_jobs_that_both_see_gpu_0_do_not_wait_on_each_other(cluster, tmp_path):
    """With cgroup device constraints each job sees its own GPU as device 0; with one lock folder
    on a shared /tmp, both would lock gpu-0.lock and the second would wait. Each holds its GPU for
    4 s and may wait at most 5 s for it: both must claim at once."""
    script = tmp_path / "hold.py"
    script.write_text(HOLD_GPU_0)
    env = {k: v for k, v in cluster.env.items() if k != "LEANER_DEVICE"}
    env["LEANER_GPU_LOCK_DIR"] = str(tmp_path / "shared-tmp")  # one folder for both, as /tmp on one node
    outs = [tmp_path / f"job{i}.out" for i in (1, 2)]
    for out in outs:
        subprocess.run(["sbatch", "--gpus=1", "-c", "1", "--mem=500", "-o", str(out),
                        "--wrap", f"export CUDA_VISIBLE_DEVICES=0; {sys.executable} {script}"],
                       env=env, check=True, capture_output=True)
    deadline = time.time() + 120
    while subprocess.run(["squeue", "-h", "-t", "pending,running"], env=env, capture_output=True,
                         text=True).stdout.strip():
        assert time.time() < deadline, "the two jobs did not finish"
        time.sleep(0.5)
    claims = [json.loads(out.read_text().strip().splitlines()[-1]) for out in outs]
    assert all(c["gpus"] == ["0"] for c in claims), claims
    assert claims[0]["lock_dir"] != claims[1]["lock_dir"]
    assert max(c["at_unix"] for c in claims) < min(c["released_unix"] for c in claims), "one waited for the other"


def test_a_job_longer_than_its_time_limit_comes_back_and_finishes(cluster, tmp_path):
    """A training job of ~2 minutes of work (23,000 steps) under a 1-minute limit: Slurm ends each attempt at its
    time limit with SIGTERM, the training saves its state at the next step and exits, the job
    comes back (resources.attempts: Snakemake's retries) and resumes, until it is done. No
    periodic checkpoint here (checkpoint_every beyond the run, checkpoint_minutes null): every
    step kept across attempts was saved on the stop signal."""
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [2], "mlp_ratio": [2],
                     "seeds": [0]}
    study["recipe"].update(epochs=1000, eval_every=100, checkpoint_every=100_000, checkpoint_minutes=None)
    study["resources"] = {"gpu": 1, "threads": 1, "runtime": 1, "mem_mb": 1000, "attempts": 6}
    config = tmp_path / "long.yaml"
    config.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    work.mkdir()
    target = "results/tiny/L1-H2-D16-hd8-mlp32-s0/metrics.json"
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work), target,
           "--profile", str(REPO / "profiles" / "slurm"), *NO_ACCOUNTING, "--verbose", "--configfile", str(config)]
    env = {**cluster.env, "PATH": f"{BIN}{os.pathsep}{cluster.env['PATH']}"}
    started = time.time()
    run = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    submitted = sum("sbatch call:" in line and "rule_train_" in line for line in out.splitlines())
    metrics = json.loads((work / target).read_text())
    assert metrics["status"] == "ok" and metrics["steps"] == metrics["total_steps"] == 1000 * 23
    resumed = metrics["resumed_at"]
    assert submitted == len(resumed) + 1 >= 2, (submitted, resumed, out[-3000:])
    assert resumed == sorted(set(resumed)) and resumed[0] > 0  # every attempt kept progress
    slurm_logs = "".join(p.read_text(errors="replace") for p in (work / ".snakemake" / "slurm_logs").rglob("*.log"))
    assert "DUE TO TIME LIMIT" in slurm_logs, slurm_logs[-3000:]
    print(f"time-limited job: {submitted} attempts, resumed at steps {resumed}, {time.time() - started:.0f} s")
