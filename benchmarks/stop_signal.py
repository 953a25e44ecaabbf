"""What a scheduler's stop signal costs a training run: seconds from the signal to the process's
exit, and the steps between the signal and the saved state.

    .venv/bin/python benchmarks/stop_signal.py [--repeats 3] [--width 16 256] [--nproc 1 2]

For each model width, process count and signal (SIGTERM, SIGUSR1), `leaner train` on the digits
ViT (depth 2) is signalled once its first checkpoint exists (the state's size is that width's),
`--repeats` times; it prints one markdown row each: the exit status (75: stopped, resumable), the
seconds from the signal to the launcher's exit (min/median/max), the step the signal came after
and the step saved (their difference is the step that was in flight, finished and kept: no work
is lost), and the resume state's size. benchmarks/results.md row 9 has its output.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _spec(width: int) -> dict:
    from leaner.workflow.config import CONDITIONING_DEFAULTS, RECIPE_DEFAULTS

    model = {"arch": "vit", "depth": 2, "heads": 4, "width": width, "head_dim": width // 4, "mlp_hidden": 2 * width,
             "patch_size": 2, "img_size": 8, "in_chans": 1, "num_classes": 10, "qkv_bias": True,
             "drop_path_rate": 0.0, "global_pool": "token"}
    recipe = {**RECIPE_DEFAULTS, "epochs": 400, "batch_size": 64, "lr": 2e-3, "checkpoint_every": 20,
              "checkpoint_minutes": None}
    return {"study": "bench", "variant": f"W{width}", "task": "image_classification", "dataset": "digits", "seed": 0,
            "model": model, "recipe": recipe, "conditioning": {**CONDITIONING_DEFAULTS, "samples": 32}}


def one(spec: dict, manifest: Path, out: Path, nproc: int, sig: signal.Signals) -> dict:
    cmd = [str(BIN / "leaner"), "train", "--spec", json.dumps(spec), "--data", str(manifest), "--out", str(out),
           "--threads", str(nproc), "--nproc", str(nproc), "--no-progress", "--device", "cpu"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    state = out / ".resume" / "state.pt"
    while not state.exists():
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read()[-2000:])
        time.sleep(0.01)
    time.sleep(0.5)  # mid-run, between checkpoints
    sent = time.perf_counter()
    proc.send_signal(sig)
    err = proc.communicate(timeout=120)[1]
    seconds = time.perf_counter() - sent
    found = re.search(r"it came after step (\d+)\): resume state saved at step (\d+)", err)
    if not found:
        raise RuntimeError(f"no stop line (exit {proc.returncode}): {err[-2000:]}")
    return {"code": proc.returncode, "seconds": seconds, "came": int(found[1]), "saved": int(found[2]),
            "state_mb": state.stat().st_size / 2**20}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--width", type=int, nargs="+", default=[16, 256])
    ap.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    a = ap.parse_args(argv)
    from leaner.data import prepare

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifest = root / "digits" / "manifest.json"
        prepare("digits", {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}, str(manifest))
        print("| width | processes | signal | exit | seconds to exit, median (min-max) | came after step -> saved "
              "| steps in flight kept | state MB |")
        print("|---|---|---|---|---|---|---|---|")
        for width in a.width:
            for nproc in a.nproc:
                for sig in (signal.SIGTERM, signal.SIGUSR1):
                    runs = [one(_spec(width), manifest, root / f"{width}-{nproc}-{sig.name}-{i}", nproc, sig)
                            for i in range(a.repeats)]
                    s = [r["seconds"] for r in runs]
                    steps = "; ".join(f"{r['came']} -> {r['saved']}" for r in runs)
                    print(f"| {width} | {nproc} | {sig.name} | {', '.join(sorted({str(r['code']) for r in runs}))} | "
                          f"{statistics.median(s):.2f} ({min(s):.2f}-{max(s):.2f}) | "
                          f"{steps} | "
                          f"{max(r['saved'] - r['came'] for r in runs)} | {runs[0]['state_mb']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
