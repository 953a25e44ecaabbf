"""Fault injection: real kills at chosen moments, damaged files, and what the pipeline does.

Every kill here is SIGKILL of Snakemake and everything it started (a node dying), at a moment
made deterministic by a slow filesystem the tests build (tests/faults), which holds one file's write between its
complete temporary copy and the rename. The re-run is the documented one (`--unlock`, then `--rerun-incomplete`),
and on the CPU the result must be bit-identical to an uninterrupted run of the same seed: the
checkpoint holds weights, optimiser moments, step, history and every RNG state, and the batch
order is a function of (seed, epoch).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from leaner.training.resume import PREVIOUS_FILE, RESUME_DIR, RESUME_FILE

from conftest import BIN, REPO, TINY, fault_env, saved_checkpoint, small_spec

pytestmark = pytest.mark.slow

VARIANT = "results/tiny/L2-H1-D16-hd16-mlp32-s0"
TARGET = f"{VARIANT}/metrics.json"


def _snakemake_cmd(workdir: Path) -> list[str]:
    return [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(workdir), TARGET, "--cores", "1",
            "--rerun-incomplete", "--configfile", str(TINY)]


def _env(held: str | None = None, seconds: float = 0.0, **extra) -> dict:
    """The tests' environment; with `held`, every write of that file held `seconds` before its rename
    (tests/faults: a slow filesystem)."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **extra}
    return fault_env(env, slow_rename=[held, seconds]) if held else env


def _wait_for(predicate, timeout_s: float = 120.0) -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        if time.time() > deadline:
            raise AssertionError("the moment to inject the fault never came")
        time.sleep(0.02)


def _kill_everything(proc: subprocess.Popen, workdir: Path) -> None:
    """SIGKILL Snakemake's process group, then any process still working in this workdir."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(workdir)):
                os.kill(int(pid), signal.SIGKILL)
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    time.sleep(0.5)


def _outputs(workdir: Path) -> tuple[dict, dict, pd.DataFrame]:
    out = workdir / VARIANT
    metrics = json.loads((out / "metrics.json").read_text())
    kept = {k: metrics[k] for k in ("status", "final", "best", "steps", "params", "seed", "spec")}
    history = pd.read_csv(out / "history.csv").drop(columns="elapsed_s")
    return kept, load_file(str(out / "model.safetensors")), history


def _rerun_ends_identical(work: Path, reference, resumed_from: int) -> None:
    """`leaner run` again, as a user would: it resumes at `resumed_from` and ends bit-identical to
    the uninterrupted run."""
    rerun = subprocess.run([str(BIN / "leaner"), "run", *_snakemake_cmd(work)[1:]], cwd=work, env=_env(),
                           capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    log = (work / "logs" / "train" / "tiny" / "L2-H1-D16-hd16-mlp32-s0.log").read_text()
    assert f"resumed from step {resumed_from}" in log, log[-2000:]
    _ends_identical(work, reference)


def _ends_identical(work: Path, reference) -> None:
    """The run's outputs are the uninterrupted run's, bit for bit."""
    metrics, weights, history = _outputs(work)
    ref_metrics, ref_weights, ref_history = reference
    assert metrics == ref_metrics
    assert weights.keys() == ref_weights.keys() and all((weights[k] == ref_weights[k]).all() for k in weights)
    pd.testing.assert_frame_equal(history, ref_history)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    work = tmp_path_factory.mktemp("uninterrupted")
    subprocess.run(_snakemake_cmd(work), cwd=work, env=_env(), check=True, capture_output=True)
    return _outputs(work)


def _resume_dir(work: Path) -> Path:
    return work / VARIANT / RESUME_DIR


# name -> (file to hold, moment to kill, what the re-run's log must say)
KILL_POINTS = {
    "before the first checkpoint": ("init.safetensors",
                                    lambda w: any((w / VARIANT).glob(".init.safetensors.*.tmp")), None),
    "between checkpoints": (None, lambda w: (_resume_dir(w) / RESUME_FILE).exists(), "resumed from step"),
    # the second write: step 20's checkpoint is now state.prev.pt, step 40's is held before its rename
    "during a checkpoint write": ("state.pt", lambda w: (_resume_dir(w) / PREVIOUS_FILE).exists(),
                                  "resumed from step 20"),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_killed_snakemake_run_resumes_and_ends_identical(tmp_path, reference, point):
    held, moment, expect = KILL_POINTS[point]
    env = _env(held, 4)
    proc = subprocess.Popen(_snakemake_cmd(tmp_path), cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: moment(tmp_path))
    _kill_everything(proc, tmp_path)
    assert not (tmp_path / TARGET).exists(), "the kill came too late"
    if point == "during a checkpoint write":  # the newest checkpoint was never renamed into place
        assert not (_resume_dir(tmp_path) / RESUME_FILE).exists()
        assert any(_resume_dir(tmp_path).glob(".state.pt.*.tmp"))

    # the documented recovery: unlock (a killed Snakemake leaves its lock), then re-run
    subprocess.run(_snakemake_cmd(tmp_path) + ["--unlock"], cwd=tmp_path, env=_env(), check=True, capture_output=True)
    rerun = subprocess.run(_snakemake_cmd(tmp_path), cwd=tmp_path, env=_env(), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    log = (tmp_path / "logs" / "train" / "tiny" / "L2-H1-D16-hd16-mlp32-s0.log").read_text()
    if expect:
        assert expect in log, log[-2000:]
    else:
        assert "resumed" not in log
    metrics, weights, history = _outputs(tmp_path)
    ref_metrics, ref_weights, ref_history = reference
    assert metrics == ref_metrics
    assert weights.keys() == ref_weights.keys() and all((weights[k] == ref_weights[k]).all() for k in weights)
    pd.testing.assert_frame_equal(history, ref_history)
    assert not _resume_dir(tmp_path).exists()  # cleaned up once the outputs are final
    assert not list((tmp_path / VARIANT).glob(".*.tmp"))


def _cli_train(spec, manifest, out, **popen):
    cmd = [str(BIN / "leaner"), "train", "--spec", json.dumps(spec), "--data", str(manifest), "--out", str(out),
           "--threads", "1", "--no-progress"]
    if popen:
        return subprocess.Popen(cmd, **popen)
    return subprocess.run(cmd, capture_output=True, text=True, check=True)


def test_a_truncated_checkpoint_falls_back_to_the_previous_good_one(tmp_path, digits_manifest):
    spec = small_spec()
    spec["recipe"].update(epochs=6, checkpoint_every=10)
    _cli_train(spec, digits_manifest, tmp_path / "ref")
    out = tmp_path / "run"
    proc = _cli_train(spec, digits_manifest, out, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last, previous = out / RESUME_DIR / RESUME_FILE, out / RESUME_DIR / PREVIOUS_FILE
    _wait_for(lambda: previous.exists() and last.exists())  # two checkpoints in place
    proc.kill()
    proc.wait()
    assert last.exists() and previous.exists() and not (out / "metrics.json").exists()
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # a torn write

    rerun = _cli_train(spec, digits_manifest, out)
    assert f"resume checkpoint {last} is unreadable" in rerun.stderr
    assert "resumed from step" in rerun.stderr
    ref, got = load_file(str(tmp_path / "ref" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert all((ref[k] == got[k]).all() for k in ref)


def test_a_damaged_weights_file_is_refused_downstream(tmp_path, digits_manifest):
    """metrics.json records each safetensors file's sha256; the conditioning stage checks it."""
    spec = small_spec()
    spec["recipe"]["max_steps"] = 5
    _cli_train(spec, digits_manifest, tmp_path)
    model = tmp_path / "model.safetensors"
    model.write_bytes(model.read_bytes()[:-16])
    proc = subprocess.run([str(BIN / "leaner"), "conditioning", "--metrics", str(tmp_path / "metrics.json"),
                           "--init", str(tmp_path / "init.safetensors"), "--final", str(model),
                           "--data", str(digits_manifest), "--out", str(tmp_path / "conditioning.csv")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{model}: contents do not match the sha256 in {tmp_path / 'metrics.json'}" in proc.stderr
    assert not (tmp_path / "conditioning.csv").exists()


def test_divergence_is_a_result_the_sweep_completes_and_the_figures_mark_it(tmp_path, monkeypatch):
    """An absurd learning rate for one variant: it stops early with status diverged, and the
    sweep, its tables and its figures complete around it."""
    import yaml

    from leaner.analysis import figures

    from conftest import snakemake

    config = yaml.safe_load(TINY.read_text())
    del config["studies"]["tiny_nearest"]
    study = config["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [1, 2], "mlp_ratio": [2],
                     "seeds": [0, 1]}
    study["overrides"] = [{"where": {"heads": 2, "seed": 1}, "recipe": {"lr": 1.0e12, "warmup_frac": 0.0}}]
    path = tmp_path / "diverging.yaml"
    path.write_text(yaml.safe_dump(config))
    snakemake(tmp_path, "--cores", "2", configfile=path)

    diverged = json.loads((tmp_path / "results/tiny/L1-H2-D16-hd8-mlp32-s1/metrics.json").read_text())
    assert diverged["status"] == "diverged" and diverged["steps"] < diverged["total_steps"]
    summary = pd.read_csv(tmp_path / "results/tiny/summary.csv")
    assert sorted(summary["status"]) == ["diverged", "ok", "ok", "ok"]
    by_config = pd.read_csv(tmp_path / "results/tables/tiny-by_config.csv")
    assert by_config.set_index("heads")["diverged"].to_dict() == {1: 0, 2: 1}
    for name in ("accuracy_vs_heads", "kappa_vs_heads", "training_curves"):
        assert (tmp_path / "results" / "figures" / f"tiny-{name}.png").stat().st_size > 10_000
    # `leaner status` tells the diverged run from the finished ones
    from conftest import BIN, run

    status = run([str(BIN / "leaner"), "status", str(path)], cwd=tmp_path).stdout
    assert status.splitlines()[0] == "4 variants: 3 done, 1 diverged", status
    line = next(ln for ln in status.splitlines() if "L1-H2-D16-hd8-mlp32-s1" in ln)
    assert line.split()[2] == "diverged" and "loss not finite at step" in line

    # the figure marks the diverged point: a red x with its own legend entry
    shown = []
    monkeypatch.setattr(figures, "save", lambda fig, prefix: shown.append(fig) or [])
    figures.metric_vs_heads(summary, tmp_path / "x", "tiny")
    labels = [t.get_text() for ax in shown[0].axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert "diverged run(s)" in labels


def test_sigterm_mid_epoch_saves_the_step_and_leaner_run_ends_identical(tmp_path, reference):
    """A scheduler's SIGTERM to the training process while step 20's checkpoint is being written
    (held 2 s, so the moment is mid-epoch and certain): the run finishes the step in flight, saves
    at step 21 and exits with status 75 (stopped, resumable); `leaner run` resumes there and ends
    bit-identical to the uninterrupted run: no step of work was lost."""
    from leaner.training.stopping import STOPPED_EXIT
    from leaner.training.tracking import read_progress

    proc = subprocess.Popen(_snakemake_cmd(tmp_path), cwd=tmp_path, env=_env("state.pt", 2),
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: any(_resume_dir(tmp_path).glob(".state.pt.*.tmp")))
    trainer = read_progress(tmp_path / VARIANT)["pid"]
    signalled = time.monotonic()
    os.kill(trainer, signal.SIGTERM)
    _wait_for(lambda: _gone(trainer), timeout_s=30)
    stopped_in = time.monotonic() - signalled
    assert proc.wait(timeout=60) != 0  # the job stopped unfinished: Snakemake reports it
    log = (tmp_path / "logs" / "train" / "tiny" / "L2-H1-D16-hd16-mlp32-s0.log").read_text()
    assert "stopped by SIGTERM (it came after step 20): resume state saved at step 21" in log, log[-2000:]
    assert f"exit status {STOPPED_EXIT}" in log
    assert stopped_in < 2 * 2 + 10  # two held writes of 2 s, then the exit
    state = torch.load(_resume_dir(tmp_path) / RESUME_FILE, weights_only=True)
    assert state["step"] == 21
    assert read_progress(tmp_path / VARIANT)["state"] == "stopped"

    _rerun_ends_identical(tmp_path, reference, 21)
    assert json.loads((tmp_path / TARGET).read_text())["resumed_at"] == [21]


def _trainer_pid(work: Path) -> int:
    from leaner.training.tracking import read_progress

    return read_progress(work / VARIANT)["pid"]


def _gone(pid: int) -> bool:
    """The process has exited: a zombie, or reaped (its /proc entry gone, or going while it is read:
    ProcessLookupError)."""
    try:
        return open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.parametrize("warm", ["warm", "cold"])
def test_ctrl_c_saves_the_running_job_before_snakemake_exits(tmp_path, reference, warm):
    """Ctrl-C at a workstation: SIGINT to the whole foreground process group (Snakemake, the job's
    process, with or without the warm process). Step 20's checkpoint write is held 3 s and the save
    the signal asks for is held 3 s more, so the save takes longer than Snakemake's own exit would:
    Snakemake waits for it, the job saves the step after the signal and stops (75), and the re-run
    resumes there and ends bit-identical to an uninterrupted run."""
    from leaner.training.stopping import STOPPED_EXIT

    env = _env("state.pt", 3, **({} if warm == "warm" else {"LEANER_WARM": "off"}))
    proc = subprocess.Popen(_snakemake_cmd(tmp_path), cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(lambda: any(_resume_dir(tmp_path).glob(".state.pt.*.tmp")))
    trainer = _trainer_pid(tmp_path)
    signalled = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    out, _ = proc.communicate(timeout=120)
    exited = time.monotonic() - signalled
    assert proc.returncode != 0, out[-3000:]
    assert _gone(trainer), "Snakemake exited before the job it was running"
    assert exited >= 2 * 3 - 1, f"Snakemake exited {exited:.1f} s after Ctrl-C, before the held saves could end"
    log = (tmp_path / "logs" / "train" / "tiny" / "L2-H1-D16-hd16-mlp32-s0.log").read_text()
    assert "stopped by SIGINT (it came after step 20): resume state saved at step 21" in log, log[-2000:]
    assert f"exit status {STOPPED_EXIT}" in log
    assert torch.load(_resume_dir(tmp_path) / RESUME_FILE, weights_only=True)["step"] == 21

    _rerun_ends_identical(tmp_path, reference, 21)


def test_a_second_ctrl_c_aborts_the_save_and_the_re_run_resumes_from_the_last_one(tmp_path, reference):
    """Ctrl-C twice: the first asks for the save, the second (while that save is held) aborts it,
    with its temporary file removed. The re-run resumes from the last complete checkpoint (step 20)
    and still ends bit-identical. (A temporary file left by a kill during a save is removed by the
    re-run: test_killed_snakemake_run_resumes_and_ends_identical.)"""
    env = _env("state.pt", 3, LEANER_WARM="off")
    proc = subprocess.Popen(_snakemake_cmd(tmp_path), cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def held() -> set[str]:
        return {p.name for p in _resume_dir(tmp_path).glob(".state.pt.*.tmp")}

    _wait_for(held)
    first = held()  # step 20's write, held
    os.killpg(proc.pid, signal.SIGINT)
    # step 21's write is held: a temporary copy of another name (not state.pt's existence, which
    # lasts only from step 20's rename to step 21's rotation, milliseconds a loaded machine can miss)
    _wait_for(lambda: held() - first)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    log = (tmp_path / "logs" / "train" / "tiny" / "L2-H1-D16-hd16-mlp32-s0.log").read_text()
    assert "aborted by a second SIGINT" in log, log[-2000:]
    # the newest state is step 20's (state.prev.pt where the abort came after the rotation)
    assert torch.load(saved_checkpoint(_resume_dir(tmp_path) / RESUME_FILE), weights_only=True)["step"] == 20
    assert not any(_resume_dir(tmp_path).glob(".state.pt.*.tmp"))

    _rerun_ends_identical(tmp_path, reference, 20)
    assert not _resume_dir(tmp_path).exists()


@pytest.mark.parametrize("how", ["SIGTSTP", "SIGSTOP"])
def test_a_stopped_run_stops_its_warm_training_and_a_continued_one_ends_identical(tmp_path, reference, how):
    """Ctrl-Z at a workstation (SIGTSTP to the foreground process group), or SIGSTOP to it (`kill
    -STOP`, which no process can catch): the training, which runs in the warm process and so
    outside that group, stops too, and stays stopped (step 20's checkpoint write, held 3 s, is
    still not renamed 4 s later); SIGCONT continues everything and the run ends with the outputs
    of an uninterrupted one."""
    import psutil

    env = _env("state.pt", 3)
    proc = subprocess.Popen(_snakemake_cmd(tmp_path), cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(lambda: any(_resume_dir(tmp_path).glob(".state.pt.*.tmp")))
    trainer = psutil.Process(_trainer_pid(tmp_path))
    assert os.getpgid(trainer.pid) != proc.pid  # the warm child: a Ctrl-Z does not reach it by itself
    os.killpg(proc.pid, getattr(signal, how))
    _wait_for(lambda: trainer.status() == psutil.STATUS_STOPPED, 10)
    time.sleep(4)
    assert trainer.status() == psutil.STATUS_STOPPED
    assert any(_resume_dir(tmp_path).glob(".state.pt.*.tmp"))
    os.killpg(proc.pid, signal.SIGCONT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    _ends_identical(tmp_path, reference)
