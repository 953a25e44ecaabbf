"""gpu-check's plan: the sections in their order, each with its time limit, the time it needs left
to start, and what it proves or adds; which budget runs a section; and the rule of the exit status.

The sections that prove something a sweep relies on come first and their limits, with the
driver's slack, fit the default budget (540 s: one 10-minute GPU job with its start-up), so each
of them runs even where every one takes its whole limit; the end-to-end Snakemake run on the GPU is
one of them. The sections that add coverage come
after and run with what is left; one that does not fit is reported with what it would add and the
--budget that runs it.

The limits are sized from what the sections measured on an H100 and an H200 (benchmarks/results.md
rows 8 and 8c: p2 39 s, the fast `gpu` tests 112 s, the GPU benchmark rows 111 s, the end-to-end
test not done after 318 s) and, where a section has never run on a GPU, from its CPU rehearsal
(row 11) and what it runs; row 15 has the plan and its CPU rehearsal.
"""

from __future__ import annotations

import math
from typing import NamedTuple

DEFAULT_BUDGET = 540  # seconds: one 10-minute GPU job with its start-up
SLACK = 15  # seconds the driver takes outside the sections (its start, each section's process, check.json)


class Section(NamedTuple):
    name: str
    proves: bool  # a sweep relies on it: runs within the default budget, and the check fails without it
    limit: int  # seconds, at most
    needs: int  # not started with less than this left
    what: str  # what it proves, or what it adds


PLAN = (
    Section("decode", True, 45, 30,
            "the image path on CUDA: the device augmentation against the CPU's, nvJPEG on odd files, and the "
            "decode-ordering test (nvJPEG's stream against queued training kernels), and a training batch on the side "
            "stream: the plain path's bits, the host not waiting for the training stream"),
    Section("stop", True, 40, 30,
            "the stop signal on the GPU: `leaner train` on CUDA sent SIGTERM after its first checkpoint exits 75 "
            "with its resume state at the step it reached, the resumed run finishes; seconds from signal to exit"),
    Section("conditioning", True, 60, 40,
            "the float64 probe at nearest_figN's largest shape (L2-H64-W64 N256) in chunks sized from the card's "
            "free memory: chunk, peak memory, every kappa a number"),
    Section("p2train", True, 75, 50,
            "P2 (nearest_fig1 L1-H4-W8) through `leaner train` as paper.yaml runs it (recipe.cuda_graph, fp32, "
            "TF32 off) against the eager step and against bf16: the same losses, the graph's speed-up"),
    Section("e2e", True, 90, 60,
            "the DAG on the GPU: one variant of each task family through Snakemake to its summary, training, "
            "fine-tuning and conditioning on the GPU, four jobs sharing it (the end-to-end `gpu` test)"),
    Section("vit", True, 165, 100,
            "ViT-B/16 compiled, bf16, batch 128 through `leaner train` on JPEGs of ImageNet's sizes read by the real "
            "loader: images/s of the run, of the step alone and of the loader alone"),
    Section("p2", True, 50, 35,
            "P2's attention at the paper's largest shapes and per-step batches: the kernel it takes, one step's "
            "peak memory and time, memory linear in N"),
    Section("p2kernel", False, 90, 45,
            "P2's many low-rank heads by each attention form side by side (today's, the project's low-rank Triton "
            "kernel, FlexAttention): seconds per score at figN's and fig1's shapes against the card's exponential "
            "limit, each form's output and gradients against the math form"),
    Section("vitdevice", False, 165, 100,
            "the same ViT-B/16 run with `decode: device` (nvJPEG and the batched augmentation on a side stream): "
            "images/s of the run, of the step alone and of decode and augmentation alone, what prices the device "
            "path and decides whether paper.yaml turns it on"),
    Section("ddp", False, 120, 60,
            "`leaner train --nproc 2` (DDP, NCCL) killed after its checkpoint and resumed (two GPUs or more)"),
    Section("tests", False, 240, 120,
            "the other `gpu`-marked tests (112-168 s on an H200): a killed GPU run resumed, conditioning on the GPU "
            "against the CPU, CUDA graphs and compile modes, jobs sharing a GPU, the low-rank kernel's exactness"),
    Section("bench", False, 150, 120,
            "the GPU benchmark rows (benchmarks/run.py --quick --gpu-only: rows 5, 6b, 7; 111 s on an H200)"),
)
BY_NAME = {s.name: s for s in PLAN}
SECTIONS = tuple(s.name for s in PLAN)
PROVING = tuple(s.name for s in PLAN if s.proves)


def budget_to_run(name: str, here: list[str] | tuple[str, ...]) -> int:
    """The --budget that runs section `name` whatever the sections before it take: the limits of the
    sections that run here (`here`, in order) up to it, with the driver's slack, rounded up to 10 s."""
    names = [s.name for s in PLAN if s.name in here]
    total = SLACK + sum(BY_NAME[n].limit for n in names[:names.index(name) + 1])
    return int(math.ceil(total / 10) * 10)


def exit_status(results: dict, required: list[str] | tuple[str, ...]) -> int:
    """0 when every required section ran and passed and no section that ran failed; else 1.

    `required`: the proving sections, or every section --only named. A section left out for lack
    of budget ("not run") or of hardware ("skipped": DDP on one GPU) fails the check only where it
    is required; a section passes only on what it measured, so one that ran and failed always does."""
    ran_and_failed = any(r["status"] == "fail" for r in results.values())
    missing = any(results.get(n, {}).get("status") != "pass" for n in required)
    return 1 if ran_and_failed or missing else 0


def longer_budget(results: dict, here: list[str] | tuple[str, ...]) -> list[dict]:
    """For each section (or part of one) the budget left out: what it would add and the --budget
    that runs it."""
    out = []
    for name, res in results.items():
        if res["status"] == "not run":
            out.append({"section": name, "adds": BY_NAME[name].what, "budget": budget_to_run(name, here)})
        for part in res.get("left_out", []):  # a part of a section that ran (the end-to-end test)
            out.append({"section": f"{name}: {part['part']}", "adds": part["adds"],
                        "budget": budget_to_run(name, here)})
    return out


def summary_lines(results: dict, here: list[str] | tuple[str, ...], budget: float, required) -> list[str]:
    """The end of the one-screen summary: the exit rule's verdict and what a longer budget adds."""
    code = exit_status(results, required)
    failed = [n for n, r in results.items() if r["status"] == "fail"]
    missing = [f"{n} ({results.get(n, {}).get('status', 'not run')})" for n in required
               if results.get(n, {}).get("status") != "pass" and n not in failed]
    if code == 0:
        lines = [f"gpu-check: passed: every required section passed ({', '.join(required)})"]
    else:
        why = ([f"failed: {', '.join(failed)}"] if failed else []) + ([f"required, not passed: {', '.join(missing)}"]
                                                                     if missing else [])
        lines = ["gpu-check: FAILED: " + "; ".join(why)]
    extra = longer_budget(results, here)
    if extra:
        most = max(e["budget"] for e in extra)
        lines.append(f"not in this budget ({budget:.0f} s); --budget {most} runs them all:")
        lines += [f"  {e['section']} (--budget {e['budget']}): {e['adds']}" for e in extra]
    skipped = [(n, r["summary"]) for n, r in results.items() if r["status"] == "skipped"]
    lines += [f"skipped here: {n} ({why}): {BY_NAME[n].what}" for n, why in skipped]
    return lines
