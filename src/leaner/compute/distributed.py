"""One variant on several processes: torch DistributedDataParallel, launched by `torchrun`.

A study whose `resources.gpu` is N > 1 trains each variant on N processes of one machine (one per
GPU, NCCL; or N CPU processes with gloo where there is no GPU). `leaner train --nproc N` is the
launcher: it claims N GPU slots (see devices.py), narrows CUDA_VISIBLE_DEVICES to them and runs
`torchrun --standalone` on itself; each worker then sees WORLD_SIZE/RANK/LOCAL_RANK.

What makes N processes equal to one process with the same global batch:
  - every rank builds the model from the same seed (and DDP broadcasts rank 0's weights);
  - every rank draws the same global batch (a function of seed and epoch) and keeps its own
    contiguous share of it (`shard`), so the union over ranks is the one-process batch;
  - each rank's mean loss is weighted by its share of the global batch before backward, so DDP's
    gradient average is the global-batch mean even when the shares differ by one;
  - the loss that is logged is the all-reduced global mean; each rank evaluates its share of the
    evaluation batches and all add every batch's sums in the global order (tasks/base.py
    `evaluation_sums`): one process's metrics, exactly; checkpoints and outputs are rank 0's, and
    the checkpoint holds every rank's RNG state.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """[start, stop) of rank `rank`'s contiguous share of n items (shares differ by at most one)."""
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def shard(batch, rank: int, world: int):
    """Rank `rank`'s share of a batch: a tensor/array, or a tuple/list of them sliced alike."""
    if world == 1:
        return batch
    if isinstance(batch, (tuple, list)):
        return type(batch)(shard(b, rank, world) for b in batch)
    start, stop = shard_bounds(len(batch), rank, world)
    return batch[start:stop]


def check_split(n: int, batch_size: int, world: int) -> None:
    """Every batch of an epoch over n samples must give each of `world` ranks at least one sample."""
    last = n % batch_size or batch_size
    if world > 1 and min(batch_size, last) < world:
        raise ValueError(f"batch_size {batch_size} over {n} samples leaves a batch of {min(batch_size, last)}, "
                         f"fewer than the {world} processes: choose a batch size whose last batch holds at "
                         f"least {world} samples")


@dataclass
class Context:
    """Where this process stands in a (possibly one-process) run, and the device it trains on
    (under NCCL the collectives' device: this worker's own GPU)."""

    device: torch.device | None = None
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    def all_sum(self, values: Sequence[float]) -> list[float]:
        """Sum a few numbers over ranks (one small collective)."""
        import torch

        if not self.active:
            return [float(v) for v in values]
        import torch.distributed as dist

        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def device_sum(self, value: float):
        """`value` summed over ranks, as a tensor on this process's device: no host sync (NCCL
        queues the collective on the stream)."""
        import torch

        t = torch.full((), float(value), dtype=torch.float32, device=self.device)
        if self.active:
            import torch.distributed as dist

            dist.all_reduce(t)
        return t

    def from_main(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.active:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank (under NCCL through the current CUDA
        device: this worker's own, see `init`)."""
        if not self.active:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def wrap(self, model):
        """The module the training step calls: DDP-wrapped when there are several ranks."""
        if not self.active:
            return model
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[self.device.index] if self.backend == "nccl" else None)

    def close(self) -> None:
        if self.active:
            import torch.distributed as dist

            dist.barrier(device_ids=[self.device.index] if self.backend == "nccl" else None)
            dist.destroy_process_group()


def launched_by_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def init(device: torch.device, timeout_min: float = 36.0) -> Context:
    """Join the process group torchrun set up (NCCL on CUDA, gloo on CPU); a one-process context
    in a plain run. `timeout_min` bounds a collective's wait (training/stall.py sets it beyond what
    its stall watch allows a long phase, such as rank 0 evaluating alone while the others wait).

    Under NCCL, `device` must be this worker's GPU, cuda:LOCAL_RANK, already the current device
    (devices.pick_device makes it so): the group is bound to it (`device_id`), and the object
    collectives, which take the current device, use it too. Eight ranks on GPU 0 would make NCCL
    fail or hang at the first checkpoint."""
    if not launched_by_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
        return Context(device)
    import torch.distributed as dist

    local_rank, nccl = int(os.environ["LOCAL_RANK"]), device.type == "cuda"
    if nccl and device.index != local_rank:
        raise ValueError(f"worker LOCAL_RANK={local_rank} of {os.environ['WORLD_SIZE']} trains on its own GPU, "
                         f"cuda:{local_rank}, not {device}: force --device cuda, not cuda:N")
    dist.init_process_group("nccl" if nccl else "gloo", timeout=datetime.timedelta(minutes=timeout_min),
                            device_id=device if nccl else None)
    return Context(device, rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local_rank,
                   backend="nccl" if nccl else "gloo")


def launch(argv: Sequence[str], nproc: int, device: str | None, gpu_share: int | None = None) -> int:
    """Run `python -m leaner <argv>` on `nproc` local processes under torchrun; returns its exit code.

    Unless a device is forced, a job that asked for GPUs (`gpu_share`, see devices.py; None: CUDA
    when present) first claims `nproc` of them (held by this process until training ends) and shows
    the workers only those.

    A stop signal (SIGTERM, SIGINT, SIGUSR1) is passed to the workers by this process, not by
    torchrun: torchrun, told to stop, gives its workers 30 s before it kills them, less than a
    large state's save takes (vit_imagenet's 7.3 GB: ~38 s), so it ignores them (`_torchrun_child`)
    and handles only SIGHUP and SIGQUIT. The workers save and exit on their own, together
    (training/train.py waits for the save on every rank), and torchrun then ends."""
    env = dict(os.environ)
    if device is None and not env.get("LEANER_DEVICE") and gpu_share != 0:
        import torch

        from .devices import claim_slots, visible_ids

        ids = visible_ids(torch.cuda.device_count() if torch.cuda.is_available() else 0)
        if ids:
            slots = claim_slots(nproc, len(ids))
            env["CUDA_VISIBLE_DEVICES"] = ",".join(ids[s] for s in slots)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           f"--nproc-per-node={nproc}", f"--signals-to-handle={TORCHRUN_HANDLES}", "-m", "leaner", "--", *argv]
    print("launching: " + " ".join(cmd), file=sys.stderr, flush=True)
    child = subprocess.Popen(cmd, env=env, preexec_fn=_torchrun_child)

    def forward(signum, frame) -> None:
        if signum == signal.SIGHUP:
            child.send_signal(signum)
            return
        for worker in _workers(child.pid):
            try:
                os.kill(worker, signum)
            except ProcessLookupError:
                pass

    previous = {sig: signal.signal(sig, forward) for sig in STOPS + (signal.SIGHUP,)}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)  # the stop signals (training/stopping.py)
TORCHRUN_HANDLES = "SIGHUP,SIGQUIT"  # what torchrun itself acts on (it stops its workers)


def _workers(torchrun: int) -> list[int]:
    """The worker processes torchrun `torchrun` started (its children)."""
    import psutil

    try:
        return [p.pid for p in psutil.Process(torchrun).children()]
    except psutil.Error:
        return []


def _torchrun_child() -> None:
    """In the torchrun child: the stop signals ignored (a scheduler sends them to every process of
    the job; the workers get them from it, or from the launcher), and SIGHUP (which torchrun
    handles by stopping its workers) if the launcher dies, even by SIGKILL (Linux), so no orphaned
    workers go on writing into a folder a re-run is about to use."""
    for sig in STOPS:
        signal.signal(sig, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGHUP)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def restore_stop_signals() -> None:
    """In a worker: the stop signals back to their defaults (torchrun's ignoring them is inherited
    across exec) until the training loop handles them."""
    for sig in STOPS:
        signal.signal(sig, signal.SIG_DFL)
