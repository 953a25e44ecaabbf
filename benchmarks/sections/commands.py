"""gpu-check's sections that run a command, its output in a log: the decode tests, the `gpu`-marked
tests, and the GPU benchmark rows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .common import REPO

DECODE_TESTS = tuple(f"tests/test_gpu.py::{name}" for name in (
    "test_the_device_recipe_on_the_gpu_matches_the_cpu_and_real_nvjpeg_survives_odd_files",
    "test_device_decoding_while_long_kernels_are_queued_matches_an_idle_decode"))


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


def section_tests(out: Path, timeout: float) -> dict:
    slow = "tests/test_gpu.py::test_every_task_family_trains_in_bf16_on_the_gpu"
    started = time.monotonic()
    results = []
    # the end-to-end run's folders (its Snakemake log, each job's log) stay in --out, also when the
    # time limit stops it: where it stood is then in snakemake's log
    kept = ["--basetemp", str(out / "tests-end_to_end")]
    for name, args in (("fast", ["-m", "gpu", "--deselect", slow, "tests"]), ("end to end", [*kept, slow])):
        left = timeout - (time.monotonic() - started)
        if left < 30:
            results.append((name, None, "not run: no time left in this section"))
            continue
        code, tail = run_logged([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
                                 "--durations=5", *args], out / f"tests-{name.replace(' ', '_')}.log", left)
        results.append((name, code, tail.splitlines()[-1] if tail else ""))
    ok = all(code == 0 for _, code, _ in results)
    summary = "; ".join(f"{name}: {line}" + (" (time limit)" if code is None else "") for name, code, line in results)
    return {"status": "pass" if ok else "fail", "summary": summary}


def section_decode(out: Path, timeout: float) -> dict:
    code, tail = run_logged([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *DECODE_TESTS],
                            out / "decode.log", timeout)
    last = tail.splitlines()[-1] if tail else ""
    return {"status": "pass" if code == 0 else "fail", "summary": last + (" (time limit)" if code is None else "")}


def section_bench(out: Path, timeout: float) -> dict:
    code, tail = run_logged([sys.executable, "benchmarks/run.py", "--quick", "--gpu-only", "--out",
                             str(out / "bench.md")], out / "bench.log", timeout)
    return {"status": "pass" if code == 0 else "fail",
            "summary": f"rows 5, 6b, 7 in {out / 'bench.md'}" if code == 0 else (tail or "time limit")}
