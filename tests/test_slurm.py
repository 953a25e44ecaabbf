"""The SLURM profile against a real single-node Slurm (tests/slurm_cluster.py) of eight fake GPUs,
started once for the module: every training job goes through sbatch with a GPU request, results
equal a local run of the same config, a failing job is reported with its log while the others
finish, and a variant of eight GPUs is one Slurm task that sees all eight and runs one torchrun of
eight ranks. Snakemake is the real one with the real plugin, which looks at Slurm every 2 s here
(tests/slurm_snakemake.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from conftest import BIN, REPO, TINY, fault_env
from slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slow, pytest.mark.workflow,
              pytest.mark.skipif(os.geteuid() != 0, reason="starting slurmctld/slurmd/munged needs root")]

# Snakemake's CLI, polling Slurm every --seconds-between-status-checks (tests/slurm_snakemake.py)
SNAKEMAKE = [sys.executable, str(REPO / "tests" / "slurm_snakemake.py")]
FAILING = "L1-H2-D16-hd8-mlp32-s1"
# what a cluster without accounting (no slurmdbd) needs on top of profiles/slurm
NO_ACCOUNTING = ["--slurm-status-command", "squeue", "--slurm-no-account",
                 "--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2",
                 "--latency-wait", "5"]
GPUS = 8  # the test Slurm's fake GPUs


def _config(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [1, 2], "mlp_ratio": [2],
                     "seeds": [0, 1]}
    study["resources"] = {"gpu": 1, "gpu_model": "fake", "threads": 1, "runtime": 15, "mem_mb": 1000}
    # one variant fails on purpose: its parameter count cannot match
    study["expect_params"] = [{"variant": FAILING, "params": 1, "tolerance": 0}]
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _snakemake(workdir, config, *args, env=None):
    cmd = [*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args,
           "--configfile", str(config)]
    env = dict(env or os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), gpus=GPUS) as c:
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
    assert sum(FAILING in c for c in train_calls) == 1  # failed before its first step: not tried again
    assert f"train results/tiny/{FAILING}: not tried again (1 of 1 attempts)" not in out  # attempts spent, no line
    assert all("--signal=USR1@300" in c for c in train_calls), train_calls  # the profile's early stop signal
    assert "leaner cost --check cluster: 4 GPU jobs checked" in out  # the plan check at the start
    # aggregation and figures stay on the submitting host
    assert not any(re.search(r"rule_(summary|run_config|declare|report)", c) for c in calls)
    jobs = subprocess.run(["squeue", "-t", "all", "-h", "-O", "Comment:|,TresPerJob:|,State"], env=cluster.env,
                          capture_output=True, text=True, check=True).stdout.splitlines()
    jobs = ["|".join(part.strip() for part in j.split("|")) for j in jobs]
    train_jobs = [j for j in jobs if j.startswith("rule_train_")]
    assert len(train_jobs) == 4 and sum(j.endswith("|FAILED") for j in train_jobs) == 1, jobs
    for v in ok:  # each training ran inside its own Slurm job, on the (fake) GPU Slurm gave it
        meta = json.loads((remote / "results" / "tiny" / v / "metrics.json").read_text())["run"]
        assert meta["slurm_job_id"] and meta["cuda_visible_devices"] in map(str, range(GPUS)), meta

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
    """scancel a training job mid-run (as preemption would): the study's second attempt submits it
    again and the new job resumes from the rolling checkpoint instead of step 0."""
    import time

    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [2], "mlp_ratio": [2],
                     "seeds": [0]}
    study["recipe"].update(epochs=40, checkpoint_every=10)
    study["resources"] = {"gpu": 1, "threads": 1, "runtime": 15, "mem_mb": 1000, "attempts": 2}
    config = tmp_path / "long.yaml"
    config.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    work.mkdir()
    variant = work / "results" / "tiny" / "L1-H2-D16-hd8-mlp32-s0"
    cmd = [*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(work),
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
    study["resources"] = {"gpu": 1, "jobs_per_gpu": 2, "threads": 1, "runtime": 15, "mem_mb": 1000}
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.devices
def test_k_shared_variants_are_one_slurm_job_of_one_gpu(cluster, tmp_path):
    """jobs_per_gpu: 2 -> the two variants (training and conditioning) are one Snakemake group,
    submitted as one Slurm job that asks for one GPU; inside it both train at once, each on a seat
    of that GPU (the same device: both see the one GPU Slurm gave the job), with the job's own lock
    folder."""
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
    # k jobs on ONE device: both were shown the same single GPU, and both claimed a seat on it
    (visible,) = {m["run"]["cuda_visible_devices"] for m in runs}
    assert visible in map(str, range(GPUS)) and all(c["gpus"] == [visible] for c in claims), runs
    (job_id,) = job_ids
    assert all(c["lock_dir"].endswith(f"slurm-{job_id}") for c in claims), claims
    first, second = sorted(runs, key=lambda m: m["run"]["gpu_claim"]["at_unix"])
    assert second["run"]["gpu_claim"]["at_unix"] < first["run"]["finished_unix"], "the two did not train at once"
    for m in runs:
        assert (work / "results" / "tiny" / m["variant"] / "conditioning.csv").exists()


def test_a_variant_of_eight_gpus_is_one_slurm_task_that_sees_eight_and_runs_one_torchrun(cluster, tmp_path):
    """resources: {gpu: 8} -> one Slurm job of one task (squeue's NumTasks; the step the training
    ran in had one task: SLURM_STEP_NUM_TASKS) that sees all eight GPUs (CUDA_VISIBLE_DEVICES) and
    runs one torchrun of eight ranks (the run's processes; one launch in its log). Even where the
    user's default resources say `tasks: 1`, as many cluster profiles do: the plugin would turn it
    into --ntasks-per-gpu=1, eight tasks of --cpus-per-task each (snakemake-executor-plugin-slurm
    #459), which the rule's tasks_per_gpu 0 leaves out. The fake GPUs train on the CPU (gloo)."""
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [2], "mlp_ratio": [2],
                     "seeds": [0]}
    study["recipe"].update(epochs=1, max_steps=2, eval_every=100)
    study["conditioning"] = {"samples": 32, "steps": []}
    study["resources"] = {"gpu": GPUS, "threads": 1, "runtime": 15, "mem_mb": 1000}
    config = tmp_path / "eight.yaml"
    config.write_text(yaml.safe_dump(cfg))
    variant = "L1-H2-D16-hd8-mlp32-s0"
    work = tmp_path / "work"
    work.mkdir()
    started = time.time()
    proc = _on_slurm(cluster, work, config, f"results/tiny/{variant}/metrics.json",
                     "--default-resources", "runtime=30", "mem_mb=4000", "tasks=1")
    said: list[str] = []  # read as it comes: a full pipe would stop Snakemake
    reader = threading.Thread(target=lambda: said.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.time() + 600
    while proc.poll() is None:  # a job of several tasks would wait forever for 2 CPUs per task: fail at once
        jobs = subprocess.run(["squeue", "-h", "-t", "pending,running", "-O", "Comment:|,NumTasks:|,State"],
                              env=cluster.env, capture_output=True, text=True).stdout.splitlines()  # may time out
        wrong = [j for j in jobs if j.startswith("rule_train_") and j.split("|")[1].strip() != "1"]
        if wrong or time.time() > deadline:
            proc.kill()
            subprocess.run(["scancel", "-u", "root"], env=cluster.env)
            pytest.fail(f"the training job is not one task: {wrong}" if wrong else f"not done in 600 s: {jobs}")
        time.sleep(2)
    reader.join()
    out = "".join(said)
    assert proc.returncode == 0, out[-4000:]

    calls = [line.split("--wrap")[0] for line in out.splitlines() if "sbatch call:" in line and "rule_train_" in line]
    assert len(calls) == 1 and f"--gpus={GPUS}" in calls[0] and "--nodes=1" in calls[0], calls
    assert "--ntasks" not in calls[0], calls  # neither --ntasks nor --ntasks-per-gpu: one task
    metrics = json.loads((work / "results" / "tiny" / variant / "metrics.json").read_text())
    run = metrics["run"]
    job = subprocess.run(["squeue", "-h", "-t", "all", "-j", run["slurm_job_id"], "-O",
                          "NumTasks:|,tres-per-job:|,State"], env=cluster.env, capture_output=True, text=True,
                         check=True).stdout
    assert [part.strip() for part in job.split("|")] == ["1", f"gres:gpu:{GPUS}", "COMPLETED"], job  # one task
    assert run["slurm_step_tasks"] == "1", run  # and one task in the step that trained
    assert run["cuda_visible_devices"] == ",".join(map(str, range(GPUS))), run  # all eight, in that one task
    assert metrics["status"] == "ok" and metrics["steps"] == 2, {k: metrics[k] for k in ("status", "steps")}
    assert metrics["processes"] == GPUS and metrics["backend"] == "gloo" and metrics["device"] == "cpu"
    log = (work / "logs" / "train" / "tiny" / f"{variant}.log").read_text()
    launches = [line for line in log.splitlines() if line.startswith("launching:")]
    assert len(launches) == 1 and f"--nproc-per-node={GPUS}" in launches[0], log[-2000:]  # one torchrun
    print(f"eight-GPU job: {time.time() - started:.0f} s")


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


def _long_config(tmp_path, name: str, grid_heads: list[int], epochs: dict, study_resources: dict) -> Path:
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": grid_heads, "mlp_ratio": [2],
                     "seeds": [0]}
    study["recipe"].update(eval_every=100, checkpoint_every=100_000, checkpoint_minutes=None)
    study["overrides"] = [{"where": {"heads": h}, "recipe": {"epochs": e}} for h, e in epochs.items()]
    study["conditioning"] = {"samples": 32}
    study["resources"] = study_resources
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _on_slurm(cluster, work, config, *args, extra_env=None, faults=None) -> subprocess.Popen:
    cmd = [*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(work), *args,
           "--profile", str(REPO / "profiles" / "slurm"), *NO_ACCOUNTING, "--verbose", "--configfile", str(config)]
    env = {**cluster.env, "PATH": f"{BIN}{os.pathsep}{cluster.env['PATH']}", **(extra_env or {})}
    env = fault_env(env, **faults) if faults else env
    return subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _slurm_job_of(cluster, what: str) -> str:
    jobs = subprocess.run(["squeue", "-h", "-t", "running", "-o", "%i|%k"], env=cluster.env, capture_output=True,
                          text=True, check=True).stdout.split()
    return next(j.split("|")[0] for j in jobs if what in j)


def test_a_job_longer_than_its_time_limit_stops_with_a_slow_save_and_ends_as_an_uninterrupted_run(cluster, tmp_path):
    """A training job of ~84 s of steps (644 steps, each held 0.13 s by the data source tests/faults builds, long in
    time, not in work; more than one attempt's 43-73 s of steps, less than two) under a 1-minute
    limit, whose every save of its resume state is held 8 s
    (tests/faults): longer than the Snakemake in the job takes to exit once its job
    ends. Attempt 1 gets SIGUSR1 as `sbatch --signal=USR1@N`
    delivers it (every process of the job's steps, the Snakemake in it included); later attempts
    get Slurm's SIGTERM at the time limit (every process of every step, the batch shell included).
    Each saves at the step the signal came after, exits 75 and comes back as the next attempt
    (resources.attempts), which resumes at that step; the final weights equal an uninterrupted
    local run's bit for bit, every attempt's log is kept and every attempt is counted. No periodic
    checkpoint: every step kept across attempts was saved on a stop signal. (Where the last attempt
    ends within the seconds after its limit, Slurm says TIMEOUT and Snakemake deletes its outputs;
    the attempt after puts them back: training/finished.py.)"""

    config = _long_config(tmp_path, "long", [2], {2: 28}, {"gpu": 1, "threads": 1, "runtime": 1, "mem_mb": 1000,
                                                          "attempts": 6})
    variant = "L1-H2-D16-hd8-mlp32-s0"
    target = f"results/tiny/{variant}/metrics.json"
    work = tmp_path / "work"
    work.mkdir()
    started = time.time()
    # 1-minute attempts: no early signal (the profile's 300 s lead would come at once), and no plan
    # check (its 5 minutes of assumed start-up refuse a 1-minute runtime)
    proc = _on_slurm(cluster, work, config, target, "--set-resources", "train:slurm_extra=''",
                     extra_env={"LEANER_SKIP_PLAN_CHECK": "1"},
                     faults={"slow_rename": ["state.pt", 8], "slow_step": 0.13})
    progress = work / "results" / "tiny" / variant / "progress.json"
    deadline = time.time() + 300
    while not (progress.exists() and json.loads(progress.read_text()).get("step")):
        assert time.time() < deadline and proc.poll() is None, "the first attempt never trained"
        time.sleep(0.5)
    subprocess.run(["scancel", "--signal=USR1", _slurm_job_of(cluster, "rule_train")], env=cluster.env, check=True)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]

    metrics = json.loads((work / target).read_text())
    assert metrics["status"] == "ok" and metrics["steps"] == metrics["total_steps"] == 28 * 23
    attempts = metrics["attempts"]
    submitted = sum("sbatch call:" in line and "rule_train_" in line for line in out.splitlines())
    logs = work / "logs" / "train" / "tiny"
    put_back = int("already trained" in (logs / f"{variant}.log").read_text())
    assert submitted == len(attempts) + put_back and len(attempts) >= 3, (submitted, attempts)
    assert [a["attempt"] for a in attempts] == list(range(1, len(attempts) + 1))
    stops = []  # seconds from each stop signal to the saved state
    for i, (before, after) in enumerate(zip(attempts, attempts[1:]), start=1):
        assert before["end"] == "stopped" and after["began_at_step"] == before["saved_step"] > before["began_at_step"]
        log = (logs / f"{variant}.attempt-{i}.log").read_text()
        how = "SIGUSR1" if i == 1 else "SIGTERM"
        found = re.search(rf"stopped by {how} \(it came after step (\d+)\): resume state saved at step (\d+), "
                          r"([\d.]+) s after the signal", log)
        assert found and int(found[2]) == before["saved_step"] and int(found[2]) - int(found[1]) <= 1, log[-2000:]
        assert float(found[3]) >= 8.0  # the held save took its time and was not cut short
        stops.append(float(found[3]))
        assert f"resumed from step {before['saved_step']}" in (logs / f"{variant}.attempt-{i + 1}.log").read_text()
    slurm_logs = "".join(p.read_text(errors="replace") for p in (work / ".snakemake" / "slurm_logs").rglob("*.log"))
    assert "DUE TO TIME LIMIT" in slurm_logs, slurm_logs[-3000:]

    local = tmp_path / "local"  # without the held steps: they change the time a step takes, not what it computes
    local.mkdir()
    assert _snakemake(local, config, target, "--cores", "1").returncode == 0
    ref = load_file(str(local / "results" / "tiny" / variant / "model.safetensors"))
    got = load_file(str(work / "results" / "tiny" / variant / "model.safetensors"))
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    assert json.loads((local / target).read_text())["final"] == metrics["final"]
    print(f"time-limited job: {submitted} attempts, saved at {[a['saved_step'] for a in attempts]}, each stop "
          f"{stops} s after its signal, {time.time() - started:.0f} s in all")


def test_a_finished_member_of_a_gpu_sharing_group_is_not_trained_again(cluster, tmp_path):
    """Two variants share a GPU (jobs_per_gpu 2): one Snakemake group, one Slurm job. Once the short
    one (69 steps) has finished training, the job gets SIGUSR1 as `sbatch --signal` sends it; the
    long one (276 steps, each held 0.1 s: tests/faults)
    stops with its state saved, so Snakemake fails the group, deletes both members' outputs and
    runs the group again. There the finished one is put back from its kept copy, not trained (its
    metrics.json still records one attempt), and the long one resumes where it stopped; both end
    with their conditioning. The plan check at the start prices the group on the default card."""
    config = _long_config(tmp_path, "group", [1, 2], {1: 3, 2: 12},
                          {"gpu": 1, "jobs_per_gpu": 2, "threads": 1, "runtime": 15, "mem_mb": 1000, "attempts": 2})
    work = tmp_path / "work"
    work.mkdir()
    short, long_ = (work / "results" / "tiny" / v for v in ("L1-H1-D16-hd16-mlp32-s0", "L1-H2-D16-hd8-mlp32-s0"))
    proc = _on_slurm(cluster, work, config, faults={"slow_step": 0.1})
    deadline = time.time() + 300
    while not ((short / "metrics.json").exists() and (long_ / ".resume" / "attempts.json").exists()):
        assert time.time() < deadline and proc.poll() is None, "the group never got going"
        time.sleep(0.5)
    time.sleep(2)
    subprocess.run(["scancel", "--signal=USR1", _slurm_job_of(cluster, "gpu_share_tiny")], env=cluster.env,
                   check=True)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    assert "leaner cost --check cluster: 2 GPU jobs checked" in out and "(the default card)" in out
    calls = [line for line in out.splitlines() if "sbatch call:" in line and "--gres=gpu:1" in line]
    assert len(calls) == 2, out[-4000:]  # the group ran again
    kept = json.loads((short / "metrics.json").read_text())
    assert [a["attempt"] for a in kept["attempts"]] == [1]  # trained once
    again = (work / "logs" / "train" / "tiny" / "L1-H1-D16-hd16-mlp32-s0.log").read_text()
    assert "leaner train: already trained:" in again and "nothing trained" in again, again[-2000:]
    done = json.loads((long_ / "metrics.json").read_text())
    assert done["status"] == "ok" and [a["end"] for a in done["attempts"]] == ["stopped", "done"]
    assert "stopped by SIGUSR1" in (work / "logs" / "train" / "tiny" / "L1-H2-D16-hd8-mlp32-s0.attempt-1.log"
                                    ).read_text()
    for folder in (short, long_):
        assert (folder / "conditioning.csv").exists()


def test_a_cluster_run_is_refused_at_its_start_by_the_plan_check_leaner_cost_makes(cluster, tmp_path):
    """A GPU study that names no card, whose job needs ~1.6 h (600,000 of P2's steps on an H100)
    against a 30-minute runtime and one attempt: `leaner cost --check cluster` refuses it, and a
    run with the Slurm profile stops at its start with the same line, before anything is
    submitted."""
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny"]
    study = cfg["studies"]["tiny_nearest"]
    study["recipe"].update(epochs=30_000)
    study["resources"] = {"gpu": 1, "threads": 1, "runtime": 30, "mem_mb": 1000}
    config = tmp_path / "too_long.yaml"
    config.write_text(yaml.safe_dump(cfg))
    check = subprocess.run([str(BIN / "leaner"), "cost", str(config), "--check", "cluster"], capture_output=True,
                           text=True)
    refused = [line for line in check.stderr.splitlines() if line.startswith("study tiny_nearest: job ")]
    assert check.returncode == 2 and len(refused) == 2, check.stderr
    assert "on an H100 SXM (the default card)" in refused[0] and "resources.attempts allows 1" in refused[0]
    work = tmp_path / "work"
    work.mkdir()
    run = _snakemake(work, config, "--profile", str(REPO / "profiles" / "slurm"), *NO_ACCOUNTING, "--verbose",
                     env=cluster.env)
    assert run.returncode != 0
    assert [line for line in run.stderr.splitlines() if line.startswith("study tiny_nearest: job ")] == refused
    assert "sbatch call:" not in run.stdout + run.stderr and not (work / "results").exists()
