"""One optimiser step, without waiting on the GPU.

The training loop (train.py) asks three things of a step, and none of them needs the host to wait
for the device:
  - the logged loss: `LossMeter` sums loss x samples on the device and brings the sums to the host
    only at a sync (every `recipe.sync_every` steps, at each epoch's end, before a checkpoint);
  - the divergence stop: the meter marks, on the device, the first step whose loss is not finite;
    from that step on, its `stopped` flag (the fused AdamW's `found_inf`) makes every optimiser
    step a no-op inside the kernel. The host learns of it at the next sync and ends the run as
    `diverged` at the first bad step, with the weights of that step: exactly what a check on every
    step gives, however late the check comes;
  - launch overhead: for small models the step is a few hundred tiny kernels, and the CPU cannot
    launch them as fast as the GPU runs them. `GraphedStep` captures the whole step (forward,
    backward, clipping, AdamW, the meter) as one CUDA graph and replays it; `torch.compile`'s
    modes (`recipe.compile`) are the alternative.

On the CPU every op runs when it is called, a sync costs nothing, and `sync_every` defaults to 1:
a CPU run is the same, bit for bit, as one that read the loss after every step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from ..schema import Recipe

NEVER = 2**62  # "no bad step yet"


def set_precision(device: torch.device, recipe: Recipe) -> dict:
    """Deterministic kernels on the CPU (always fp32); on a GPU the recipe's matmul precision
    (TF32 or full fp32). Returns what the run computes in, for metrics.json: bf16 autocast only on
    a GPU that supports it (a GPU without bf16 is refused, in one line, before training)."""
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)
        return {"precision": "fp32", "tf32": False}
    if recipe.precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"recipe.precision bf16: {torch.cuda.get_device_name(device)} does not support bf16 "
                         "(allowed here: precision fp32)")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(recipe.tf32)
    return {"precision": recipe.precision, "tf32": bool(recipe.tf32)}


def autocast_for(device: torch.device, precision: str = "bf16", graph_safe: bool = False):
    """bf16 autocast on CUDA for precision bf16; nothing otherwise (fp32: the CPU always, so CPU
    runs stay exact and deterministic). graph_safe: without autocast's weight-cast cache, which a
    CUDA graph capture must not use."""
    if device.type == "cuda" and precision == "bf16":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not graph_safe)
    return contextlib.nullcontext


def compile_mode(recipe: Recipe) -> str | None:
    """torch.compile's mode for recipe.compile: true is "default", false/null is no compile."""
    value = recipe.compile
    if value is True:
        return "default"
    return value or None


class LossMeter:
    """The epoch's training loss and the first non-finite loss, kept on the device.

    `add` is device ops only; `sync` (every rank calls it at the same steps) moves the sums since
    the last sync to the host, summed over ranks, and returns the first bad step or None. A loss
    counts only while the run has not stopped, so the epoch mean is that of the steps that trained.
    """

    def __init__(self, device: torch.device, ctx, total: float = 0.0, count: int = 0):
        self.ctx, self.total, self.count = ctx, total, count
        self.pending = torch.zeros(2, dtype=torch.float64, device=device)  # loss x n, n since the last sync
        self.first_bad = torch.full((), NEVER, dtype=torch.int64, device=device)
        self.stopped = torch.zeros((), dtype=torch.float32, device=device)  # the optimiser's found_inf

    def add(self, loss: torch.Tensor, n: int, step: torch.Tensor | int) -> None:
        loss = loss.detach()
        finite = torch.isfinite(loss)
        live = finite & (self.stopped == 0)
        self.pending[0] += torch.where(live, loss.double() * n, 0.0)
        self.pending[1] += live.double() * n
        self.first_bad.copy_(torch.minimum(self.first_bad, torch.where(finite, NEVER, step)))
        self.stopped.copy_(torch.maximum(self.stopped, (~finite).float()))
        if self.ctx.active:  # every rank skips the update once any rank saw a bad loss
            import torch.distributed as dist

            dist.all_reduce(self.stopped, op=dist.ReduceOp.MAX)

    def sync(self) -> int | None:
        """Fold the device sums into the host totals; the first bad step (all ranks agree) or None."""
        if self.ctx.active:
            import torch.distributed as dist

            dist.all_reduce(self.pending)
            dist.all_reduce(self.first_bad, op=dist.ReduceOp.MIN)
        loss_sum, count = self.pending.tolist()
        self.pending.zero_()
        self.total += loss_sum
        self.count += int(count)
        bad = int(self.first_bad)
        return None if bad == NEVER else bad

    @property
    def mean(self) -> float | None:
        """The epoch's mean loss up to the last sync (None before any)."""
        return self.total / self.count if self.count else None

    def end_epoch(self) -> float:
        """The epoch's mean loss (call after a sync); resets the totals."""
        mean = self.total / self.count if self.count else float("nan")
        self.total, self.count = 0.0, 0
        return mean


def sync_interval(recipe: Recipe, device: torch.device) -> int:
    """Steps between host syncs: recipe.sync_every, else 1 on the CPU and 50 on a GPU."""
    given = recipe.sync_every
    if given:
        return int(given)
    return 1 if device.type == "cpu" else 50


class GraphedStep:
    """The whole training step as one CUDA graph (recipe.cuda_graph), for models whose step is
    launch-bound. Needs every batch in the same shapes (a stream task) and one process.

    The graph reads the batch from static tensors (`run` copies each batch in), the learning rate
    from a tensor per parameter group and the step number from a device tensor, each set before a
    replay without a sync. Before capture a few real steps run eagerly on a side stream (CUDA's
    rule: the allocator and cuBLAS must be warm), so the optimiser state exists; they are steps of
    the run. `step_fn(batch, step)` is the eager step: it zeroes the gradients (set to None), so
    inside the capture, right after a zero_grad, that is a no-op and backward writes fresh ones.
    """

    WARMUP = 3

    def __init__(self, step_fn: Callable[[tuple, torch.Tensor], None], optimizer, device: torch.device):
        self.step_fn, self.optimizer, self.device = step_fn, optimizer, device
        for group in optimizer.param_groups:  # capturable AdamW reads lr from a device tensor
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
        self.graph = None
        self.static: tuple | None = None
        self.step_t = torch.zeros((), dtype=torch.int64, device=device)
        self.warm = 0

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"].fill_(lr)

    def run(self, batch: tuple, step: int) -> None:
        """One step on `batch` (device tensors); warm-up eagerly, then capture, then replay."""
        if self.graph is None and self.warm < self.WARMUP:
            self.step_t.fill_(step)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self.step_fn(batch, self.step_t)
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.warm += 1
            return
        if self.graph is None:
            self.static = tuple(t.to(self.device).clone() for t in batch)
            self.step_t.fill_(step)
            self.optimizer.zero_grad(set_to_none=True)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.step_fn(self.static, self.step_t)
        else:
            for dst, src in zip(self.static, batch):
                if dst.shape != src.shape:
                    raise ValueError(f"recipe.cuda_graph needs every batch in one shape: got {tuple(src.shape)}"
                                     f" after {tuple(dst.shape)}")
                dst.copy_(src, non_blocking=True)
            self.step_t.fill_(step)
        self.graph.replay()


def accumulate(batch, k: int, task, net, autocast, meter: LossMeter, step_now, ctx) -> None:
    """The gradient of one batch (this rank's share) from k micro-batches, one after the other:
    only one micro-batch's activations are alive at a time. Each micro-batch's mean loss is
    weighted by its share of the global batch's samples (DDP averages ranks): the batch's mean
    exactly where the loss is a mean over samples (ViT, P2, classification), and up to how
    masked tokens fall between micro-batches for the masked-LM loss. DDP reduces the gradients
    once, after the last micro-batch."""
    import contextlib

    from ..compute.distributed import shard

    samples = len(batch[0])
    if samples < k:
        raise ValueError(f"recipe.accumulate {k}: a batch of {samples} samples in this process cannot be cut into "
                         f"{k} micro-batches (allowed: accumulate <= batch_size / processes)")
    total = ctx.device_sum(samples) if ctx.active else samples
    for i in range(k):
        part = shard(batch, i, k)
        with autocast():
            loss, n_local = task.loss(net, part)
        meter.add(loss, n_local, step_now)
        hold = net.no_sync() if ctx.active and i < k - 1 else contextlib.nullcontext()
        with hold:
            (loss * (len(part[0]) * ctx.world / total)).backward()
