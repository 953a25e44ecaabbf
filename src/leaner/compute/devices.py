"""Which device a job trains on, and how jobs share a machine's GPUs.

A job runs on a GPU only when it asked for one: its `gpu_share` (what the Snakemake rule declared,
see below) is above zero, or the user forces a device with --device / $LEANER_DEVICE. A `gpu: 0`
study trains on the CPU even where CUDA is present: a tiny model gains nothing from a GPU, and
sixteen CPU jobs at once beat sixteen jobs queued on one GPU.

`gpu_share` counts GPUs in units of 1/SHARE_UNITS: SHARE_UNITS * g for a job of g whole GPUs,
SHARE_UNITS // k for one of k jobs that share one GPU (a study's `jobs_per_gpu: k`). Snakemake
sums it like any resource, so with `--resources gpu=N` (N GPUs, N * SHARE_UNITS of share) it starts
at most k such jobs per GPU. For k <= MAX_JOBS_PER_GPU the flooring loses nothing: k jobs fit, k + 1
do not.

Snakemake's resources are only counters: it never says which GPU a job should use. Each job
therefore claims its GPU itself, with `flock` on files in a lock folder, held for the life of the
process (the kernel releases them when the process ends, killed or not):
  - a job of whole GPUs takes `gpu-<id>.lock` exclusively, for each of its g GPUs, all at once or
    none (two multi-GPU jobs can never deadlock on half a claim each);
  - a job sharing a GPU takes `gpu-<id>.lock` shared, plus one of that GPU's k seats,
    `gpu-<id>.seat<j>.lock` exclusively: up to k such jobs run on the GPU together, and a job that
    wants the whole GPU waits until they are done. Jobs fill the lowest-numbered GPU first.

The lock is named after the physical GPU: entry i of CUDA_VISIBLE_DEVICES when that is set, else i.
Inside a Slurm job the allocation already decides which GPUs the job owns, and with cgroup device
constraints every job sees its own GPUs numbered from 0: the lock folder is then private to the
job (`slurm-<job id>` below it), so two jobs on one node never wait on each other, while the jobs
of one group allocation still share their GPU seat by seat.

Where CUDA_VISIBLE_DEVICES names GPUs but torch finds no CUDA (a Slurm node with fake GPUs, a test),
the claims are made all the same and the job trains on the CPU: the slots stand in for GPUs.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import tempfile
import time
from pathlib import Path

SHARE_UNITS = 10_000  # one whole GPU in the units of the `gpu_share` resource
MAX_JOBS_PER_GPU = 64  # up to here, SHARE_UNITS // k fits exactly k jobs on a GPU

_HELD: dict[int, list[int]] = {}  # slot -> open file descriptors holding its locks, in this process
_CLAIM: dict = {}  # what this process claimed, for metrics.json


def share_of(gpus: int, jobs_per_gpu: int = 1) -> int:
    """The `gpu_share` of a job of `gpus` whole GPUs, or of one of `jobs_per_gpu` jobs sharing one GPU."""
    if gpus < 0 or not 1 <= jobs_per_gpu <= MAX_JOBS_PER_GPU:
        raise ValueError(f"gpus must be >= 0 and jobs_per_gpu in 1..{MAX_JOBS_PER_GPU}, got {gpus}, {jobs_per_gpu}")
    if jobs_per_gpu > 1:
        if gpus != 1:
            raise ValueError(f"jobs_per_gpu {jobs_per_gpu} shares one GPU among jobs; it needs gpu: 1, got {gpus}")
        return SHARE_UNITS // jobs_per_gpu
    return gpus * SHARE_UNITS


def split_share(share: int) -> tuple[int, int]:
    """`gpu_share` -> (GPUs, seats per GPU): (g, 1) for g whole GPUs, (1, k) for a 1/k share, (0, 0)."""
    if share < 0:
        raise ValueError(f"gpu_share must be >= 0, got {share}")
    if share == 0:
        return 0, 0
    if share >= SHARE_UNITS:
        return share // SHARE_UNITS, 1
    return 1, SHARE_UNITS // share


def lock_dir() -> Path:
    """$LEANER_GPU_LOCK_DIR, else a per-user folder in the system temp dir (one machine's GPUs);
    inside a Slurm job, a folder of that job's own below it."""
    path = Path(os.environ.get("LEANER_GPU_LOCK_DIR") or Path(tempfile.gettempdir()) / f"leaner-gpu-{os.getuid()}")
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        path = path / f"slurm-{re.sub(r'[^A-Za-z0-9_.-]', '_', job)}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def visible_ids(n_slots: int | None = None) -> list[str]:
    """The physical id of each visible GPU: CUDA_VISIBLE_DEVICES's entries, else 0..n_slots-1."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [v.strip() for v in visible.split(",") if v.strip()]
    return [str(i) for i in range(n_slots or 0)]


def _lock_file(directory: Path, slot: int, n_slots: int, seat: int | None = None) -> Path:
    ids = visible_ids(n_slots)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", ids[slot] if slot < len(ids) else str(slot))
    return directory / (f"gpu-{name}.lock" if seat is None else f"gpu-{name}.seat{seat}.lock")


def _try_lock(path: Path, shared: bool = False) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    if not shared:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _take_seat(directory: Path, slot: int, n_slots: int, seats: int) -> tuple[list[int], int] | None:
    """The GPU shared (its lock in shared mode) plus one free seat of `seats`, or None."""
    gpu = _try_lock(_lock_file(directory, slot, n_slots), shared=True)
    if gpu is None:
        return None
    for seat in range(seats):
        fd = _try_lock(_lock_file(directory, slot, n_slots, seat))
        if fd is not None:
            return [gpu, fd], seat
    _unlock([gpu])
    return None


def _unlock(fds: list[int]) -> None:
    for fd in reversed(fds):
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def claim_slots(count: int, n_slots: int, directory: str | os.PathLike | None = None, timeout_s: float = 600.0,
                poll_s: float = 0.2, seats: int = 1) -> list[int]:
    """Claim `count` GPUs of `n_slots`, all at once or none, and hold them until the process ends
    (or `release`); returns their slot numbers. With `seats` k > 1, claim one of the k seats of one
    GPU instead (count must be 1). Slots this process already holds count first.

    Raises TimeoutError if not enough come free within `timeout_s` (more GPU jobs than GPUs: run
    Snakemake with --resources gpu=<number of GPUs>)."""
    if n_slots < 1:
        raise ValueError(f"n_slots must be >= 1, got {n_slots}")
    if not 1 <= count <= n_slots:
        raise ValueError(f"cannot claim {count} GPU(s): this machine shows {n_slots}")
    if seats > 1 and count != 1:
        raise ValueError(f"a GPU shared by {seats} jobs is claimed one at a time, not {count}")
    directory = Path(directory) if directory is not None else lock_dir()
    directory.mkdir(parents=True, exist_ok=True)
    start, said = time.monotonic(), False
    while True:
        got = sorted(_HELD)[:count]
        new: list[int] = []
        for slot in range(n_slots):
            if len(got) + len(new) == count:
                break
            if slot in _HELD:
                continue
            if seats > 1:
                taken = _take_seat(directory, slot, n_slots, seats)
                if taken is not None:
                    _HELD[slot] = taken[0]
                    _CLAIM.update(seat=taken[1], seats=seats)
                    new.append(slot)
            else:
                fd = _try_lock(_lock_file(directory, slot, n_slots))
                if fd is not None:
                    _HELD[slot] = [fd]
                    new.append(slot)
        if len(got) + len(new) == count:
            slots = sorted(got + new)
            _CLAIM.update(gpus=[visible_ids(n_slots)[s] for s in slots], lock_dir=str(directory),
                          at_unix=time.time())
            return slots
        for slot in new:  # not enough free: give back what this round took, wait, try again
            release(slot)
        if time.monotonic() > start + timeout_s:
            what = f"a seat (of {seats}) on one" if seats > 1 else f"{count}"
            raise TimeoutError(f"{what} of {n_slots} GPU(s) in {directory} did not come free within "
                               f"{timeout_s:.0f} s; run at most as many GPU jobs as GPUs "
                               f"(snakemake --resources gpu={n_slots})")
        if not said and time.monotonic() > start + 5:
            print(f"waiting for {count} of {n_slots} GPU(s) to come free ({directory})", file=sys.stderr, flush=True)
            said = True
        time.sleep(poll_s)


def claim_slot(n_slots: int, directory: str | os.PathLike | None = None, timeout_s: float = 600.0,
               poll_s: float = 0.2, seats: int = 1) -> int:
    """One GPU, or one seat of one (see `claim_slots`)."""
    return claim_slots(1, n_slots, directory, timeout_s, poll_s, seats)[0]


def release(slot: int) -> None:
    fds = _HELD.pop(slot, None)
    if fds:
        _unlock(fds)
    if not _HELD:
        _CLAIM.clear()


def claimed() -> dict:
    """What this process holds: {'gpus': [physical ids], 'seat': j, 'seats': k, 'lock_dir': ...}."""
    return dict(_CLAIM)


def _forced(requested: str, source: str, local_rank: int | None):
    import torch

    try:
        device = torch.device(requested)
    except RuntimeError:
        raise ValueError(f"{source}={requested!r} is not a device (allowed: cpu, cuda, cuda:N)") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"{source}={requested!r}: allowed devices are cpu, cuda, cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"{source}={requested!r} asks for CUDA, but this machine has no CUDA device "
                               f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'}); "
                               f"allowed here: cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(f"{source}={requested!r}: this machine shows {torch.cuda.device_count()} "
                               f"CUDA device(s), cuda:0..cuda:{torch.cuda.device_count() - 1}")
        if device.index is None:
            device = torch.device("cuda", local_rank or 0)
    return device


def pick_device(requested: str | None = None, gpu_share: int | None = None, local_rank: int | None = None,
                log=None):
    """The device of this job.

    `requested` ('cpu', 'cuda', 'cuda:1'), else $LEANER_DEVICE, forces it. Otherwise `gpu_share`
    decides (what the job's rule declared; None, as for a hand-run command, means one GPU when CUDA
    is present): 0 is the CPU; above 0, the job claims its GPU or its seat on one (see the module
    docstring) and runs there, or on the CPU where torch has no CUDA. A worker of a multi-process
    run (`local_rank`) uses GPU `local_rank`: its launcher claimed the GPUs.

    A CUDA device is made the current one before it is returned (before anything else touches
    CUDA): what takes "the current device", such as DataLoader's pin-memory thread or the object
    collectives of torch.distributed, then uses this job's GPU, not GPU 0."""
    device = _pick(requested, gpu_share, local_rank, log or (lambda msg: print(msg, file=sys.stderr, flush=True)))
    if device.type == "cuda":
        import torch

        torch.cuda.set_device(device)
    return device


def _pick(requested: str | None, gpu_share: int | None, local_rank: int | None, say):
    import torch

    if requested:
        return _forced(requested, "--device", local_rank)
    if os.environ.get("LEANER_DEVICE"):
        return _forced(os.environ["LEANER_DEVICE"], "LEANER_DEVICE", local_rank)
    cuda = torch.cuda.is_available()
    if local_rank is not None:
        if not cuda or gpu_share == 0:
            return torch.device("cpu")
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"worker LOCAL_RANK={local_rank} has no GPU of its own: this machine shows "
                               f"{torch.cuda.device_count()} (run at most that many processes)")
        return torch.device("cuda", local_rank)
    if gpu_share is None:
        gpu_share = SHARE_UNITS if cuda else 0
    gpus, seats = split_share(gpu_share)
    if gpus == 0:
        return torch.device("cpu")
    ids = visible_ids(torch.cuda.device_count() if cuda else 0)
    if not ids:
        say(f"asked for {gpus} GPU(s), but this machine shows none: training on the CPU")
        return torch.device("cpu")
    if gpus > len(ids):
        raise ValueError(f"this job asks for {gpus} GPU(s), but this machine shows {len(ids)} "
                         f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    slots = claim_slots(gpus, len(ids), seats=seats)
    claim = claimed()
    where = f"GPU {','.join(claim['gpus'])}" + (f", seat {claim['seat']} of {seats}" if seats > 1 else "")
    if not cuda:
        say(f"claimed {where} ({claim['lock_dir']}); torch has no CUDA here: training on the CPU")
        return torch.device("cpu")
    say(f"claimed {where} ({claim['lock_dir']})")
    return torch.device("cuda", slots[0])
