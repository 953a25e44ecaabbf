"""What metrics.json records beyond the last history row: the best epoch of the task's primary
metric, what the data path worked around (Task.take_data_events), and where and how the run ran
(its numerics, cost, code and host)."""

from __future__ import annotations

import math
import os
import platform
import resource
import time

import numpy as np
import torch

from .. import __version__
from ..compute import numerics
from ..compute.devices import claimed
from ..data.splits import SKIPPED
from ..provenance import code_state, stage_digest

UNREADABLE_LISTED = 100  # metrics.json names at most this many unreadable files


def log_data_events(task, ctx, totals: dict, epoch: int, log) -> None:
    """One log line for what the data path worked around this epoch on any rank (images decoded
    on the CPU, unreadable files skipped: Task.take_data_events), added to `totals` for metrics.json."""
    merged: dict[str, list[str]] = {}
    for events in ctx.gather(task.take_data_events()):
        for what, names in events.items():
            merged.setdefault(what, []).extend(names)
    for what, names in merged.items():
        if not names:
            continue
        totals[what] = totals.get(what, 0) + len(names)
        if what == SKIPPED:
            listed = totals.setdefault("unreadable files", [])
            listed += [n for n in dict.fromkeys(names) if n not in listed][:UNREADABLE_LISTED - len(listed)]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        log(f"epoch {epoch + 1}: {len(names)} image{'s' * (len(names) > 1)} {what}: {shown}")


def best_of(rows: list[dict], task, best: dict | None = None) -> dict:
    """The best value of the task's primary metric so far, with its epoch and step."""
    best = best or {"value": None, "epoch": None, "step": None}
    for row in rows:
        value = row.get(task.primary_metric)
        if value is None or not math.isfinite(value):
            continue
        if best["value"] is None or (value > best["value"] if task.primary_mode == "max" else value < best["value"]):
            best = {"value": value, "epoch": row["epoch"], "step": row["step"]}
    return best


def cost_and_provenance(dev: torch.device, ctx, started: float, computed_in: str, modules: tuple[str, ...]) -> dict:
    """metrics.json's record of where and how the run ran: its numerics as read back (kernels,
    BLAS branch, threads: numerics.in_effect), what it cost, the code (`modules`: what the job
    loaded by name, tasks.job_modules) and the host."""
    from importlib.metadata import version

    if dev.type == "cuda":
        peak, name = torch.cuda.max_memory_allocated(dev) / 2**20, torch.cuda.get_device_name(dev)
    else:
        peak, name = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, platform.processor() or "cpu"
    return {
        "peak_memory_mb": peak, "device": str(dev), "device_name": name,
        "threads": torch.get_num_threads(), "processes": ctx.world, "backend": ctx.backend,
        "numerics": numerics.in_effect(str(dev), computed_in),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "timm": version("timm"),
                     "numpy": np.__version__, "leaner": __version__},
        # the commit that produced this run, whether the tree differed, and the training code's digest
        # with the modules it loaded by name (provenance.stage_digest: `leaner status` names a run
        # made by other training code)
        "code": {**code_state(), "training": stage_digest("training", modules), "modules": list(modules)},
        "run": {"host": platform.node(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                "slurm_step_tasks": os.environ.get("SLURM_STEP_NUM_TASKS"),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpu_claim": claimed(),
                "started_unix": started, "finished_unix": time.time()},
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
