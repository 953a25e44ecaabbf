"""A job's life against its time limit: the resume state at an epoch's end, an attempt that
makes no progress, and the attempts `leaner cost --check cluster` says a job needs. (SIGTERM to a
training process and to a 2-process run: test_faults.py and test_distributed.py; a job stopped
by a real Slurm's time limit: test_slurm.py.)"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import time

import pandas as pd
import pytest
import yaml

from leaner.planning.cards import CARDS
from leaner.planning.cost import START_MINUTES, attempts_needed
from leaner.planning.fit import check_plan
from leaner.schema import Recipe
from leaner.training.resume import RESUME_DIR, write_seconds
from leaner.training.stopping import ATTEMPTS_FILE, Attempts
from leaner.training.train import train
from leaner.workflow.plan import load_plan

from conftest import BIN, TINY, small_spec


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
    while not record.exists():
        assert time.time() < deadline and second.poll() is None
        time.sleep(0.01)
    second.send_signal(signal.SIGKILL)
    second.wait()
    assert Attempts(out / RESUME_DIR).resumed_at() == [5]

    third = subprocess.run(cmd, capture_output=True, text=True)
    assert third.returncode == 1
    lines = third.stderr.strip().splitlines()
    assert lines[-1].startswith("leaner train: error: no progress: the last attempt also resumed at step 5"), lines
    assert str(record) in lines[-1]

    record.unlink()
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    assert json.loads((out / "metrics.json").read_text())["resumed_at"] == [5]


def test_attempts_a_job_needs(monkeypatch):
    """One attempt where the work and the start-up fit the runtime; else the work over what each
    attempt keeps. A state too big to write between SIGTERM and SIGKILL keeps only what its last
    periodic checkpoint saved; without one, no attempt keeps anything."""
    small = 10_000
    assert attempts_needed(None, 60, small, "auto") == (None, None)
    assert attempts_needed((60 - START_MINUTES) / 60, 60, small, "auto") == (1, None)
    assert attempts_needed(10.0, 60, small, "auto") == (math.ceil(600 / (60 - START_MINUTES)), None)
    big = 5 * 10**9  # 60 GB: minutes to write
    assert write_seconds(big) > 30
    assert attempts_needed(10.0, 120, big, 30.0) == (math.ceil(600 / (120 - START_MINUTES - 30)), None)
    n, why = attempts_needed(10.0, 120, big, None)
    assert n is None and why.startswith("an attempt of 120 min keeps no progress")
    assert attempts_needed(1.0, START_MINUTES, small, "auto")[1] is not None


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
    model = build_model(spec["model"])
    optimizer = make_optimizer(model, Recipe.of(spec["recipe"]))
    run = resume_state(spec, out, model, optimizer, Context(torch.device("cpu")), out / RESUME_DIR / "kept", print)
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
    saved = Attempts(out / RESUME_DIR).resumed_at()  # nothing resumed yet
    assert row.state == "stopped" and saved == [], row
    assert "stopped by SIGTERM" in row.detail and "a re-run resumes from step" in row.detail, row.detail
