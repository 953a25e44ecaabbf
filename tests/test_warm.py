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

from leaner.running.handoff import (
    BENCHMARK_COLUMNS,
    ENV,
    THREAD_COUNTS,
    WARM_LINE,
    benchmark_of,
    cold_reason,
    environment_differences,
    numerics_of,
)

from conftest import BIN, small_spec, snakemake

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _quit_at_its_default():
    """SIGQUIT at its default action for this module's processes, as at a terminal: a shell without
    job control starts a background command (`cmd &`) with SIGQUIT ignored, and every process under
    it, the warm process and its children too, inherits that."""
    before = signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGQUIT, before)


@pytest.fixture(scope="module")
def warm_socket(tmp_path_factory):
    """A warm process (pinned numerics) for this module's jobs; stopped, and checked stopped, after."""
    folder = tmp_path_factory.mktemp("warm")
    path = str(folder / "w.sock")
    log = open(folder / "warm.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "leaner.warm", "--socket", path, "--numerics", "pinned"],
                            stdout=log, stderr=log, start_new_session=True, env=job_env())
    deadline = time.time() + 30
    while not os.path.exists(path):
        assert proc.poll() is None and time.time() < deadline, (folder / "warm.log").read_text()
        time.sleep(0.02)
    yield path
    proc.terminate()
    assert proc.wait(timeout=60) == 0
    assert not os.path.exists(path)
    assert "leaner warm: stopped" in (folder / "warm.log").read_text()


def job_env() -> dict:
    """The environment the warm process starts in and its jobs bring, as Snakemake's own is for
    both: this one's, on the CPU, without pytest's per-test variables."""
    per_test = (ENV, "PYTEST_CURRENT_TEST", "COLUMNS", "LINES")
    return {**{k: v for k, v in os.environ.items() if k not in per_test}, "LEANER_DEVICE": "cpu"}


def leaner(args: list[str], warm: str | None, log: Path, extra_env: dict | None = None, **popen) -> subprocess.Popen:
    env = {**job_env(), **(extra_env or {})}
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
    """Another numerics mode than the warm process's, or another value of any variable (a library
    may read it when it loads), is refused and runs cold with one line; a socket nobody serves runs cold with one
    line; a Slurm job, a torchrun rank and the light commands never ask."""
    log = tmp_path / "native.log"
    assert leaner(["theory", "--help", "--numerics", "native"], warm_socket, log).wait(timeout=60) == 0
    assert "refused this job (numerics 'native' (warm: 'pinned')); running cold" in log.read_text()
    assert "usage: leaner theory" in log.read_text()
    log = tmp_path / "mkl.log"  # MKL would keep the warm process's instruction set: cold
    assert leaner(["theory", "--help"], warm_socket, log, {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}).wait(timeout=60) == 0
    assert ("refused this job (the environment differs from the warm process's in MKL_ENABLE_INSTRUCTIONS (a "
            "library may read it when it loads)); running cold") in log.read_text()
    assert "usage: leaner theory" in log.read_text()
    log = tmp_path / "hf.log"  # huggingface_hub read HF_HOME when the warm process imported it: cold
    assert leaner(["theory", "--help"], warm_socket, log, {"HF_HOME": str(tmp_path)}).wait(timeout=60) == 0
    assert "the environment differs from the warm process's in HF_HOME" in log.read_text()
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
    """The job-costs table takes a warm job's CPU time and peak memory from its child's benchmark
    beside Snakemake's, else (runs made before it was written) from its log's last line."""
    from leaner.analysis.job_costs import job_costs

    bench = tmp_path / "logs" / "benchmarks" / "train" / "s"
    bench.mkdir(parents=True)
    logs = tmp_path / "logs" / "train" / "s"
    logs.mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    for name in ("a", "b"):
        (bench / f"{name}.tsv").write_text(header + "4.0\t0:00:04\t30.0\t1\t1\t1\t0\t0\t1.0\t0.05\n")
    (logs / "a.log").write_text(f"training\n{WARM_LINE} (pid 12): cpu_s 7.50, peak_mb 612.5\n")
    child = header  # the warm child's benchmark beside Snakemake's, in its format
    (bench / "c.tsv").write_text(header + "4.0\t0:00:04\t30.0\t1\t1\t1\t0\t0\t1.0\t0.05\n")
    (bench / "c.warm.tsv").write_text(child + "3.9\t0:00:03\t700.0\tNA\tNA\tNA\tNA\tNA\t230.8\t9.0\n")
    (logs / "c.log").write_text(f"training\n{WARM_LINE} (pid 13): cpu_s 1.00, peak_mb 1.0\n")  # the file wins
    (logs / "b.log").write_text("training in its own process\n")
    table = job_costs([str(bench / "a.tsv"), str(bench / "b.tsv")]).set_index("rule")
    assert table.loc["train", "warm_jobs"] == 1 and table.loc["train", "jobs"] == 2
    assert table.loc["train", "cpu_time_s_total"] == pytest.approx(7.55)
    assert table.loc["train", "max_rss_mb"] == pytest.approx(612.5)
    assert table.loc["train", "mean_load_pct"] == pytest.approx((100 * 7.5 / 4 + 1.0) / 2)
    table = job_costs([str(bench / f"{name}.tsv") for name in "abc"]).set_index("rule")
    assert table.loc["train", "warm_jobs"] == 2 and table.loc["train", "cpu_time_s_total"] == pytest.approx(16.55)
    assert table.loc["train", "max_rss_mb"] == pytest.approx(700.0)


def test_no_preloaded_module_starts_a_thread_a_forked_child_would_lack():
    """After the warm process's imports (pinned first, as it does), only the main Python thread
    runs, and no native thread but those whose libraries start them again in a forked child
    (warm.py: jemalloc's background thread; OpenBLAS's pool, held to none here by its thread count)."""
    code = ("import os, threading, json\n"
            "from leaner.compute.numerics import pin\n"
            "pin('pinned')\n"
            "from leaner.warm import preload\n"
            "preload()\n"
            "names = [open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task')]\n"
            "print(json.dumps({'python': [t.name for t in threading.enumerate()], 'native': sorted(names)}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    threads = json.loads(proc.stdout.strip().splitlines()[-1])
    assert threads["python"] == ["MainThread"]
    native = list(threads["native"])
    native.remove("python")  # the main thread
    assert set(native) <= {"jemalloc_bg_thd"}, native


def test_the_environment_a_library_reads_at_import_is_compared_and_the_per_job_one_is_not():
    """What the preloaded libraries read when they load counts (huggingface_hub's HF_HOME, MKL's,
    the locale's), but for what Snakemake sets per job and the child reads again; what a shell, a
    venv's `activate` or conda's sets (PS1, PATH, VIRTUAL_ENV, CONDA_*) is the job's own."""
    warm = {"HF_HOME": "/a", "OMP_NUM_THREADS": "4", "TMPDIR": "/tmp", "PATH": "/bin", "SHLVL": "1",
            "PS1": "(.venv) $ ", "VIRTUAL_ENV": "/r/.venv", "LC_ALL": "C.UTF-8"}
    job = {"HF_HOME": "/b", "OMP_NUM_THREADS": "1", "TMPDIR": "/tmp/job7", "PATH": "/r/.venv/bin:/bin", "SHLVL": "2",
           "HF_ENDPOINT": "https://mirror", "_": "/usr/bin/leaner", ENV: "/tmp/w.sock", "CONDA_PREFIX": "/c",
           "CONDA_SHLVL": "1", "LC_ALL": "C"}
    assert environment_differences(job, warm) == ["HF_ENDPOINT", "HF_HOME", "LC_ALL"]
    assert environment_differences({**warm, "OMP_NUM_THREADS": "2", "TMPDIR": "/x", "PS1": "$ "}, warm) == []
    for name in ("MKL_ENABLE_INSTRUCTIONS", "PYTHONHASHSEED", "TORCH_HOME", "CUBLAS_WORKSPACE_CONFIG",
                 "MALLOC_ARENA_MAX", "LANG", "LEANER_DEVICE", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"):
        assert environment_differences({name: "x"}, {}) == [name]
    for name in (*THREAD_COUNTS, "GOTO_NUM_THREADS", "PS1", "PS2", "PROMPT_COMMAND", "VIRTUAL_ENV", "CONDA_DEFAULT_ENV",
                 "TERM", "SNAKEMAKE_PROFILE", ENV):
        assert environment_differences({name: "x"}, {}) == [], name


def test_a_warm_job_writes_its_childs_benchmark_beside_snakemakes(tmp_path, warm_socket):
    """A job whose log is a rule's (logs/<rule>/...log) leaves logs/benchmarks/<rule>/....warm.tsv, in
    Snakemake's benchmark format, with the child's wall and CPU time and peak memory; a job run
    cold leaves none."""
    log = tmp_path / "logs" / "theory" / "theory.log"
    log.parent.mkdir(parents=True)
    assert leaner(["theory", "--help"], warm_socket, log, {"TMPDIR": str(tmp_path)}).wait(timeout=60) == 0
    assert WARM_LINE in log.read_text(), log.read_text()  # another TMPDIR is no reason to run cold
    child = tmp_path / "logs" / "benchmarks" / "theory" / "theory.warm.tsv"
    row = pd.read_csv(child, sep="\t")
    assert list(row.columns) == list(BENCHMARK_COLUMNS) and len(row) == 1
    assert row["cpu_time"][0] > 0 and row["max_rss"][0] > 10 and row["s"][0] > 0
    assert benchmark_of("logs/train/s/v.log") == Path("logs/benchmarks/train/s/v.tsv")
    assert benchmark_of("/x/run.log") is None
    cold = tmp_path / "logs" / "train" / "cold.log"
    cold.parent.mkdir(parents=True)
    assert leaner(["train", "--help"], None, cold).wait(timeout=60) == 0
    assert not (tmp_path / "logs" / "benchmarks" / "train").exists()


def test_sigquit_to_the_job_kills_its_warm_child_with_it(tmp_path, digits_manifest, warm_socket):
    proc, _, beat = long_run(tmp_path, digits_manifest, warm_socket)
    proc.send_signal(signal.SIGQUIT)
    assert proc.wait(timeout=30) == -signal.SIGQUIT
    assert gone(beat["pid"])


CONDA_STYLE = """# what `conda activate` leaves in a shell: its variables, PATH and the prompt
export CONDA_PREFIX={prefix} CONDA_DEFAULT_ENV=leaner CONDA_SHLVL=1 CONDA_PROMPT_MODIFIER="(leaner) "
export CONDA_EXE=/opt/conda/bin/conda CONDA_PYTHON_EXE=/opt/conda/bin/python _CE_M= _CE_CONDA=
export PS1="(leaner) ${{PS1:-}}" PATH="{prefix}/bin:$PATH"
"""


def test_a_run_started_from_a_conda_style_environment_runs_its_jobs_warm(tmp_path):
    """Conda's activation exports PS1 and its CONDA_* variables, as a venv's does PS1 and
    VIRTUAL_ENV (test_workflow's tiny run starts from one): neither is what a preloaded library
    reads, so the training job of a run started there runs in the warm process, not cold."""
    script = tmp_path / "activate-conda"
    script.write_text(CONDA_STYLE.format(prefix=tmp_path / "env"))
    work = tmp_path / "work"
    work.mkdir()
    variant = "L1-H1-D16-hd16-mlp32-s0"
    snakemake(work, f"results/tiny/{variant}/metrics.json", "--cores", "1", sourced=script)
    log = (work / "logs" / "train" / "tiny" / f"{variant}.log").read_text()
    assert "refused" not in log and log.splitlines()[-1].startswith(WARM_LINE), log[-2000:]
