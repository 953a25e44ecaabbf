"""`make gpu-check`: what a GPU machine must show before a sweep goes to it, in one command.

Sections, in this order (what has never run on a GPU first), each in a process of its own with
its own time limit (a hang or a failure stops only its section), and a one-screen summary at the end:

  decode     the image path on CUDA, never yet run there: the batched device augmentation against
             the CPU's, nvJPEG's fallback to Pillow on odd files, and the decode-ordering test
             (nvJPEG's stream against queued training kernels); the gpu tests of that name
  conditioning  the float64 probe at nearest_figN's largest shape (L2-H64-W64, N 256: 4,096 heads
             a layer, ~6.4 GB an input) in chunks sized from the GPU's free memory: chunk, peak
             memory, seconds; it passes when every kappa is finite or singular and the peak stays
             under the card
  vit        vit_imagenet's ViT-B/16, compiled, bf16, at the recipe's per-GPU batch (128) through
             `leaner train` on JPEGs read by the real loader (Pillow, `num_workers: auto`): images/s
             of the run, of the step alone (data on the GPU) and of the loader alone; it passes
             when the run ends finite at >= 0.8 x the slower of the two (as `leaner cost` prices it)
  p2         P2's attention at the paper's largest shapes (fig1 L5-H64-W64 N16, figN W64 at N 64 and
             256): the kernel it takes, one training step's peak GPU memory and time at the
             paper's per-step batch (figN's H64 N-256 in its 4 micro-batches of 64) in fp32 (TF32
             off), as P2 trains; it passes when every shape fits, the fused forms take a fused
             kernel and memory from N 64 to 256 grows linearly
  precision  a P2 fig1 variant trained by `leaner train` for a few thousand steps in fp32 (TF32
             off) and in bf16, same seed and data: the losses side by side; it passes when both
             record their precision, both end finite and bf16's eval MSE is at most 1.5 x fp32's
  ddp        where two GPUs or more exist: `leaner train --nproc 2` (DDP, NCCL) with a resume
             checkpoint inside the run, killed after it and resumed
  tests      the `gpu`-marked tests (the fast ones first, the end-to-end Snakemake run last)
  bench      the GPU benchmark rows (benchmarks/run.py --quick --gpu-only)

--budget SECONDS (default 450: one 10-minute GPU job with its start-up) skips what would not fit
(the summary says so). --cpu rehearses the whole command on the CPU, each section with a stand-in
of CPU size (fewer inputs, smaller batches, eager; 207 s on 2 cores, results.md row 11). Logs
and check.json go to $OUT/gpu-check when $OUT is set, else to --out; check.json is rewritten
after every section, so a job stopped midway keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# the sections (benchmarks/sections/) and the benchmark rows they use (benchmarks/rows/), also
# where this file is imported by its path (the tests)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sections.commands import (  # noqa: E402
    DECODE_TESTS,  # noqa: F401 (the tests take it from here)
    run_logged,
    section_bench,
    section_decode,
    section_tests,
)
from sections.common import REPO  # noqa: E402
from sections.conditioning import section_conditioning  # noqa: E402
from sections.ddp import section_ddp  # noqa: E402
from sections.p2 import (  # noqa: E402
    p2_verdict,  # noqa: F401 (the tests take it from here)
    precision_verdict,  # noqa: F401 (the tests take it from here)
    section_p2,
    section_precision,
)
from sections.vit import section_vit  # noqa: E402

SECTIONS = ("decode", "conditioning", "vit", "p2", "precision", "ddp", "tests", "bench")
LIMITS = {"decode": 90, "conditioning": 120, "vit": 180, "p2": 150, "precision": 150, "ddp": 150, "tests": 300,
          "bench": 200}  # seconds, each at most
NEEDS = {"decode": 30, "conditioning": 40, "vit": 90, "p2": 60, "precision": 60, "ddp": 90, "tests": 120,
         "bench": 120}  # skipped with less than this left


def out_folder(given: str | None, env=os.environ) -> Path:
    """$OUT/gpu-check where a GPU job hands back $OUT, else --out, else benchmarks/gpu-check."""
    if given:
        return Path(given)
    return Path(env["OUT"]) / "gpu-check" if env.get("OUT") else REPO / "benchmarks" / "gpu-check"


# ----------------------------------------------------------------------------- driver

def child(name: str, result: Path) -> None:
    """One in-process section, its result as JSON (an exception is the section's failure); its runs
    in a temporary folder, removed after."""
    try:
        with tempfile.TemporaryDirectory(prefix=f"gpu-check-{name}-") as work:
            res = {"conditioning": section_conditioning, "vit": section_vit, "p2": section_p2,
                   "precision": section_precision, "ddp": section_ddp}[name](Path(work))
    except Exception as exc:
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        res = {"status": "fail", "summary": f"{type(exc).__name__}: {first}"}
    result.write_text(json.dumps(res))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="logs and check.json (default: $OUT/gpu-check when $OUT is set, "
                                                "else benchmarks/gpu-check)")
    p.add_argument("--budget", type=float, default=450.0, help="seconds in all (default 450)")
    p.add_argument("--only", type=lambda t: t.split(","), default=list(SECTIONS),
                   help=f"sections, a,b ({','.join(SECTIONS)})")
    p.add_argument("--cpu", action="store_true", help="rehearse the whole command on the CPU, each section with a "
                                                       "stand-in of CPU size (its figures are the CPU's)")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    out = out_folder(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.child:
        child(a.child[0], Path(a.child[1]))
        return 0
    unknown = sorted(set(a.only) - set(SECTIONS))
    if unknown:
        print(f"gpu-check: error: --only {','.join(unknown)}: unknown (allowed: {', '.join(SECTIONS)})")
        return 2
    import torch

    from leaner.io import write_text

    if a.cpu:
        os.environ["GPU_CHECK_DEVICE"] = "cpu"  # for the sections' processes
    elif not torch.cuda.is_available():
        print("gpu-check: error: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine "
              "(or rehearse the command on the CPU: --cpu)")
        return 2
    start = time.monotonic()
    head = (f"gpu-check --cpu: a rehearsal on {os.cpu_count()} CPU cores, torch {torch.__version__}" if a.cpu else
            f"gpu-check: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__} "
            f"(CUDA {torch.version.cuda}), {os.cpu_count()} cores")
    print(head, flush=True)
    results = {}
    for name in (s for s in SECTIONS if s in a.only):
        write_text(out / "check.json", json.dumps({"machine": head, "sections": results}, indent=1))
        left = a.budget - (time.monotonic() - start)
        if left < NEEDS[name]:
            results[name] = {"status": "not run", "summary": f"{left:.0f} s of the budget left, needs ~{NEEDS[name]}"}
            continue
        if name == "ddp" and not a.cpu and torch.cuda.device_count() < 2:
            results[name] = {"status": "skipped", "summary": f"{torch.cuda.device_count()} GPU here; needs two"}
            continue
        limit, t0 = min(LIMITS[name], left), time.monotonic()
        print(f"gpu-check: {name} (up to {limit:.0f} s) ...", flush=True)
        if name in ("decode", "tests", "bench"):
            res = {"decode": section_decode, "tests": section_tests, "bench": section_bench}[name](out, limit)
        else:
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
                result = Path(tmp.name)
            code, tail = run_logged([sys.executable, __file__, "--out", str(out), "--child", name, str(result)],
                                    out / f"{name}.log", limit)
            res = json.loads(result.read_text()) if code == 0 and result.stat().st_size else \
                {"status": "fail", "summary": "time limit" if code is None else (tail.splitlines() or ["?"])[-1]}
            result.unlink(missing_ok=True)
        res["seconds"] = round(time.monotonic() - t0, 1)
        results[name] = res
        print(f"gpu-check: {name}: {res['status']} ({res['seconds']} s)", flush=True)
    write_text(out / "check.json", json.dumps({"machine": head, "sections": results}, indent=1))
    print("\n" + "=" * 100 + f"\n{head}; {time.monotonic() - start:.0f} s in all")
    for name, res in results.items():
        print(f"{name:<10} {res['status']:<8} {res.get('seconds', '-'):>6} s  {res['summary']}")
    return 0 if all(r["status"] in ("pass", "skipped") for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
