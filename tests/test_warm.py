"""The warm start (leaner/warm.py, leaner/running/handoff.py): a job handed to the warm process computes
the same bits as a fresh process, ends as its client ends, and runs cold wherever it cannot be
served the same way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from leaner.running.handoff import ENV, THREAD_COUNTS, WARM_LINE, cold_reason, numerics_of

from conftest import BIN, small_spec


@pytest.fixture(scope="module")
def warm_socket(tmp_path_factory):
    """A warm process (pinned numerics) for this module's jobs; stopped, and checked stopped, after."""
    folder = tmp_path_factory.mktemp("warm")
    path = str(folder / "w.sock")
    log = open(folder / "warm.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "leaner.warm", "--socket", path, "--numerics", "pinned"],
                            stdout=log, stderr=log, start_new_session=True)
    deadline = time.time() + 30
    while not os.path.exists(path):
        assert proc.poll() is None and time.time() < deadline, (folder / "warm.log").read_text()
        time.sleep(0.02)
    yield path
    proc.terminate()
    assert proc.wait(timeout=60) == 0
    assert not os.path.exists(path)
    assert "leaner warm: stopped" in (folder / "warm.log").read_text()


def leaner(args: list[str], warm: str | None, log: Path, extra_env: dict | None = None, **popen) -> subprocess.Popen:
    env = {**{k: v for k, v in os.environ.items() if k != ENV}, **(extra_env or {})}
    if warm:
        env[ENV] = warm
    return subprocess.Popen([str(BIN / "leaner"), *args], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            **popen)


def train_and_condition(out: Path, manifest: Path, warm: str | None, threads: int) -> str:
    spec = small_spec(depth=2)
    spec["recipe"].update(epochs=2)
    log = out.parent / f"{out.name}.log"
    args = ["--threads", str(threads), "--numerics", "pinned"]
    counts = {name: str(threads) for name in THREAD_COUNTS}  # as Snakemake sets them for a job, not for its own
    assert leaner(["train", "--spec", json.dumps(spec), "--data", str(manifest), "--out", str(out), *args,
                   "--no-progress"], warm, log, counts).wait(timeout=240) == 0, log.read_text()
    text = log.read_text()
    assert leaner(["conditioning", "--metrics", str(out / "metrics.json"), "--init", str(out / "init.safetensors"),
                   "--final", str(out / "model.safetensors"), "--data", str(manifest), "--out",
                   str(out / "conditioning.csv"), *args], warm, log, counts).wait(timeout=240) == 0, log.read_text()
    return text + log.read_text()


@pytest.mark.parametrize("threads", [1, 2])
def test_a_job_run_warm_computes_the_same_bits_as_a_fresh_process(tmp_path, digits_manifest, warm_socket, threads):
    cold_log = train_and_condition(tmp_path / "cold", digits_manifest, None, threads)
    warm_log = train_and_condition(tmp_path / "warm", digits_manifest, warm_socket, threads)
    assert WARM_LINE not in cold_log and warm_log.count(WARM_LINE) == 2, warm_log
    for name in ("init.safetensors", "model.safetensors"):
        cold, warm = (load_file(tmp_path / run / name) for run in ("cold", "warm"))
        assert cold.keys() == warm.keys() and all(torch.equal(cold[k], warm[k]) for k in cold), name
    cold, warm = (pd.read_csv(tmp_path / run / "history.csv").drop(columns="elapsed_s") for run in ("cold", "warm"))
    pd.testing.assert_frame_equal(cold, warm, check_exact=True)
    kappa = [(tmp_path / run / "conditioning.csv").read_bytes() for run in ("cold", "warm")]
    assert kappa[0] == kappa[1]
    cold, warm = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("cold", "warm"))
    assert warm["numerics"] == cold["numerics"] and warm["numerics"]["threads"] == threads
    same = ("params", "status", "final", "best", "diagnostics", "steps", "threads", "processes")
    assert {k: warm[k] for k in same} == {k: cold[k] for k in same}


def long_run(tmp_path: Path, manifest: Path, warm: str) -> tuple[subprocess.Popen, Path, dict]:
    spec = small_spec()
    spec["recipe"].update(epochs=300, checkpoint_every=1000, checkpoint_minutes=None)
    out = tmp_path / "run"
    proc = leaner(["train", "--spec", json.dumps(spec), "--data", str(manifest), "--out", str(out), "--threads",
                   "1", "--no-progress"], warm, tmp_path / "run.log")
    deadline = time.time() + 60
    while not (out / "history.csv").exists():  # past its first epoch
        assert time.time() < deadline and proc.poll() is None, (tmp_path / "run.log").read_text()
        time.sleep(0.02)
    beat = json.loads((out / "progress.json").read_text())
    assert beat["pid"] != proc.pid  # the warm child trains, not the client
    return proc, out, beat


def gone(pid: int, within_s: float = 20.0) -> bool:
    deadline = time.time() + within_s
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_signal_to_the_job_reaches_its_warm_child_and_the_exit_status_comes_back(tmp_path, digits_manifest,
                                                                                   warm_socket):
    """SIGTERM (Snakemake's, or Slurm's forwarded stop) stops the warm run with its resume state
    saved: exit status 75, as a run in its own process."""
    proc, out, beat = long_run(tmp_path, digits_manifest, warm_socket)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 75, (tmp_path / "run.log").read_text()
    assert gone(beat["pid"])
    assert "stopped by SIGTERM" in (tmp_path / "run.log").read_text()
    assert json.loads((out / "progress.json").read_text())["state"] == "stopped"


def test_a_killed_job_takes_its_warm_child_with_it(tmp_path, digits_manifest, warm_socket):
    """kill -9 of the job (what Snakemake does to a job it gives up on) leaves no child training
    behind its back."""
    proc, _, beat = long_run(tmp_path, digits_manifest, warm_socket)
    proc.kill()
    proc.wait(timeout=10)
    assert gone(beat["pid"])


def test_a_child_killed_by_a_signal_kills_its_job_with_that_signal(tmp_path, digits_manifest, warm_socket):
    proc, _, beat = long_run(tmp_path, digits_manifest, warm_socket)
    os.kill(beat["pid"], signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def test_jobs_the_warm_process_cannot_serve_alike_run_cold(tmp_path, warm_socket):
    """Another numerics mode than the warm process's, or another setting that a library reads when
    it loads, is refused and runs cold with one line; a socket nobody serves runs cold with one
    line; a Slurm job, a torchrun rank and the light commands never ask."""
    log = tmp_path / "native.log"
    assert leaner(["theory", "--help", "--numerics", "native"], warm_socket, log).wait(timeout=60) == 0
    assert "refused this job (numerics 'native' (warm: 'pinned')); running cold" in log.read_text()
    assert "usage: leaner theory" in log.read_text()
    log = tmp_path / "mkl.log"  # MKL would keep the warm process's instruction set: cold
    assert leaner(["theory", "--help"], warm_socket, log, {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}).wait(timeout=60) == 0
    assert "refused this job (load_env" in log.read_text() and "usage: leaner theory" in log.read_text()
    log = tmp_path / "none.log"
    assert leaner(["train", "--help"], str(tmp_path / "nobody.sock"), log).wait(timeout=60) == 0
    assert "does not answer" in log.read_text() and "running cold" in log.read_text()
    served = {ENV: warm_socket}
    assert cold_reason(["train"], served) is None
    assert cold_reason(["train"], {}) == "no warm process"
    assert cold_reason(["train"], {ENV: "off"}) == "no warm process"
    assert "Slurm" in cold_reason(["train"], {**served, "SLURM_JOB_ID": "7"})
    assert cold_reason(["train"], {**served, "LOCAL_RANK": "0"}) == "a torchrun rank"
    assert cold_reason(["summary"], served).startswith("only train, conditioning, theory")
    assert numerics_of(["train", "--numerics", "native"]) == "native"
    assert numerics_of(["train", "--numerics=native"]) == "native"
    assert numerics_of(["train"]) == "pinned"


def test_a_warm_job_measures_its_child_for_the_job_costs_table(tmp_path):
    from leaner.analysis.job_costs import job_costs

    bench = tmp_path / "logs" / "benchmarks" / "train" / "s"
    bench.mkdir(parents=True)
    logs = tmp_path / "logs" / "train" / "s"
    logs.mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    for name in ("a", "b"):
        (bench / f"{name}.tsv").write_text(header + "4.0\t0:00:04\t30.0\t1\t1\t1\t0\t0\t1.0\t0.05\n")
    (logs / "a.log").write_text(f"training\n{WARM_LINE} (pid 12): cpu_s 7.50, peak_mb 612.5\n")
    (logs / "b.log").write_text("training in its own process\n")
    table = job_costs([str(bench / "a.tsv"), str(bench / "b.tsv")]).set_index("rule")
    assert table.loc["train", "warm_jobs"] == 1 and table.loc["train", "jobs"] == 2
    assert table.loc["train", "cpu_time_s_total"] == pytest.approx(7.55)
    assert table.loc["train", "max_rss_mb"] == pytest.approx(612.5)
    assert table.loc["train", "mean_load_pct"] == pytest.approx((100 * 7.5 / 4 + 1.0) / 2)
