"""`make gpu-check`: what a GPU machine must show before a sweep goes to it, in one command.

Sections, in this order, each in a process of its own with its own time limit (a hang or a failure
stops only its section), and a one-screen summary at the end (the limits and what each section
proves or adds: sections/plan.py). First the sections that prove what a sweep relies on; their
limits (525 s) fit the default budget, so each of them runs whatever the others take:

  decode     (45 s) the image path on CUDA: the batched device augmentation against the CPU's,
             nvJPEG's fallback to Pillow on odd files, the decode-ordering test (nvJPEG's stream
             against queued training kernels; nvJPEG against libjpeg-turbo on 4:4:4 and natural
             4:2:0 JPEGs), and training batches read ahead on a thread and stream of their own
             against those made when asked, the host not waiting for the training stream; the gpu
             tests of those names
  stop       (40 s) `leaner train` on CUDA sent SIGTERM after its first checkpoint: exit status 75
             within 30 s, its resume state at the step it reached, and the run resumed from there
             to its end; seconds from the signal to the exit
  conditioning  (60 s) the float64 probe at nearest_figN's largest shape (L2-H64-W64, N 256: 4,096
             heads a layer, ~6.4 GB an input) in chunks sized from the GPU's free memory: chunk,
             peak memory, seconds; it passes when every kappa is finite or singular and the peak
             stays under the card
  p2train    (75 s) a P2 fig1 variant (L1-H4-W8) through `leaner train` as configs/paper.yaml runs
             it (recipe.cuda_graph, fp32, TF32 off), the same with its step eager, and in bf16: it
             passes when all end finite and record their precision, the graph's eval MSE is within
             5% of the eager step's, bf16's at most 1.5 x fp32's, and the graph at least 2 x as fast
  e2e        (90 s) the DAG on the GPU: one variant of each task family through Snakemake to its
             summary (training, fine-tuning, conditioning on the GPU, four jobs sharing it), the
             end-to-end gpu test; its folders and logs kept in the output folder
  vit        (165 s) vit_imagenet's ViT-B/16, compiled, bf16, at the recipe's per-GPU batch (128)
             through `leaner train` on JPEGs of ImageNet's sizes (~400 x 350 px, made by the
             benchmark) read by the real loader (Pillow, `num_workers: auto`):
             images/s of the run, of the step alone (data on the GPU) and of the loader alone (from
             its start, over 10 batches a worker); it passes when the run ends finite at >= 0.9 x
             the slower of the two (as `leaner cost` prices it)
  p2         (50 s) P2's attention at the paper's largest shapes (fig1 L5-H64-W64 N16, figN W64 at N
             64 and 256): the kernel it takes, one training step's peak GPU memory and time at the
             paper's per-step batch (figN's H64 N-256 in its 4 micro-batches of 64) in fp32 (TF32
             off), as P2 trains; it passes when every shape fits, the fused forms take a fused
             kernel and memory from N 64 to 256 grows linearly

Then the sections that add coverage, run with what is left of the budget:

  p2kernel   (90 s) P2's many low-rank heads by each attention form, side by side: seconds per score
             (forward and backward) at figN's and fig1's shapes for today's form, the project's
             low-rank Triton kernel (models/lowrank.py) and FlexAttention, against the card's
             exponential limit; each form's output and gradients against the math form. It passes
             when today's form and the low-rank kernel were timed at every shape and are exact
  vitdevice  (165 s) the same run with `decode: device`: nvJPEG and the batched augmentation read
             two batches ahead on a thread and stream of their own; images/s of the run, of the
             step alone and of decode and augmentation alone, and each part's milliseconds an
             image (read, decode, crop, flip, RandAugment, normalise, erase): the device path's
             rate, which `leaner cost` prices by, and where its time goes
  ddp        (120 s) where two GPUs or more exist: `leaner train --nproc 2` (DDP, NCCL) with a
             resume checkpoint inside the run, killed after it and resumed
  tests      (240 s) the other `gpu`-marked tests
  bench      (150 s) the GPU benchmark rows (benchmarks/run.py --quick --gpu-only)

--budget SECONDS (default 540: one 10-minute GPU job with its start-up) leaves out what would not
fit; the summary and check.json say what each section left out would add and the --budget that
runs it (1,310 s runs them all). The exit status is 0 when every proving section (or, with --only,
every section named) ran and passed and no section that ran failed: an adding section left out
for the budget, or DDP on one GPU, does not fail the check. --cpu rehearses the whole command on
the CPU, each section with a stand-in of CPU size (fewer inputs, smaller batches, eager;
benchmarks/results.md rows 15 and 33). Logs and check.json go to $OUT/gpu-check when $OUT is set, else to
--out; check.json is rewritten after every section, so a job stopped midway keeps what it measured.
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
    DECODE_TESTS,
    run_logged,
    section_bench,
    section_decode,
    section_e2e,
    section_tests,
)
from sections.common import REPO  # noqa: E402
from sections.conditioning import section_conditioning  # noqa: E402
from sections.ddp import section_ddp  # noqa: E402
from sections.p2 import p2_verdict, section_p2  # noqa: E402, F401 (the tests take p2_verdict from here)
from sections.p2kernel import p2kernel_verdict, section_p2kernel  # noqa: E402, F401 (p2kernel_verdict: the tests)
from sections.p2train import p2train_verdict, section_p2train  # noqa: E402, F401 (p2train_verdict: the tests)
from sections.plan import (  # noqa: E402
    BY_NAME,
    DEFAULT_BUDGET,
    PROVING,
    SECTIONS,
    exit_status,
    longer_budget,
    summary_lines,
)
from sections.stop import section_stop, stop_verdict  # noqa: E402, F401 (stop_verdict: the tests)
from sections.vit import section_vit, section_vitdevice  # noqa: E402

IN_PROCESS = {"stop": section_stop, "conditioning": section_conditioning, "p2train": section_p2train,
              "vit": section_vit, "p2": section_p2, "p2kernel": section_p2kernel,
              "vitdevice": section_vitdevice, "ddp": section_ddp}  # each in a process of its own
LIMITS = {s.name: s.limit for s in BY_NAME.values()}  # seconds, each at most
NEEDS = {s.name: s.needs for s in BY_NAME.values()}  # not started with less than this left
monotonic = time.monotonic  # the budget's clock (the tests run the plan on one of their own)


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
            res = IN_PROCESS[name](Path(work))
    except Exception as exc:
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        res = {"status": "fail", "summary": f"{type(exc).__name__}: {first}"}
    result.write_text(json.dumps(res))


def run_section(name: str, out: Path, limit: float, selected: list[str]) -> dict:
    """One section under its time limit: a command's (decode, tests, bench) or one in a process of
    its own (the others); a limit reached or a crash is its failure."""
    if name == "decode":
        return section_decode(out, limit)
    if name == "e2e":
        return section_e2e(out, limit)
    if name == "tests":  # the decode tests ran in their own section
        return section_tests(out, limit, DECODE_TESTS if "decode" in selected else ())
    if name == "bench":
        return section_bench(out, limit)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        result = Path(tmp.name)
    code, tail = run_logged([sys.executable, __file__, "--out", str(out), "--child", name, str(result)],
                            out / f"{name}.log", limit)
    res = json.loads(result.read_text()) if code == 0 and result.stat().st_size else \
        {"status": "fail", "summary": "time limit" if code is None else (tail.splitlines() or ["?"])[-1]}
    result.unlink(missing_ok=True)
    return res


def run_all(selected: list[str], out: Path, budget: float, head: str, gpus: int | None) -> tuple[dict, list[str]]:
    """The selected sections in the plan's order within `budget` seconds, check.json rewritten before
    each; (results, the sections that run on this machine: all but DDP on fewer than two GPUs)."""
    from leaner.io import write_text

    here = [n for n in selected if not (n == "ddp" and gpus is not None and gpus < 2)]
    start, results = monotonic(), {}

    def save(final: bool = False) -> None:
        doc = {"machine": head, "budget": budget, "plan": [
            {"section": n, "proves": BY_NAME[n].proves, "limit": LIMITS[n], "needs": NEEDS[n]} for n in selected],
            "sections": results}
        if final:
            doc["longer_budget"] = longer_budget(results, here)
        write_text(out / "check.json", json.dumps(doc, indent=1))

    for name in selected:
        save()
        left = budget - (monotonic() - start)
        if name not in here:
            results[name] = {"status": "skipped", "summary": f"{gpus} GPU here; needs two"}
        elif left < NEEDS[name]:
            results[name] = {"status": "not run", "summary": f"{left:.0f} s of the budget left, needs ~{NEEDS[name]}"}
        else:
            limit, t0 = min(LIMITS[name], left), monotonic()
            print(f"gpu-check: {name} (up to {limit:.0f} s) ...", flush=True)
            res = run_section(name, out, limit, selected)
            res["seconds"] = round(monotonic() - t0, 1)
            results[name] = res
            print(f"gpu-check: {name}: {res['status']} ({res['seconds']} s)", flush=True)
    save(final=True)
    return results, here


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="logs and check.json (default: $OUT/gpu-check when $OUT is set, "
                                                "else benchmarks/gpu-check)")
    p.add_argument("--budget", type=float, default=float(DEFAULT_BUDGET),
                   help=f"seconds in all (default {DEFAULT_BUDGET})")
    p.add_argument("--only", type=lambda t: t.split(","), default=None,
                   help=f"sections, a,b ({','.join(SECTIONS)}); each one named must pass (default: all, of which "
                        f"the proving ones must pass)")
    p.add_argument("--cpu", action="store_true", help="rehearse the whole command on the CPU, each section with a "
                                                       "stand-in of CPU size (its figures are the CPU's)")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    out = out_folder(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.child:
        child(a.child[0], Path(a.child[1]))
        return 0
    unknown = sorted(set(a.only or ()) - set(SECTIONS))
    if unknown:
        print(f"gpu-check: error: --only {','.join(unknown)}: unknown (allowed: {', '.join(SECTIONS)})")
        return 2
    import torch

    if a.cpu:
        os.environ["GPU_CHECK_DEVICE"] = "cpu"  # for the sections' processes
    elif not torch.cuda.is_available():
        print("gpu-check: error: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine "
              "(or rehearse the command on the CPU: --cpu)")
        return 2
    head = (f"gpu-check --cpu: a rehearsal on {os.cpu_count()} CPU cores, torch {torch.__version__}" if a.cpu else
            f"gpu-check: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__} "
            f"(CUDA {torch.version.cuda}), {os.cpu_count()} cores")
    print(head, flush=True)
    selected = [s for s in SECTIONS if a.only is None or s in a.only]
    required = [s for s in selected if s in PROVING] if a.only is None else selected
    start = time.monotonic()
    results, here = run_all(selected, out, a.budget, head, None if a.cpu else torch.cuda.device_count())
    print("\n" + "=" * 100 + f"\n{head}; {time.monotonic() - start:.0f} s in all")
    for name, res in results.items():
        print(f"{name:<12} {res['status']:<8} {res.get('seconds', '-'):>6} s  {res['summary']}")
    print("\n".join(summary_lines(results, here, a.budget, required)))
    return exit_status(results, required)


if __name__ == "__main__":
    raise SystemExit(main())
