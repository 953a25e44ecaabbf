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
    "test_device_decoding_while_long_kernels_are_queued_matches_an_idle_decode",
    "test_a_training_batch_on_the_side_stream_is_the_plain_paths_and_the_host_does_not_wait"))


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
E2E_NEEDS = 300  # seconds of the section left to start the end-to-end test (318 s were not enough on an H200)


def section_tests(out: Path, timeout: float, skip: tuple[str, ...] = ()) -> dict:
    """The `gpu` tests but `skip` (those another section ran): the fast ones, then the end-to-end
    Snakemake run where E2E_NEEDS seconds of the section are left. It passes when every part that
    ran passed; a part left out for time is listed in "left_out" (what a longer budget adds), one
    that ran into the time limit fails."""
    started = time.monotonic()
    results, left_out = [], []
    # the end-to-end run's folders (its Snakemake log, each job's log) stay in --out, also when the
    # time limit stops it: where it stood is then in snakemake's log
    kept = ["--basetemp", str(out / "tests-end_to_end")]
    fast = ["-m", "gpu", *(a for t in (E2E_TEST, *skip) for a in ("--deselect", t)), "tests"]
    for name, args, needs in (("fast", fast, 30), ("end to end", [*kept, E2E_TEST], E2E_NEEDS)):
        left = timeout - (time.monotonic() - started)
        if left < needs:
            left_out.append({"part": name, "adds": f"needs ~{needs} s of the section, {left:.0f} s were left"
                             + (": the end-to-end Snakemake run of five task families on the GPU"
                                if name == "end to end" else "")})
            continue
        code, tail = run_logged([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
                                 "--durations=5", *args], out / f"tests-{name.replace(' ', '_')}.log", left)
        results.append((name, code, tail.splitlines()[-1] if tail else ""))
    ok = bool(results) and all(code == 0 for _, code, _ in results)
    summary = "; ".join([f"{name}: {line}" + (" (time limit)" if code is None else "") for name, code, line in results]
                        + [f"{p['part']}: not run ({p['adds']})" for p in left_out])
    return {"status": "pass" if ok else "fail", "summary": summary, "left_out": left_out}


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
