"""gpu-check's ddp section: `leaner train --nproc 2` (DDP) killed after a checkpoint and resumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .common import DEVICE, ON_CPU, REPO


def section_ddp(work: Path) -> dict:
    sys.path.insert(0, str(REPO / "tests"))
    from leaner.data import prepare
    from leaner.training.resume import RESUME_DIR, RESUME_FILE

    from conftest import kill_after_checkpoint, small_spec

    manifest = work / "digits" / "manifest.json"
    prepare("digits", {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}, str(manifest))
    spec = small_spec()
    spec["recipe"].update(epochs=40, checkpoint_every=100)
    run = work / "ddp"
    cmd = [sys.executable, "-m", "leaner", "train", "--spec", json.dumps(spec), "--data", str(manifest), "--out",
           str(run), "--nproc", "2", "--no-progress"]
    env = {**os.environ, "LEANER_GPU_LOCK_DIR": str(work / "locks")}
    env.pop("LEANER_DEVICE", None)
    if ON_CPU:
        env["LEANER_DEVICE"] = "cpu"  # two gloo processes
    kill_after_checkpoint(subprocess.Popen(cmd, env=env), run / RESUME_DIR / RESUME_FILE, timeout_s=240)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    metrics = json.loads((run / "metrics.json").read_text()) if proc.returncode == 0 else {}
    ok = (metrics.get("processes") == 2 and metrics.get("status") == "ok" and "resumed from step" in proc.stderr
          and str(metrics.get("device", "")).startswith(DEVICE))
    why = proc.stderr.strip().splitlines()[-1:] if not ok else []
    return {"status": "pass" if ok else "fail",
            "summary": f"2 processes, killed after the checkpoint at step 100, resumed: steps {metrics.get('steps')}, "
                       f"eval acc {metrics.get('final', {}).get('eval_acc')}" + (f"; {why[0]}" if why else "")}
