"""How the training step runs on its device, without waiting on it.

The loop (train.py) asks three things of a step, and none of them needs the host to wait for the
device: the logged loss and the divergence stop (train.LossMeter: sums on the device, read at
syncs, every `recipe.sync_every` steps: `sync_interval`), and launch overhead: for small models
the step is a few hundred tiny kernels, and the CPU cannot launch them as fast as the GPU runs
them. `GraphedStep` captures the whole step (forward, backward, clipping, AdamW, the meter) as one
CUDA graph and replays it; `torch.compile`'s modes (`recipe.compile`, `compile_mode`) are the
alternative. Here too what the step computes in (`set_precision`, `autocast_for`).

On the CPU every op runs when it is called, a sync costs nothing, and `sync_every` defaults to 1:
a CPU run is the same, bit for bit, as one that read the loss after every step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from ..schema import Recipe


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
            # thread_local: what another thread does meanwhile (a batch read ahead on its own stream:
            # compute/side_stream.py) is not this capture's, and may sync or allocate
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.step_fn(self.static, self.step_t)
        else:
            for dst, src in zip(self.static, batch):
                if dst.shape != src.shape:
                    raise ValueError(f"recipe.cuda_graph needs every batch in one shape: got {tuple(src.shape)}"
                                     f" after {tuple(dst.shape)}")
                dst.copy_(src, non_blocking=True)
            self.step_t.fill_(step)
        self.graph.replay()
