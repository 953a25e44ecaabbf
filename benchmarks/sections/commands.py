"""gpu-check's sections that run a command, its output in a log: the decode tests, the end-to-end
Snakemake run on the GPU, the other `gpu`-marked tests, and the GPU benchmark rows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .common import REPO

DECODE_TESTS = tuple(f"tests/test_gpu.py::{name}" for name in (
    "test_the_device_recipe_on_the_gpu_matches_the_cpu_and_real_nvjpeg_survives_odd_files",
    "test_device_decoding_while_long_kernels_are_queued_matches_an_idle_decode",
    "test_training_batches_read_ahead_are_the_plain_paths_and_the_host_does_not_wait"))


def run_logged(cmd: list[str], log: Path, timeout: float, env: dict | None = None) -> tuple[int | None, str]:
    """Run `cmd` with its output in `log`; (exit status or None on the time limit, its last lines)."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    lines = log.read_text(errors="replace").strip().splitlines()
    return code, "\n".join(lines[-3:])


E2E_TEST = "tests/test_gpu.py::test_every_task_family_trains_in_bf16_on_the_gpu"


def _pytest(out: Path, log: str, timeout: float, *args: str) -> dict:
    """A section that is a pytest run: it passes when pytest exits 0 within `timeout`."""
    code, tail = run_logged([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
                             "--durations=5", *args], out / log, timeout)
    last = tail.splitlines()[-1] if tail else ""
    return {"status": "pass" if code == 0 else "fail", "summary": last + (" (time limit)" if code is None else "")}


def section_tests(out: Path, timeout: float, skip: tuple[str, ...] = ()) -> dict:
    """The `gpu` tests but the end-to-end run (section e2e) and `skip` (those another section ran)."""
    return _pytest(out, "tests.log", timeout, "-m", "gpu",
                   *(a for t in (E2E_TEST, *skip) for a in ("--deselect", t)), "tests")


def section_e2e(out: Path, timeout: float) -> dict:
    """The end-to-end Snakemake run on the GPU. Its folders (Snakemake's log, each job's log) stay
    in the output folder, also when the time limit stops it: where it stood is then in its logs."""
    return _pytest(out, "e2e.log", timeout, "--basetemp", str(out / "e2e"), E2E_TEST)


def section_decode(out: Path, timeout: float) -> dict:
    return _pytest(out, "decode.log", timeout, *DECODE_TESTS)


def section_bench(out: Path, timeout: float) -> dict:
    code, tail = run_logged([sys.executable, "benchmarks/run.py", "--quick", "--gpu-only", "--out",
                             str(out / "bench.md")], out / "bench.log", timeout)
    return {"status": "pass" if code == 0 else "fail",
            "summary": f"rows 5, 6b, 7 in {out / 'bench.md'}" if code == 0 else (tail or "time limit")}
