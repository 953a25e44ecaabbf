"""`leaner status` on the files a job leaves: its heartbeat (training/tracking.py) and its log."""

from __future__ import annotations

import json
import re
import time

import pytest

from leaner.running.status import STALE_S, variant_row
from leaner.training.tracking import PROGRESS_FILE, mark_failed, starting

pytestmark = pytest.mark.fast


def _row(folder, log):
    r = variant_row("s", "v", folder, log)
    return r.state, r.step, r.detail


def test_a_starting_job_then_its_failure_then_a_reused_pid(tmp_path):
    folder, log = tmp_path / "v", tmp_path / "v.log"
    starting(folder)  # this process is the job
    assert _row(folder, log) == ("running", "", _row(folder, log)[2])
    assert _row(folder, log)[2].startswith("starting: loading data and model")
    beat = json.loads((folder / PROGRESS_FILE).read_text())
    (folder / PROGRESS_FILE).write_text(json.dumps({**beat, "pid_started": beat["pid_started"] - 3600}))
    state, _, detail = _row(folder, log)  # the pid now belongs to another process: this job is gone
    assert state == "failed" and detail.startswith("stopped: process gone") and "starts over" in detail
    starting(folder)
    mark_failed(folder, ValueError("the config expects 1 parameter"))
    assert _row(folder, log) == ("failed", "", "ValueError: the config expects 1 parameter")


def test_a_heartbeat_from_another_host_is_trusted_until_it_goes_stale(tmp_path):
    folder, log = tmp_path / "v", tmp_path / "v.log"
    folder.mkdir()
    beat = {"state": "running", "step": 300, "total_steps": 1000, "loss": 0.4321, "checkpoint_step": 200,
            "host": "node-17", "pid": 1, "pid_started": 0.0, "slurm_job_id": "42", "updated_unix": time.time() - 60}
    (folder / PROGRESS_FILE).write_text(json.dumps(beat))
    state, step, detail = _row(folder, log)
    assert (state, step) == ("running", "300/1000")
    assert re.fullmatch(r"loss 0\.4321, 6\d s ago \(node-17, slurm job 42\)", detail), detail
    (folder / PROGRESS_FILE).write_text(json.dumps({**beat, "updated_unix": time.time() - STALE_S - 60}))
    state, step, detail = _row(folder, log)
    assert state == "failed" and "no heartbeat for 12 min (node-17, slurm job 42)" in detail
    assert detail.endswith("a re-run resumes from step 200")
    log.write_text("[s/v] epoch 3 step 300: train_loss=0.43\nslurmstepd: error: Detected 1 oom_kill event\n")
    assert _row(folder, log)[2] == "slurmstepd: error: Detected 1 oom_kill event; a re-run resumes from step 200"


def test_no_heartbeat_the_log_says_why_or_the_variant_is_pending(tmp_path):
    folder, log = tmp_path / "v", tmp_path / "v.log"
    assert _row(folder, log) == ("pending", "", "")
    log.write_text("leaner train: error: results/data/x/manifest.json: file not found\n")
    assert _row(folder, log) == ("failed", "", "leaner train: error: results/data/x/manifest.json: file not found")


def test_a_live_snakemake_is_found_by_its_directory_relative_or_not(tmp_path):
    """`leaner run` must see a live Snakemake in the folder: Snakemake moves into its -d, so a
    relative -d is resolved from where it started, not from its cwd now."""
    import subprocess
    import sys

    from leaner.running.launch import live_snakemakes

    fake = tmp_path / "bin" / "snakemake"  # a process that looks like one: `python .../snakemake -d w`
    fake.parent.mkdir()
    fake.write_text("import os, sys, time\nos.chdir(sys.argv[2])\nprint('ready', flush=True)\ntime.sleep(60)\n")
    (tmp_path / "w").mkdir()
    for directory in ("w", str(tmp_path / "w")):
        proc = subprocess.Popen([sys.executable, str(fake), "-d", directory], cwd=tmp_path, stdout=subprocess.PIPE,
                                text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            assert [pid for pid, _ in live_snakemakes(tmp_path / "w")] == [proc.pid], directory
            assert live_snakemakes(tmp_path) == []
        finally:
            proc.kill()
            proc.wait()
