"""Which device a job trains on.

Snakemake's `gpu` resource is only a counter: `snakemake --cores all --resources gpu=4` runs at
most four GPU jobs at once but never says which GPU each should use. Each job therefore claims
GPU slots itself: an exclusive `flock` on `<lock dir>/gpu-<id>.lock`, held for the life of the
process (the kernel releases it when the process ends, killed or not). A job that needs k GPUs
(one variant over k processes, see distributed.py) takes k slots at once or none, so two such
jobs can never deadlock on half a claim each.

The lock is named after the physical GPU: entry i of CUDA_VISIBLE_DEVICES when that is set (as
SLURM sets it per job), else i. Two Slurm jobs on one node that were given different GPUs thus
never wait on each other, while jobs sharing a workstation's GPUs still take turns.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import time
from pathlib import Path

_HELD: dict[int, int] = {}  # slot -> open file descriptor holding its lock, for this process


def lock_dir() -> Path:
    """$LEANER_GPU_LOCK_DIR, else a per-user folder in the system temp dir (one machine's GPUs)."""
    path = Path(os.environ.get("LEANER_GPU_LOCK_DIR") or Path(tempfile.gettempdir()) / f"leaner-gpu-{os.getuid()}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def visible_ids(n_slots: int | None = None) -> list[str]:
    """The physical id of each visible GPU: CUDA_VISIBLE_DEVICES's entries, else 0..n_slots-1."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return [v.strip() for v in visible.split(",") if v.strip()]
    return [str(i) for i in range(n_slots or 0)]


def _lock_file(directory: Path, slot: int, n_slots: int) -> Path:
    ids = visible_ids(n_slots)
    name = ids[slot] if slot < len(ids) else str(slot)
    return directory / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.lock"


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def claim_slots(count: int, n_slots: int, directory: str | os.PathLike | None = None, timeout_s: float = 600.0,
                poll_s: float = 0.2) -> list[int]:
    """Claim `count` free slots of `n_slots`, all at once or none, and hold them until the process
    ends (or `release`). Slots this process already holds count first.

    Raises TimeoutError if not enough slots come free within `timeout_s` (more GPU jobs than GPUs:
    run Snakemake with --resources gpu=<number of GPUs>)."""
    if n_slots < 1:
        raise ValueError(f"n_slots must be >= 1, got {n_slots}")
    if not 1 <= count <= n_slots:
        raise ValueError(f"cannot claim {count} GPU slots: this machine shows {n_slots} GPU(s)")
    directory = Path(directory) if directory is not None else lock_dir()
    directory.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        got = sorted(_HELD)[:count]
        new: list[int] = []
        for slot in range(n_slots):
            if len(got) + len(new) == count:
                break
            if slot in _HELD:
                continue
            fd = _try_lock(_lock_file(directory, slot, n_slots))
            if fd is not None:
                _HELD[slot] = fd
                new.append(slot)
        if len(got) + len(new) == count:
            return sorted(got + new)
        for slot in new:  # not enough free: give back what this round took, wait, try again
            release(slot)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} of {n_slots} GPU slots in {directory} did not come free within "
                               f"{timeout_s:.0f} s; run at most as many GPU jobs as GPUs "
                               f"(snakemake --resources gpu={n_slots})")
        time.sleep(poll_s)


def claim_slot(n_slots: int, directory: str | os.PathLike | None = None, timeout_s: float = 600.0,
               poll_s: float = 0.2) -> int:
    """One slot (see `claim_slots`)."""
    return claim_slots(1, n_slots, directory, timeout_s, poll_s)[0]


def release(slot: int) -> None:
    fd = _HELD.pop(slot, None)
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def pick_device(requested: str | None = None, local_rank: int | None = None):
    """`requested` ('cpu', 'cuda', 'cuda:1'), else $LEANER_DEVICE, else, with CUDA present, GPU
    `local_rank` for a worker of a multi-process run (its launcher claimed the GPUs) or a claimed
    GPU slot (one GPU per concurrent job), else the CPU."""
    import torch

    requested = requested or os.environ.get("LEANER_DEVICE")
    if requested:
        device = torch.device(requested)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {requested!r} requested but CUDA is not available")
        if device.type == "cuda" and local_rank is not None and device.index is None:
            device = torch.device("cuda", local_rank)
        return device
    if not torch.cuda.is_available():
        return torch.device("cpu")
    slot = local_rank if local_rank is not None else claim_slot(torch.cuda.device_count())
    torch.cuda.set_device(slot)
    return torch.device("cuda", slot)
