"""A job's life against its time limit: the resume state at an epoch's end, an attempt that
makes no progress, and the attempts `leaner cost --check cluster` says a job needs. (SIGTERM to a
training process and to a 2-process run: test_faults.py and test_distributed.py; a job stopped
by a real Slurm's time limit: test_slurm.py.)"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from leaner.planning.cards import CARDS
from leaner.planning.fit import check_plan
from leaner.planning.time_limit import (
    KILL_WAIT_S,
    SIGNAL_LEAD_S,
    START_MINUTES,
    STOP_GRACE_S,
    attempts_needed,
    stop_seconds,
)
from leaner.runspec import RunSpec
from leaner.training.attempts import ATTEMPTS_FILE, AttemptRecord
from leaner.training.resume import RESUME_DIR, write_seconds
from leaner.training.train import train
from leaner.workflow.plan import load_plan

from conftest import BIN, TINY, small_spec

pytestmark = pytest.mark.slow


def _vit_config(tmp_path, name: str, heads: list[int], recipe: dict, **resources) -> tuple[Path, dict]:
    """configs/demo.yaml's ViT study alone, at width 16, depth 1 and seed 0 with `heads`, its
    recipe and resources updated; (the config's path, its study, to change and write again)."""
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": heads, "mlp_ratio": [2],
                     "seeds": [0]}
    study["recipe"].update(recipe)
    study["resources"].update(resources)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, cfg


def test_a_checkpoint_at_an_epochs_end_keeps_that_epochs_row(tmp_path, digits_manifest):
    """23 steps an epoch, stopped after the checkpoint at step 23: the resumed run's history is
    the uninterrupted run's, the first epoch's row and its training loss included."""
    spec = small_spec()
    spec["recipe"].update(epochs=3, checkpoint_every=23, checkpoint_minutes=None)
    train(spec, str(digits_manifest), tmp_path / "ref", progress=False)
    assert train(spec, str(digits_manifest), tmp_path / "cut", progress=False, stop_after=23) == {}
    train(spec, str(digits_manifest), tmp_path / "cut", progress=False)
    ref, got = (pd.read_csv(tmp_path / d / "history.csv").drop(columns="elapsed_s") for d in ("ref", "cut"))
    assert list(got["epoch"]) == [1, 2, 3]
    pd.testing.assert_frame_equal(got, ref)


def test_an_attempt_without_progress_stops_the_run_in_one_line(tmp_path, digits_manifest):
    """Attempt 1 saves step 5; attempt 2 resumes there and is killed (-9) before it saves again;
    attempt 3 would only repeat it: it stops with one line. Deleting the record lets it try again."""
    spec = small_spec()
    spec["recipe"].update(epochs=40, checkpoint_every=5, checkpoint_minutes=None)
    out = tmp_path / "run"
    train(spec, str(digits_manifest), out, progress=False, stop_after=5)
    cmd = [str(BIN / "leaner"), "train", "--spec", json.dumps(spec), "--data", str(digits_manifest), "--out",
           str(out), "--threads", "1", "--no-progress"]
    second = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record = out / RESUME_DIR / ATTEMPTS_FILE
    deadline = time.time() + 60
    while len(AttemptRecord(out / RESUME_DIR).records()) < 2:  # the second attempt has begun
        assert time.time() < deadline and second.poll() is None
        time.sleep(0.01)
    second.send_signal(signal.SIGKILL)
    second.wait()
    assert AttemptRecord(out / RESUME_DIR).resumed_at() == [5]

    third = subprocess.run(cmd, capture_output=True, text=True)
    assert third.returncode == 1
    lines = third.stderr.strip().splitlines()
    assert lines[-1].startswith("leaner train: error: no progress: the last attempt also began at step 5 and saved "
                                "nothing before it ended (running"), lines
    assert str(record) in lines[-1]

    record.unlink()
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    assert json.loads((out / "metrics.json").read_text())["resumed_at"] == [5]


def test_attempts_a_job_needs(monkeypatch):
    """One attempt where the start-up, the work and the early signal's lead fit the runtime; else
    the work over what each attempt keeps. A stop (the step in flight, then the state's write) that
    does not fit between the stop signal and SIGKILL keeps only what the last periodic checkpoint
    saved; without one, no attempt keeps anything. Without the early signal the grace is KillWait."""
    small, lead = 10_000, SIGNAL_LEAD_S / 60
    assert attempts_needed(None, 60, small, "auto") == (None, None)
    assert attempts_needed((60 - START_MINUTES - lead) / 60, 60, small, "auto") == (1, None)
    assert attempts_needed((60 - START_MINUTES - lead + 1) / 60, 60, small, "auto")[0] == 2
    assert attempts_needed(10.0, 60, small, "auto") == (math.ceil(600 / (60 - START_MINUTES - lead)), None)
    assert attempts_needed(10.0, 60, small, "auto", lead_s=0.0) == (math.ceil(600 / (60 - START_MINUTES)), None)
    big = 10**10  # 120 GB: ten minutes to write
    assert write_seconds(big) > STOP_GRACE_S
    assert attempts_needed(10.0, 120, big, 30.0) == (math.ceil(600 / (120 - START_MINUTES - lead - 30)), None)
    n, why = attempts_needed(10.0, 120, big, None)
    assert n is None and why.startswith("an attempt of 120 min keeps no progress")
    assert attempts_needed(1.0, START_MINUTES, small, "auto")[1] is not None
    # a 7 GB state fits the profile's early signal, not KillWait alone
    seven_gb = 7 * 10**9 // 12
    assert stop_seconds(seven_gb, 7.0) < STOP_GRACE_S
    assert stop_seconds(seven_gb, 7.0) > KILL_WAIT_S
    assert attempts_needed(30.0, 1440, seven_gb, None, 7.0)[0] == 2
    assert attempts_needed(30.0, 1440, seven_gb, None, 7.0, grace_s=KILL_WAIT_S, lead_s=0.0)[0] is None


def test_the_cluster_check_lists_long_jobs_and_refuses_too_few_attempts(tmp_path):
    """tiny_nearest on an H100 at 600,000 steps (~1.6 h by P2's measured step) against a 30-minute
    runtime: listed with its attempts; refused, one line a job, while resources.attempts is 1;
    accepted at the attempts it needs."""
    cfg = yaml.safe_load(TINY.read_text())
    study = cfg["studies"]["tiny_nearest"]
    study["recipe"].update(epochs=30_000)
    study["resources"] = {"gpu": 1, "gpu_model": "h100", "runtime": 30, "threads": 1, "mem_mb": 1000}
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(cfg))
    listed, problems = check_plan(load_plan(path), "cluster", CARDS["h100"], env={})
    assert len(listed) == 2 and len(problems) == 2, (listed, problems)
    need = int(listed[0].rsplit(": ", 1)[1].split()[0])
    assert need > 1 and listed[0].startswith("study tiny_nearest: job L1-H1-W1-r8-d8-N4-none-s0: ~")
    assert problems[0].endswith(f"resources.attempts allows 1 (allowed: attempts >= {need}, or a longer runtime)")
    study["resources"]["attempts"] = need
    path.write_text(yaml.safe_dump(cfg))
    listed, problems = check_plan(load_plan(path), "cluster", CARDS["h100"], env={})
    assert len(listed) == 2 and problems == []
    assert load_plan(path).train_retries == need - 1


@pytest.mark.parametrize("value", [0, -1, "often"])
def test_attempts_must_be_a_positive_count(tmp_path, value):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["studies"]["tiny_nearest"]["resources"]["attempts"] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = subprocess.run([str(BIN / "leaner"), "check-config", str(path)], capture_output=True, text=True)
    assert run.returncode != 0 and "attempts" in run.stderr, run.stderr


def test_a_resumed_run_keeps_no_copy_of_the_loaded_state(tmp_path, digits_manifest):
    """The state read at resume is loaded into the model and optimiser, then let go: a run does
    not hold the checkpoint's tensors (up to 7 GB a rank at paper scale) for its whole length."""
    import torch

    from leaner.compute.distributed import Context
    from leaner.models import build_model
    from leaner.training.optim import make_optimizer
    from leaner.training.start import resume_state

    spec = small_spec()
    spec["recipe"].update(epochs=2, checkpoint_every=5, checkpoint_minutes=None)
    out = tmp_path / "run"
    train(spec, str(digits_manifest), out, progress=False, stop_after=5)
    typed = RunSpec.of(spec)
    model = build_model(typed.model)
    optimizer = make_optimizer(model, typed.recipe)
    run = resume_state(typed, out, model, optimizer, Context(torch.device("cpu")), out / RESUME_DIR / "kept", print)
    assert run.step == 5 and run.model == {} and run.optimizer == {} and run.rng == []
    saved = torch.load(out / RESUME_DIR / "state.pt", weights_only=True)["model"]
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())


def test_leaner_status_shows_a_stopped_run_and_where_it_resumes(tmp_path, digits_manifest):
    """A run stopped by SIGTERM (its heartbeat says so) is `stopped`, not failed or running, with
    the step a re-run resumes from."""
    from leaner.running.status import variant_row

    spec = small_spec()
    spec["recipe"].update(epochs=200, checkpoint_every=1000, checkpoint_minutes=None)
    out = tmp_path / "run"
    cmd = [str(BIN / "leaner"), "train", "--spec", json.dumps(spec), "--data", str(digits_manifest), "--out",
           str(out), "--threads", "1", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not (out / "history.csv").exists():  # past its first epoch
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 75
    row = variant_row("unit", "v", out, tmp_path / "none.log")
    record = AttemptRecord(out / RESUME_DIR).records()  # one attempt, from step 0, stopped
    assert row.state == "stopped" and [(a["began_at_step"], a["end"]) for a in record] == [(0, "stopped")], row
    assert record[0]["saved_step"] > 0 and "stopped by SIGTERM" in record[0]["why"]
    assert "stopped by SIGTERM" in row.detail and "a re-run resumes from step" in row.detail, row.detail


def test_a_stopped_job_comes_back_and_a_job_without_progress_is_not_tried_again(tmp_path):
    """Through Snakemake on this machine, a study allowing 3 attempts: a training job stopped by
    SIGTERM after its first checkpoint is tried again, resumes and finishes, each attempt's log
    kept; a job that fails before its first step (its parameter count is wrong) is not tried
    again, and one line says why."""
    from leaner.training.tracking import read_progress

    from conftest import REPO

    config, cfg = _vit_config(tmp_path, "retries", [1, 2], {"epochs": 20, "checkpoint_every": 100,
                                                           "checkpoint_minutes": None}, attempts=3)
    broken, stopped = "L1-H1-D16-hd16-mlp32-s0", "L1-H2-D16-hd8-mlp32-s0"
    cfg["studies"]["tiny"]["expect_params"] = [{"variant": broken, "params": 1, "tolerance": 0}]
    config.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "2", "--keep-going",
           f"results/tiny/{broken}/metrics.json", f"results/tiny/{stopped}/metrics.json", "--configfile", str(config)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = work / "results" / "tiny" / stopped
    deadline = time.time() + 120
    while not (out / RESUME_DIR / "state.pt").exists():
        assert time.time() < deadline and proc.poll() is None, "no checkpoint was written"
        time.sleep(0.05)
    os.kill(read_progress(out)["pid"], signal.SIGTERM)
    log, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0, log[-3000:]  # the broken variant failed the run

    metrics = json.loads((out / "metrics.json").read_text())
    attempts = [(a["attempt"], a["end"]) for a in metrics["attempts"]]
    assert attempts == [(1, "stopped"), (2, "done")], metrics["attempts"]
    assert metrics["resumed_at"] == [metrics["attempts"][0]["saved_step"]] and metrics["resumed_at"][0] >= 100
    logs = work / "logs" / "train" / "tiny"
    assert "stopped by SIGTERM" in (logs / f"{stopped}.attempt-1.log").read_text()
    assert "resumed from step" in (logs / f"{stopped}.attempt-2.log").read_text()
    assert (logs / f"{stopped}.attempt-2.log").read_text() == (logs / f"{stopped}.log").read_text()

    said = [line for line in log.splitlines() if "not tried again" in line]
    assert said == [f"train results/tiny/{broken}: not tried again (1 of 3 attempts): attempt 1 failed before its "
                    "first step"], log[-3000:]
    assert log.count("Trying to restart job") == 1, log[-3000:]  # the stopped one, once
    assert not (logs / f"{broken}.attempt-2.log").exists()


def test_the_job_costs_table_counts_every_attempt(tmp_path):
    """A training job's benchmark file holds its last attempt only; its metrics.json lists every
    attempt, and the earlier ones' wall and CPU time (a killed one's until it was last seen) are
    added to the table; a fine-tuning job's are matched by its task."""
    from leaner.analysis.job_costs import job_costs

    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    paths = []
    for job in ("train/s/v", "finetune/s/v/cola"):
        bench = tmp_path / "logs" / "benchmarks" / f"{job}.tsv"
        bench.parent.mkdir(parents=True, exist_ok=True)
        bench.write_text(header + "10.0\t0:00:10\t30.0\t1\t1\t1\t0\t0\t50.0\t5.0\n")
        paths.append(str(bench))
    earlier = [{"started_unix": 0.0, "last_seen_unix": 100.0, "ended_unix": 120.0, "cpu_s": 60.0},
               {"started_unix": 200.0, "last_seen_unix": 230.0, "ended_unix": None, "cpu_s": None},  # killed
               {"started_unix": 300.0, "last_seen_unix": 310.0, "ended_unix": 310.0, "cpu_s": 5.0}]
    metrics = []
    for folder, attempts in (("s/v", earlier), ("s/v/glue/cola", earlier[1:])):
        path = tmp_path / "results" / folder / "metrics.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"study": "s", "attempts": attempts}))
        metrics.append(str(path))
    table = job_costs(paths, metrics).set_index("rule")
    assert table.loc["train", "attempts"] == 3 and table.loc["train", "jobs"] == 1
    assert table.loc["train", "wall_s_total"] == pytest.approx(10.0 + 120.0 + 30.0)
    assert table.loc["train", "cpu_time_s_total"] == pytest.approx(5.0 + 60.0)
    assert table.loc["finetune", "attempts"] == 2 and table.loc["finetune", "wall_s_total"] == pytest.approx(40.0)
    assert table.loc["all", "attempts"] == 5


def test_the_early_signal_a_job_asks_slurm_for_and_the_card_a_cluster_run_is_checked_on():
    from leaner.workflow.scheduling import cluster_check_args, signal_lead

    assert signal_lead("--signal=USR1@300") == 300 and signal_lead("'--signal=B:USR1@90' --qos=x") == 90
    assert signal_lead("--signal SIGTERM@120") == 120 and signal_lead("--signal=USR1") == 60
    assert signal_lead(None) == 0 and signal_lead("--qos=long") == 0
    jobs = [{"gpu_model": "h200", "slurm_extra": "--signal=USR1@300"}, {"gpu_model": "h200"}]
    assert cluster_check_args(jobs, {}) == ["--gpu", "h200", "--signal-lead", "0"]  # the least lead asked
    assert cluster_check_args([{"gpu_model": ""}], {"LEANER_GPU": "a100"}) == ["--gpu", "a100", "--signal-lead", "0"]
    assert cluster_check_args([], {}) == []


def test_the_profile_asks_for_an_early_signal_that_fits_the_largest_stop_of_the_paper_plan():
    """profiles/slurm asks Slurm for SIGUSR1 SIGNAL_LEAD_S before each training job's time limit;
    the largest stop `leaner cost` prices in configs/paper.yaml (vit_imagenet's L12-D2048: its step
    in flight, then its 7.3 GB state's write) needs more than Slurm's KillWait alone and fits the
    lead with room."""
    from leaner.planning.cost import jobs, price

    from conftest import REPO

    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.v8+.yaml").read_text())
    for rule in ("train", "finetune"):
        assert profile["set-resources"][rule]["slurm_extra"] == f"'--signal=USR1@{SIGNAL_LEAD_S:g}'"
    plan = load_plan(REPO / "configs" / "paper.yaml")
    rows = [price(j, plan, CARDS["h100"], None, REPO) for s in plan.studies.values() for j in jobs(s)
            if s.resources["gpu"]]
    stop, job = max((stop_seconds(r["params"], r["step_s"]), r["job"]) for r in rows)
    assert job == "L12-H32-D2048-hd64-mlp8192-s0" and KILL_WAIT_S < stop < STOP_GRACE_S / 2, (job, stop)


def test_a_group_that_outlasts_its_runtime_and_a_conditioning_that_outlasts_its_own_are_refused(tmp_path):
    """k jobs sharing a GPU are one Slurm job, which runs again whole: a job that needs a
    second attempt there is refused, one line; so is a conditioning job longer than its runtime.
    Where no study names a card, the default card is named in the line."""
    from leaner.planning.fit import default_card

    cfg = yaml.safe_load(TINY.read_text())
    study = cfg["studies"]["tiny_nearest"]
    study["recipe"].update(epochs=30_000)
    study["resources"] = {"gpu": 1, "jobs_per_gpu": 2, "runtime": 30, "threads": 1, "mem_mb": 1000, "attempts": 9}
    path = tmp_path / "group.yaml"
    path.write_text(yaml.safe_dump(cfg))
    gpu = default_card(None)
    listed, problems = check_plan(load_plan(path), "cluster", gpu, env={})
    assert len(problems) == 2 and listed == [], problems
    assert problems[0].startswith("study tiny_nearest: job L1-H1-W1-r8-d8-N4-none-s0 needs ~")
    assert "on an H100 SXM (the default card), 2 at once on one GPU (jobs_per_gpu): more than one" in problems[0]
    need = int(problems[0].split("runtime >= ")[1].split(",")[0])
    study["resources"]["runtime"] = need
    path.write_text(yaml.safe_dump(cfg))
    assert check_plan(load_plan(path), "cluster", gpu, env={}) == ([], [])
    study["resources"]["conditioning_runtime"] = 1
    path.write_text(yaml.safe_dump(cfg))
    _, problems = check_plan(load_plan(path), "cluster", gpu, env={})
    assert len(problems) == 2 and all("'s conditioning needs ~" in p for p in problems), problems
    assert problems[0].endswith("resources.conditioning_runtime is 1 (allowed: conditioning_runtime >= 6)")


def test_a_finished_cluster_job_is_put_back_not_trained_again(tmp_path, digits_manifest, monkeypatch):
    """A run inside a Slurm job keeps its finished outputs under a second name; with its outputs
    deleted (its group failed, or Slurm said TIMEOUT as it ended), the job run again puts them
    back, the same bytes, and trains nothing, and the retry decision counts it worth a try.
    Another spec is not given them; a dropped copy is gone. A local run keeps nothing."""
    from leaner.training import finished
    from leaner.training.attempts import no_progress

    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    spec = small_spec()
    spec["recipe"].update(epochs=2, checkpoint_every=10)
    spec["conditioning"]["steps"] = [0.5]
    out = tmp_path / "run"
    train(spec, str(digits_manifest), out, progress=False, gpu_share=5000)
    names = ["checkpoints/step23.safetensors", "history.csv", "init.safetensors", "metrics.json", "model.safetensors"]
    original = {n: (out / n).read_bytes() for n in names}
    assert sorted(json.loads((out / RESUME_DIR / finished.FINISHED_FILE).read_text())["files"]) == names
    assert no_progress(out / RESUME_DIR, 2) is None
    for n in names:  # what Snakemake does to a failed group's members, and again before it runs them
        (out / n).unlink()
    shutil.rmtree(out / "checkpoints")
    cmd = [str(BIN / "leaner"), "train", "--spec", json.dumps(spec), "--data", str(digits_manifest), "--out",
           str(out), "--threads", "1", "--no-progress", "--gpu-share", "5000"]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "leaner train: already trained: 5 outputs of the finished run put back" in again.stderr
    assert "step 0 of" not in again.stderr  # nothing trained
    assert {n: (out / n).read_bytes() for n in names} == original

    other = {**spec, "seed": 1}
    assert finished.restore(out, json.dumps(other, sort_keys=True)) is None
    assert finished.drop(out) and finished.restore(out, json.dumps(spec, sort_keys=True)) is None
    monkeypatch.delenv("SLURM_JOB_ID")  # a local run: no groups, nothing kept
    train(spec, str(digits_manifest), tmp_path / "local", progress=False)
    assert not (tmp_path / "local" / RESUME_DIR).exists()


def test_a_stalled_job_saves_stops_and_comes_back_to_the_same_result(tmp_path):
    """Through Snakemake on this machine: the batch after step 30 is held for 10 minutes (a loader
    that stopped feeding: tests/faults). With the stall floor at 2 s the run says so in one line within
    seconds, saves its state at step 30 (it was waiting for a batch: a step boundary) and stops
    (75); the job comes back, resumes at step 30 and ends bit-identical to an uninterrupted run."""
    from safetensors.torch import load_file

    from conftest import REPO, fault_env

    config, _ = _vit_config(tmp_path, "stall", [2], {"epochs": 3, "checkpoint_every": 1000,
                                                      "checkpoint_minutes": None}, attempts=2)
    target = "results/tiny/L1-H2-D16-hd8-mlp32-s0"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}

    def run(work, env):
        cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "1",
               f"{target}/metrics.json", "--configfile", str(config)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)

    started = time.monotonic()
    stalled = run(tmp_path / "stalled", fault_env(env, stall=[30, 600], stall_floor_s=2))
    took = time.monotonic() - started
    assert stalled.returncode == 0, stalled.stderr[-3000:]
    assert took < 200, took  # not the 600 s the batch was held
    logs = tmp_path / "stalled" / "logs" / "train" / "tiny"
    first = (logs / "L1-H2-D16-hd8-mlp32-s0.attempt-1.log").read_text()
    assert "leaner train: stalled: no progress for" in first and "in step after step 30" in first, first[-2000:]
    assert "the loader" in first and "exit status 75 (stopped, resumable)" in first, first[-2000:]
    assert "resumed from step 30" in (logs / "L1-H2-D16-hd8-mlp32-s0.attempt-2.log").read_text()
    metrics = json.loads((tmp_path / "stalled" / target / "metrics.json").read_text())
    assert [(a["began_at_step"], a["saved_step"], a["end"]) for a in metrics["attempts"]] == [
        (0, 30, "stopped"), (30, 69, "done")]

    assert run(tmp_path / "plain", env).returncode == 0
    ref = load_file(str(tmp_path / "plain" / target / "model.safetensors"))
    got = load_file(str(tmp_path / "stalled" / target / "model.safetensors"))
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    plain = json.loads((tmp_path / "plain" / target / "metrics.json").read_text())
    assert plain["final"] == metrics["final"]


STUCK = """
import signal, sys, time
from leaner.training.stall import StallWatch
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])  # a main thread stuck where no signal reaches it
with StallWatch(print, 75, on_exit=lambda why: print("recorded:", why), floor_s=0.5, exit_after_s=1.0) as watch:
    watch.stepped(7)
    time.sleep(60)
print("not reached")
"""


def test_a_stall_the_main_thread_cannot_answer_ends_the_process_resumable():
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", STUCK], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 75, proc.stdout + proc.stderr
    assert time.monotonic() - started < 20
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("stalled: no progress for") and "after step 7" in lines[0], lines
    assert lines[1] == "the main thread did not answer the stall in 1 s: exiting 75 (resumable)"
    assert lines[2].startswith("recorded: stalled:") and "not reached" not in proc.stdout


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_the_snakemake_of_a_slurm_job_passes_the_stop_signal_on_and_waits(tmp_path, signum):
    """Slurm with proctrack/cgroup signals only the step's own process: the Snakemake that runs the
    job's rules (SLURM_JOB_ID set, not the jobstep one). Here that Snakemake alone gets SIGTERM
    (a time limit) or SIGUSR1 (the early stop signal): it passes the signal on to the training it
    runs, which saves and stops (75), and it exits only after, reporting the job unfinished."""
    from leaner.training.tracking import read_progress

    from conftest import REPO

    config, _ = _vit_config(tmp_path, "job", [2], {"epochs": 400, "checkpoint_every": 100_000,
                                                    "checkpoint_minutes": None})
    work, variant = tmp_path / "work", "L1-H2-D16-hd8-mlp32-s0"
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "1",
           f"results/tiny/{variant}/metrics.json", "--configfile", str(config)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    out = work / "results" / "tiny" / variant
    deadline = time.time() + 120
    while not (read_progress(out) or {}).get("step"):
        assert time.time() < deadline and proc.poll() is None, "training never began"
        time.sleep(0.1)
    trainer = read_progress(out)["pid"]
    proc.send_signal(signum)  # to Snakemake alone, as proctrack/cgroup delivers it
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, log[-3000:]
    train_log = (work / "logs" / "train" / "tiny" / f"{variant}.log").read_text()
    name = signal.Signals(signum).name
    assert f"stopped by {name}" in train_log and "exit status 75" in train_log, train_log[-2000:]
    assert not (out / "metrics.json").exists() and not psutil_alive(trainer)
    assert torch.load(out / RESUME_DIR / "state.pt", weights_only=True)["step"] > 0


RELAY_SCRIPT = """
import os, signal, subprocess, sys, threading, time
from leaner.workflow.engine import relay_stop_signals
assert relay_stop_signals({"SLURM_JOB_ID": "1"}, ["snakemake"])
child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
                          "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(0)); print('ready', flush=True); "
                          "time.sleep(30); sys.exit(3)"], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
other = threading.Thread(target=time.sleep, args=(60,), daemon=True)
other.start()
done = threading.Lock()
done.acquire()
threading.Thread(target=lambda: (child.wait(), done.release()), daemon=True).start()
threading.Timer(0.3, signal.pthread_kill, (other.ident, signal.SIGUSR1)).start()
start = time.monotonic()
done.acquire(timeout=20)  # the main thread waits on a lock, as Snakemake's does while its jobs run
print(child.poll(), round(time.monotonic() - start, 1))
"""


def test_a_stop_signal_another_thread_of_snakemake_gets_reaches_the_training_at_once():
    """The kernel gives a signal sent to a process to any of its threads; Python runs the handler in
    the main thread only when it next runs Python code, and Snakemake's main thread waits on a lock
    while its jobs run. Here SIGUSR1 lands on another thread while the main thread waits 20 s: the
    relay passes it on to the child at once (without it, 20 s later)."""
    from conftest import REPO

    out = subprocess.run([sys.executable, "-c", RELAY_SCRIPT], capture_output=True, text=True, timeout=60,
                         cwd=REPO, check=True).stdout.split()
    rc, waited = int(out[0]), float(out[1])
    assert rc == 0 and waited < 5, out


def psutil_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
