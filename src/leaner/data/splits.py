"""How a task reads a prepared dataset: splits held in memory or read through a DataLoader.

Batch order is a pure function of (seed, epoch), so a resumed run draws exactly the batches an
uninterrupted run would have drawn, without storing a sampler in the checkpoint.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compute.distributed import shard, shard_bounds

# What a data path reports it worked around (Task.take_data_events), by file name.
CPU_DECODED = "decoded on the CPU"  # a JPEG the device decoder rejected
SKIPPED = "unreadable, skipped"  # a file nothing reads, left out of its batch


def worker_count(value: int | str, cores: int | None = None, local_world: int | None = None) -> int:
    """recipe.num_workers as a number: as given, or for "auto" the cores this process may use (its
    CPU affinity: what Slurm or taskset gave the job) shared by the job's processes on this node
    (torchrun's LOCAL_WORLD_SIZE), less one each for the training process itself."""
    if value != "auto":
        return int(value)
    cores = cores or len(os.sched_getaffinity(0))
    local_world = local_world or int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(0, cores // local_world - 1)


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The training permutation of epoch `epoch` for run seed `seed`."""
    return np.random.default_rng([seed, epoch, 0x5EED]).permutation(n)


def repeated_order(n: int, seed: int, epoch: int, repeats: int, batch_size: int, world: int) -> np.ndarray:
    """The training order of an epoch under repeated augmentation, as timm's RepeatAugSampler
    draws it: the epoch's permutation with each index repeated `repeats` times, cut to n samples,
    dealt to the processes in turn (process r takes every world-th sample from the r-th); laid out
    as global batches whose contiguous shares (distributed.shard) are each process's next samples."""
    dealt = np.repeat(epoch_order(n, seed, epoch), repeats)[:n]
    streams, taken = [dealt[r::world] for r in range(world)], [0] * world
    order = []
    for start in range(0, n, batch_size):
        size = min(batch_size, n - start)
        for r in range(world):
            lo, hi = shard_bounds(size, r, world)
            order.append(streams[r][taken[r]:taken[r] + hi - lo])
            taken[r] += hi - lo
    return np.concatenate(order)


def batch_indices(n: int, batch_size: int, seed: int, epoch: int, rank: int = 0, world: int = 1,
                  repeats: int = 1) -> list[np.ndarray]:
    """The sample indices of each batch of `epoch`; with `world` processes, rank `rank`'s share
    of each global batch (see distributed.shard); `repeats` > 1: repeated augmentation (repeated_order)."""
    order = epoch_order(n, seed, epoch) if repeats == 1 else repeated_order(n, seed, epoch, repeats, batch_size, world)
    return [shard(order[i:i + batch_size], rank, world) for i in range(0, n, batch_size)]


class InMemorySplit:
    """A split held as tensors: batches are index lookups, no loader processes."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def labels(self):
        return self.y.cpu().numpy()

    def to(self, device) -> InMemorySplit:
        """Hold the split on `device` (a GPU: batches are gathered there, no copy per step)."""
        self.x, self.y = self.x.to(device), self.y.to(device)
        return self

    def steps_per_epoch(self, batch_size: int) -> int:
        return math.ceil(len(self) / batch_size)

    def train_batches(self, batch_size: int, seed: int, epoch: int, skip: int = 0, rank: int = 0,
                      world: int = 1, repeats: int = 1) -> Iterator[tuple]:
        import torch

        for idx in batch_indices(len(self), batch_size, seed, epoch, rank, world, repeats)[skip:]:
            idx_t = torch.from_numpy(idx).to(self.x.device, non_blocking=True)
            yield self.x[idx_t], self.y[idx_t]

    def eval_batches(self, batch_size: int, limit: int | None = None,
                     part: tuple[int, int] = (0, 1)) -> Iterator[tuple]:
        """The evaluation batches in order; with part (rank, world) batches rank, rank + world, ..."""
        n = len(self) if limit is None else min(limit, len(self))
        for i in range(part[0] * batch_size, n, part[1] * batch_size):
            yield self.x[i:min(i + batch_size, n)], self.y[i:min(i + batch_size, n)]


class _EpochBatches:
    """The batch sampler of a DataLoader kept across epochs: the batches of the pass about to start."""

    def __init__(self):
        self.batches: list[list[int]] = []

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class LoaderSplit:
    """A split read through a torch DataLoader (decoding and augmentation in worker processes).
    `persistent`: one DataLoader whose workers live across epochs (the training split; the
    evaluation split's, used every few epochs, start when needed and leave their memory)."""

    def __init__(self, dataset, num_workers: int = 0, pin_memory: bool = False, collate=None,
                 persistent: bool = False):
        self.dataset, self.num_workers, self.pin_memory = dataset, num_workers, pin_memory
        self.collate = collate  # None: torch's default (stack tensors)
        self.persistent = persistent and num_workers > 0
        self.sampler, self.loader = _EpochBatches(), None
        self.skipped: list[str] = []  # files left out of their batches since take_events

    def __len__(self) -> int:
        return len(self.dataset)

    def steps_per_epoch(self, batch_size: int) -> int:
        return math.ceil(len(self) / batch_size)

    def labels(self):
        """Every label of the split, read from its label column alone (no image is decoded)."""
        return self.dataset.labels()

    def _loader(self, batches: list) -> Iterator[tuple]:
        """The batches through a DataLoader; a sample labelled below 0 (a file its worker could not
        read, images.UNREADABLE) is left out of its batch and its name kept for take_events."""
        import torch
        from torch.utils.data import DataLoader

        if self.loader is None or not self.persistent:
            self.sampler = _EpochBatches()
            self.loader = DataLoader(self.dataset, batch_sampler=self.sampler, num_workers=self.num_workers,
                                     pin_memory=self.pin_memory, persistent_workers=self.persistent,
                                     collate_fn=self.collate)
        self.sampler.batches = batches
        for indices, (x, y) in zip(batches, self.loader):
            if torch.is_tensor(x) and (y < 0).any():
                bad = y < 0
                self.skipped += [self.dataset.name_of(indices[j]) for j in bad.nonzero().flatten().tolist()]
                if bad.all():
                    raise RuntimeError(f"no image of this batch can be read: {', '.join(self.skipped[-len(y):])}")
                x, y = x[~bad], y[~bad]
            yield x, y

    def take_events(self) -> dict[str, list[str]]:
        skipped, self.skipped = self.skipped, []
        return {SKIPPED: skipped}

    def train_batches(self, batch_size: int, seed: int, epoch: int, skip: int = 0, rank: int = 0,
                      world: int = 1, repeats: int = 1) -> Iterator[tuple]:
        batches = [b.tolist() for b in batch_indices(len(self), batch_size, seed, epoch, rank, world, repeats)[skip:]]
        yield from self._loader(batches)

    def eval_batches(self, batch_size: int, limit: int | None = None,
                     part: tuple[int, int] = (0, 1)) -> Iterator[tuple]:
        """The evaluation batches in order; with part (rank, world) batches rank, rank + world, ...
        (only those are loaded)."""
        n = len(self) if limit is None else min(limit, len(self))
        starts = range(part[0] * batch_size, n, part[1] * batch_size)
        yield from self._loader([list(range(i, min(i + batch_size, n))) for i in starts])


@dataclass
class Splits:
    """What a prepared dataset gives a task: a train split, an eval split, and its facts.
    `finish`, when set, turns a loaded batch into model input and labels on the training device
    (`finish.train(x, y, device)`, `finish.eval(x, y, device)`); otherwise batches are ready tensors."""

    train: Any
    eval: Any
    meta: dict
    finish: Any = None
