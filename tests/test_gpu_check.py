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

pytestmark = pytest.mark.slow

SCRIPT = str(REPO / "benchmarks" / "gpu_check.py")


def _check(*args: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path / "gc"), *args], capture_output=True,
                          text=True, timeout=120)


def test_an_unknown_section_is_one_line(tmp_path):
    proc = _check("--only", "p2,speed", tmp_path=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout.strip() == ("gpu-check: error: --only speed: unknown (allowed: decode, stop, conditioning, "
                                   "p2train, e2e, vit, p2, p2kernel, vitdevice, ddp, tests, bench)")


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
    quadratic; p2train on a non-finite or a bf16 loss above 1.5 x fp32's, a graphed loss off the
    eager one, a graph not 2 x as fast, a run short of its steps, not only on flags."""
    gc = _module()
    fit = [{"shape": s, "form": "fused", "kernel": "EFFICIENT_ATTENTION", "peak_gib": 2.0} for s in "abc"]
    linear = {"H8": 4.0, "H64": 4.1}
    assert gc.p2_verdict(fit, linear) == "pass"
    assert gc.p2_verdict([{**r, "peak_gib": "over 80"} for r in fit], {}) == "fail"  # all out of memory
    assert gc.p2_verdict(fit[:2] + [{**fit[2], "peak_gib": "over 80"}], linear) == "fail"
    assert gc.p2_verdict(fit, {"H8": 4.0}) == "fail" and gc.p2_verdict(fit, {"H8": 4.0, "H64": 16.0}) == "fail"
    assert gc.p2_verdict([{**fit[0], "kernel": "MATH"}], linear) == "fail"

    def runs(graph=0.10, eager=0.10, bf16=0.10, graph_rate=1200.0, eager_rate=200.0, **change):
        run = {"status": "ok", "steps": 2000, "recorded": ["fp32", False], "device": "cuda:0"}
        out = {"graph fp32": {**run, "final_eval_mse": graph, "steps_per_s": graph_rate},
               "eager fp32": {**run, "final_eval_mse": eager, "steps_per_s": eager_rate},
               "graph bf16": {**run, "final_eval_mse": bf16, "steps_per_s": graph_rate, "recorded": ["bf16", True]}}
        for name, fields in change.items():
            out[name.replace("_", " ")].update(fields)
        return out

    verdict = gc.p2train_verdict
    assert verdict(runs(), 2000) == "pass" and verdict(runs(bf16=0.14), 2000) == "pass"
    assert verdict(runs(bf16=0.16), 2000) == "fail" and verdict(runs(bf16=float("nan")), 2000) == "fail"
    assert verdict(runs(graph=0.11), 2000) == "fail"  # the graph trains otherwise than the eager step
    assert verdict(runs(graph_rate=300.0), 2000) == "fail"  # no speed-up: `leaner cost` counts on 5.9
    assert verdict(runs(graph_rate=300.0), 2000, need_speedup=False) == "pass"  # --cpu: eager everywhere
    assert verdict(runs(graph_bf16={"recorded": ["fp32", False]}), 2000) == "fail"
    assert verdict(runs(graph_fp32={"status": "diverged"}), 2000) == "fail"
    assert verdict(runs(eager_fp32={"steps": 1500}), 2000) == "fail"
    assert verdict(runs(graph_fp32={"device": "cpu"}), 2000) == "fail"
    assert verdict({k: v for k, v in runs().items() if k != "eager fp32"}, 2000) == "fail"


def test_the_stop_rule_can_fail():
    """The stop section passes on exit 75 within 30 s with the state at the step the signal came
    after (or the next) and a second run resumed there to its end on the device, on nothing less."""
    gc = _module()
    stop = {"exit": 75, "signal_to_exit_s": 0.4, "came_after_step": 23, "saved_step": 24, "state_mb": 12.2}
    done = {"resumed_at": [24], "status": "ok", "steps": 460, "total_steps": 460, "device": "cuda:0"}
    assert gc.stop_verdict(stop, done) == (True, True)
    assert gc.stop_verdict({**stop, "saved_step": 23}, {**done, "resumed_at": [23]}) == (True, True)
    for change in ({"exit": 1}, {"exit": 0}, {"signal_to_exit_s": 31.0}, {"saved_step": 26}, {"saved_step": 22},
                   {"saved_step": None}, {"state_mb": 0.0}):
        assert gc.stop_verdict({**stop, **change}, done)[0] is False, change
    for change in ({"resumed_at": []}, {"resumed_at": [20]}, {"status": "diverged"}, {"steps": 300},
                   {"device": "cpu"}):
        assert gc.stop_verdict(stop, {**done, **change}) == (True, False), change
    assert gc.stop_verdict(stop, {}) == (True, False)  # the second run failed: no metrics.json


def test_the_proving_sections_come_first_and_their_limits_fit_the_default_budget():
    """Each section a sweep relies on, the end-to-end Snakemake run on the GPU among them, runs
    within 540 s even where every one takes its whole limit; those that only add coverage come
    after them, and --budget 1310 runs them all."""
    gc = _module()
    plan = sys.modules["sections.plan"]
    assert set(gc.PROVING) == {"decode", "stop", "conditioning", "p2train", "e2e", "vit", "p2"}
    assert gc.SECTIONS[:len(gc.PROVING)] == gc.PROVING and set(gc.SECTIONS[len(gc.PROVING):]) == {
        "p2kernel", "vitdevice", "ddp", "tests", "bench"}
    assert sum(gc.LIMITS[n] for n in gc.PROVING) + plan.SLACK <= plan.DEFAULT_BUDGET == 540
    assert all(0 < gc.NEEDS[n] <= gc.LIMITS[n] for n in gc.SECTIONS)
    assert plan.budget_to_run("p2", gc.SECTIONS) == 540
    assert 540 < plan.budget_to_run("ddp", gc.SECTIONS) < plan.budget_to_run("tests", gc.SECTIONS)
    assert plan.budget_to_run("bench", gc.SECTIONS) == 1310  # all of them, DDP included
    assert plan.budget_to_run("bench", [n for n in gc.SECTIONS if n != "ddp"]) == 1190  # one GPU
    # the command's help says the same limits, in the same order
    import re

    said = re.findall(r"^  (\w+) +\((\d+) s\)", gc.__doc__, re.M)
    assert said == [(n, str(gc.LIMITS[n])) for n in gc.SECTIONS]
    assert f"limits ({sum(gc.LIMITS[n] for n in gc.PROVING)} s)" in gc.__doc__


def _plan_run(gc, monkeypatch, tmp_path, budget, share=1.0, gpus=1, fail=(), only=None):
    """The driver over a clock of its own: each section takes `share` of its limit (and passes,
    but those in `fail`); (results, the limit each section was given, the exit status)."""
    now = [0.0]
    given = {}
    monkeypatch.setattr(gc, "monotonic", lambda: now[0])

    def fake_section(name, out, limit, selected):
        given[name] = limit
        now[0] += share * limit
        return {"status": "fail" if name in fail else "pass", "summary": f"{name} ran"}

    monkeypatch.setattr(gc, "run_section", fake_section)
    selected = [s for s in gc.SECTIONS if only is None or s in only]
    results, here = gc.run_all(selected, tmp_path, budget, "a stand-in", gpus)
    required = [s for s in selected if s in gc.PROVING] if only is None else selected
    return results, given, gc.exit_status(results, required), gc.summary_lines(results, here, budget, required)


def test_in_the_default_budget_every_proving_section_runs_and_what_is_left_out_is_named(tmp_path, monkeypatch):
    """Every section takes its whole limit: the proving ones all run with their full limits; the
    rest are reported (check.json and the summary) with what they add and the budget that runs
    them, and the check exits 0: what was left out was not required."""
    gc = _module()
    results, given, code, lines = _plan_run(gc, monkeypatch, tmp_path, 540)
    assert given == {n: gc.LIMITS[n] for n in gc.PROVING}
    assert {n: r["status"] for n, r in results.items()} == {
        **{n: "pass" for n in gc.PROVING}, "p2kernel": "not run", "vitdevice": "not run", "ddp": "skipped",
        "tests": "not run", "bench": "not run"}
    assert code == 0 and lines[0].startswith("gpu-check: passed")
    check = json.loads((tmp_path / "check.json").read_text())
    assert [(e["section"], e["budget"]) for e in check["longer_budget"]] == [
        ("p2kernel", 630), ("vitdevice", 800), ("tests", 1040), ("bench", 1190)]
    assert check["longer_budget"][2]["adds"].startswith("the other `gpu`-marked tests")
    assert "not in this budget (540 s); --budget 1190 runs them all:" in lines
    assert any(line.startswith("  bench (--budget 1190): the GPU benchmark rows") for line in lines)
    assert any(line.startswith("skipped here: ddp (1 GPU here; needs two)") for line in lines)
    # two GPUs: DDP is one more section left out, and 1310 s run them all
    results, _, code, lines = _plan_run(gc, monkeypatch, tmp_path, 540, gpus=2)
    assert results["ddp"]["status"] == "not run" and code == 0
    assert "not in this budget (540 s); --budget 1310 runs them all:" in lines
    # at --budget 1310 every section runs, even where each takes its whole limit
    results, given, code, _ = _plan_run(gc, monkeypatch, tmp_path, 1310, gpus=2)
    assert given == gc.LIMITS and all(r["status"] == "pass" for r in results.values()) and code == 0


def test_the_exit_status_fails_on_a_failed_section_or_a_required_one_not_run(tmp_path, monkeypatch):
    gc = _module()
    # every section takes half its limit: p2kernel, vitdevice, then the gpu tests run with what is left
    results, given, code, _ = _plan_run(gc, monkeypatch, tmp_path, 540, share=0.5)
    assert given["p2kernel"] == gc.LIMITS["p2kernel"] and given["vitdevice"] == gc.LIMITS["vitdevice"]
    before = (*gc.PROVING, "p2kernel", "vitdevice")
    assert given["tests"] == pytest.approx(540 - 0.5 * sum(gc.LIMITS[n] for n in before)) and code == 0
    assert results["bench"]["status"] == "not run"
    # an adding section that ran and failed fails the check; so does a proving one
    assert _plan_run(gc, monkeypatch, tmp_path, 540, share=0.5, fail=("tests",))[2] == 1
    _, _, code, lines = _plan_run(gc, monkeypatch, tmp_path, 540, fail=("stop",))
    assert code == 1 and lines[0] == "gpu-check: FAILED: failed: stop"
    # a budget too small for the proving sections: one it leaves out fails the check (vit needs
    # 100 s left, 75 are; p2 after it needs 35 and runs)
    results, _, code, lines = _plan_run(gc, monkeypatch, tmp_path, 400)
    assert code == 1 and results["vit"]["status"] == "not run" and results["p2"]["status"] == "pass"
    assert lines[0] == "gpu-check: FAILED: required, not passed: vit (not run)"
    # a section named by --only is required: left out, it fails the check
    _, _, code, lines = _plan_run(gc, monkeypatch, tmp_path, 100, only=("tests",))
    assert code == 1 and lines[0] == "gpu-check: FAILED: required, not passed: tests (not run)"
    _, _, code, _ = _plan_run(gc, monkeypatch, tmp_path, 1200, only=("ddp",))
    assert code == 1  # DDP asked for on one GPU


def test_the_end_to_end_run_is_a_section_of_its_own_and_the_gpu_tests_leave_it_out(tmp_path, monkeypatch):
    """The end-to-end Snakemake run is its own section, its folders kept in the output folder; the
    gpu tests section runs the others (not it, not the decode section's); a run that hits its limit
    fails its section."""
    _module()
    commands = sys.modules["sections.commands"]
    cmds = []

    def fake_run(cmd, log, timeout, env=None):
        cmds.append((cmd, timeout))
        return (None, "") if "hang" in str(log.parent) else (0, "3 passed")

    monkeypatch.setattr(commands, "run_logged", fake_run)
    res = commands.section_tests(tmp_path, 200, skip=commands.DECODE_TESTS)
    assert res["status"] == "pass" and cmds[-1][1] == 200
    deselected = {cmds[-1][0][i + 1] for i, a in enumerate(cmds[-1][0]) if a == "--deselect"}
    assert deselected == {commands.E2E_TEST, *commands.DECODE_TESTS}  # the e2e and decode sections run those
    res = commands.section_e2e(tmp_path, 90)
    cmd = cmds[-1][0]
    assert res["status"] == "pass" and cmd[-1] == commands.E2E_TEST and cmds[-1][1] == 90
    assert cmd[cmd.index("--basetemp") + 1] == str(tmp_path / "e2e")
    (tmp_path / "hang").mkdir()
    res = commands.section_e2e(tmp_path / "hang", 90)
    assert res["status"] == "fail" and "(time limit)" in res["summary"]


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
    code = gc.main(["--only", "conditioning,p2train,p2"])
    assert code == 1
    assert seen == [[], ["conditioning"], ["conditioning", "p2train"]]
    final = json.loads((tmp_path / "gpu-check" / "check.json").read_text())["sections"]
    assert [final[s]["status"] for s in ("conditioning", "p2train", "p2")] == ["pass", "pass", "fail"]
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
