"""`make gpu-check` where it cannot run: one line each, nothing half-done (its sections run on a
GPU machine; benchmarks/results.md holds what they measured)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO

SCRIPT = str(REPO / "benchmarks" / "gpu_check.py")


def _check(*args: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path / "gc"), *args], capture_output=True,
                          text=True, timeout=120)


def test_an_unknown_section_is_one_line(tmp_path):
    proc = _check("--only", "p2,speed", tmp_path=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout.strip() == ("gpu-check: error: --only speed: unknown (allowed: decode, conditioning, vit, p2, "
                                   "precision, ddp, tests, bench)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA runs the check itself")
def test_without_cuda_it_says_so_in_one_line(tmp_path):
    proc = _check(tmp_path=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout.strip().splitlines() == [
        "gpu-check: error: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine "
        "(or rehearse the command on the CPU: --cpu)"]
    assert not (tmp_path / "gc" / "check.json").exists()


def _module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pass_rules_can_fail():
    """P2 fails when a shape ran out of memory (every one, or just one) or a ratio is missing or
    quadratic; precision fails on a non-finite or a bf16 loss above 1.5 x fp32's, not only on flags."""
    gc = _module()
    fit = [{"shape": s, "form": "fused", "kernel": "EFFICIENT_ATTENTION", "peak_gib": 2.0} for s in "abc"]
    linear = {"H8": 4.0, "H64": 4.1}
    assert gc.p2_verdict(fit, linear) == "pass"
    assert gc.p2_verdict([{**r, "peak_gib": "over 80"} for r in fit], {}) == "fail"  # all out of memory
    assert gc.p2_verdict(fit[:2] + [{**fit[2], "peak_gib": "over 80"}], linear) == "fail"
    assert gc.p2_verdict(fit, {"H8": 4.0}) == "fail" and gc.p2_verdict(fit, {"H8": 4.0, "H64": 16.0}) == "fail"
    assert gc.p2_verdict([{**fit[0], "kernel": "MATH"}], linear) == "fail"

    def row(fp32, bf16):
        return {"fp32": {"recorded": ["fp32", False], "final_eval_mse": fp32},
                "bf16": {"recorded": ["bf16", True], "final_eval_mse": bf16}}

    assert gc.precision_verdict([row(0.10, 0.14)]) == "pass"
    assert gc.precision_verdict([row(0.10, 0.16)]) == "fail"
    assert gc.precision_verdict([row(0.10, float("nan"))]) == "fail"
    assert gc.precision_verdict([{**row(0.1, 0.1), "bf16": {"recorded": ["fp32", False], "final_eval_mse": 0.1}}]) \
        == "fail"
    assert gc.precision_verdict([]) == "fail"


def test_the_decode_section_names_tests_that_exist():
    gc = _module()
    names = {line.split("(")[0][4:] for line in (REPO / "tests" / "test_gpu.py").read_text().splitlines()
             if line.startswith("def test_")}
    assert gc.DECODE_TESTS and all(t.split("::")[1] in names for t in gc.DECODE_TESTS)


def test_outputs_go_to_OUT_and_check_json_is_written_after_every_section(tmp_path, monkeypatch):
    """With $OUT set the check writes under $OUT/gpu-check; check.json holds every finished section
    before the next one starts, and a failing section (here the second) does not lose the others."""
    gc = _module()
    assert gc.out_folder(None, {"OUT": "/x"}) == Path("/x/gpu-check")
    assert gc.out_folder("/y", {"OUT": "/x"}) == Path("/y") and gc.out_folder(None, {}).name == "gpu-check"
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "a stand-in")
    seen = []

    def fake_run(cmd, log, timeout, env=None):
        check = json.loads((tmp_path / "gpu-check" / "check.json").read_text())
        seen.append(sorted(check["sections"]))
        name, result = cmd[-2], Path(cmd[-1])
        if name == "p2":
            return 1, "Traceback ...\nRuntimeError: a section that broke"
        result.write_text(json.dumps({"status": "pass", "summary": f"{name} ran"}))
        return 0, ""

    monkeypatch.setattr(gc, "run_logged", fake_run)
    code = gc.main(["--only", "conditioning,p2,precision"])
    assert code == 1
    assert seen == [[], ["conditioning"], ["conditioning", "p2"]]
    final = json.loads((tmp_path / "gpu-check" / "check.json").read_text())["sections"]
    assert [final[s]["status"] for s in ("conditioning", "p2", "precision")] == ["pass", "fail", "pass"]
    assert final["p2"]["summary"] == "RuntimeError: a section that broke"


def test_the_command_rehearses_on_the_cpu_with_its_stand_ins(tmp_path):
    """`--cpu` runs the sections as a GPU machine would (each in its process, check.json after each),
    with stand-ins of CPU size: conditioning at figN's largest shape, one input a chunk within the
    stand-in's memory, every kappa a number. (The whole command's CPU time is in results.md.)"""
    proc = _check("--cpu", "--only", "conditioning", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    check = json.loads((tmp_path / "gc" / "check.json").read_text())
    assert check["machine"].startswith("gpu-check --cpu: a rehearsal on")
    cond = check["sections"]["conditioning"]
    assert cond["status"] == "pass" and cond["chunk"] == 1 and 0 < cond["peak_gib"] < 12, cond
