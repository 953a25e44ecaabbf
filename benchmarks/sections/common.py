"""What the in-process sections of benchmarks/gpu_check.py share: the repository, the device they
run on (`--cpu`: the CPU, with stand-ins of CPU size), the peak memory of a block and the card's
memory, and how a section runs `leaner train` through its command line."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


# `--cpu`: the whole command rehearsed on the CPU, each section with a stand-in of CPU size (fewer
# inputs, smaller batches, eager), to check the command itself (its sections, budget, check.json)
# where no GPU is at hand; its figures measure the CPU, not a card
ON_CPU = os.environ.get("GPU_CHECK_DEVICE") == "cpu"
DEVICE = "cpu" if ON_CPU else "cuda"


@contextlib.contextmanager
def peak_gib():
    """{"gib": the peak memory over the block}: the card's allocator on CUDA, the rise of the
    process's peak RSS on the CPU (`--cpu`)."""
    import torch

    from leaner.planning.rehearse import peak_rise_mb

    out = {}
    if ON_CPU:
        with peak_rise_mb() as rise:
            yield out
        out["gib"] = rise["mb"] / 1024
        return
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    yield out
    torch.cuda.synchronize()
    out["gib"] = (torch.cuda.max_memory_allocated() - base) / 2**30


def card_gib() -> float:
    """The card's memory (on the CPU, `--cpu`: the machine's)."""
    import torch

    if ON_CPU:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return torch.cuda.get_device_properties(0).total_memory / 2**30


def train_command(spec: dict, manifest: Path | str, out: Path) -> list[str]:
    """`leaner train` of `spec` through its command line on this check's device, as a rule runs it
    (paper.yaml's P2 jobs: 2 threads; `--cpu`: 1, so that a busy 2-core machine does not stall it)."""
    return [sys.executable, "-m", "leaner", "train", "--spec", json.dumps(spec), "--data", str(manifest), "--out",
            str(out), "--device", DEVICE, "--no-progress", "--threads", "1" if ON_CPU else "2"]


def train_env(work: Path) -> dict:
    """The environment of a section's `leaner train`: its GPU locks in the section's folder, the
    device from the command line only."""
    env = {**os.environ, "LEANER_GPU_LOCK_DIR": str(work / "locks")}
    env.pop("LEANER_DEVICE", None)
    return env
