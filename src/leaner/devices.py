"""Which device a job trains on.

Snakemake's `gpu` resource is only a counter: `snakemake --cores all --resources gpu=4` runs at
most four GPU jobs at once but never says which GPU each should use. Each job therefore claims a
GPU slot itself: an exclusive `flock` on `<lock dir>/gpu<i>.lock` for the first free i, held for
the life of the process (the kernel releases it when the process ends, killed or not). Under
SLURM, Slurm sets CUDA_VISIBLE_DEVICES per job; the visible GPUs are then the job's own and the
same claim picks among them.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from pathlib import Path

_HELD: dict[int, int] = {}  # slot -> open file descriptor holding its lock, for this process


def lock_dir() -> Path:
    """$LEANER_GPU_LOCK_DIR, else a per-user folder in the system temp dir (one machine's GPUs)."""
    path = Path(os.environ.get("LEANER_GPU_LOCK_DIR") or Path(tempfile.gettempdir()) / f"leaner-gpu-{os.getuid()}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def claim_slot(n_slots: int, directory: str | os.PathLike | None = None, timeout_s: float = 600.0,
               poll_s: float = 0.2) -> int:
    """Claim the first free slot of `n_slots` and hold it until the process ends (or `release`).

    Raises TimeoutError if every slot stays busy for `timeout_s` (more GPU jobs than GPUs: run
    Snakemake with --resources gpu=<number of GPUs>)."""
    if n_slots < 1:
        raise ValueError(f"n_slots must be >= 1, got {n_slots}")
    directory = Path(directory) if directory is not None else lock_dir()
    directory.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        for slot in range(n_slots):
            if slot in _HELD:
                return slot
            fd = os.open(directory / f"gpu{slot}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            _HELD[slot] = fd
            return slot
        if time.monotonic() > deadline:
            raise TimeoutError(f"all {n_slots} GPU slots in {directory} stayed busy for {timeout_s:.0f} s; "
                               f"run at most as many GPU jobs as GPUs (snakemake --resources gpu={n_slots})")
        time.sleep(poll_s)


def release(slot: int) -> None:
    fd = _HELD.pop(slot, None)
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def pick_device(requested: str | None = None):
    """`requested` ('cpu', 'cuda', 'cuda:1'), else $LEANER_DEVICE, else a claimed GPU slot when
    CUDA is present (one GPU per concurrent job), else the CPU."""
    import torch

    requested = requested or os.environ.get("LEANER_DEVICE")
    if requested:
        device = torch.device(requested)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {requested!r} requested but CUDA is not available")
        return device
    if not torch.cuda.is_available():
        return torch.device("cpu")
    slot = claim_slot(torch.cuda.device_count())
    torch.cuda.set_device(slot)
    return torch.device("cuda", slot)
