"""gpu-check's stop section: a scheduler's stop signal to `leaner train` on the GPU (as
benchmarks/stop_signal.py measures it on the CPU, results.md row 10)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

from .common import DEVICE, ON_CPU, train_command, train_env

STOP_GRACE_S = 30.0  # declared before any GPU run: the process exits within Slurm's default KillWait
STOPPED_EXIT = 75  # leaner.training.stopping.STOPPED_EXIT: stopped, resumable
STOP_LINE = re.compile(r"came after step (\d+)\).*?saved at step (\d+)")


def stop_spec(width: int, epochs: int) -> dict:
    """The digits ViT of benchmarks/stop_signal.py (depth 2), a resume state every 20 steps."""
    from leaner.workflow.config import CONDITIONING_DEFAULTS, RECIPE_DEFAULTS

    model = {"arch": "vit", "depth": 2, "heads": 4, "width": width, "head_dim": width // 4, "mlp_hidden": 2 * width,
             "patch_size": 2, "img_size": 8, "in_chans": 1, "num_classes": 10, "qkv_bias": True,
             "drop_path_rate": 0.0, "global_pool": "token"}
    recipe = {**RECIPE_DEFAULTS, "epochs": epochs, "batch_size": 64, "lr": 2e-3, "checkpoint_every": 20,
              "checkpoint_minutes": None}
    return {"study": "gpu-check", "variant": f"stop-W{width}", "task": "image_classification", "dataset": "digits",
            "seed": 0, "model": model, "recipe": recipe, "conditioning": {**CONDITIONING_DEFAULTS, "samples": 32}}


def section_stop(work: Path) -> dict:
    """`leaner train` of the digits ViT (width 256: a 12 MB state; `--cpu`: width 16) on this
    device, sent SIGTERM shortly after its first resume state exists, then run again to its end.
    It passes when the signalled run exits 75 within STOP_GRACE_S with its state saved at the step
    it reached (the step in flight finished and kept: the step saved is the one the signal came
    after or the next), and the second run resumes from that step and finishes on this device."""
    from leaner.data import prepare
    from leaner.training.resume import RESUME_DIR, RESUME_FILE

    manifest = work / "digits" / "manifest.json"
    prepare("digits", {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}, str(manifest))
    spec = stop_spec(16, 5) if ON_CPU else stop_spec(256, 20)  # 23 steps an epoch
    run, env = work / "run", train_env(work)
    cmd = train_command(spec, manifest, run)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    state = run / RESUME_DIR / RESUME_FILE
    while not state.exists() and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(0.2)  # between checkpoints
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        err = proc.communicate(timeout=STOP_GRACE_S * 2)[1]
    except subprocess.TimeoutExpired:
        proc.kill()  # not left running after the section
        err = proc.communicate()[1] + f"\nno exit {STOP_GRACE_S * 2:.0f} s after SIGTERM"
    to_exit = time.perf_counter() - sent
    found = STOP_LINE.search(err)
    came, saved = (int(found[1]), int(found[2])) if found else (None, None)
    state_mb = state.stat().st_size / 2**20 if state.exists() else 0.0
    res = {"exit": proc.returncode, "signal_to_exit_s": round(to_exit, 2), "came_after_step": came,
           "saved_step": saved, "state_mb": round(state_mb, 2)}
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    metrics = json.loads((run / "metrics.json").read_text()) if again.returncode == 0 else {}
    stopped, resumed = stop_verdict(res, metrics)
    why = "" if stopped and resumed else "; " + (
        (err if not stopped else again.stderr).strip().splitlines() or ["no output"])[-1][:200]
    return {"status": "pass" if stopped and resumed else "fail",
            "summary": f"SIGTERM after step {came}: exit {proc.returncode} in {to_exit:.2f} s, state saved at step "
                       f"{saved} ({state_mb:.1f} MB); resumed at {metrics.get('resumed_at')}: exit {again.returncode}, "
                       f"{metrics.get('steps')} of {metrics.get('total_steps')} steps, status {metrics.get('status')}"
                       + why,
            **res, "resumed_exit": again.returncode, "steps": metrics.get("steps")}


def stop_verdict(res: dict, metrics: dict) -> tuple[bool, bool]:
    """(stopped: the signalled run exited STOPPED_EXIT within STOP_GRACE_S with a resume state
    saved at the step the signal came after or the next; resumed: the second run resumed from
    that step, as its metrics.json's `resumed_at` says, and ended `ok` at its last step on this
    check's device)."""
    came, saved = res["came_after_step"], res["saved_step"]
    stopped = (res["exit"] == STOPPED_EXIT and came is not None and saved is not None and 0 <= saved - came <= 1
               and res["state_mb"] > 0 and res["signal_to_exit_s"] <= STOP_GRACE_S)
    resumed = (stopped and metrics.get("resumed_at") == [saved] and metrics.get("status") == "ok"
               and metrics.get("steps") == metrics.get("total_steps")
               and str(metrics.get("device", "")).startswith(DEVICE))
    return stopped, resumed
