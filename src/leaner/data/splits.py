"""How a task reads a prepared dataset: splits held in memory or read through a DataLoader.

Batch order is a pure function of (seed, epoch), so a resumed run draws exactly the batches an
uninterrupted run would have drawn, without storing a sampler in the checkpoint.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compute.distributed import shard, shard_bounds

LOADER_SEED = 0x10AD  # the loaders' own generator (their workers' base seed): nothing of a run's results draws on it

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


def mix_seeds(prefix: tuple[int, ...], last) -> np.ndarray:
    """63-bit seeds that are a pure function of (*prefix, last) for each value of `last` (splitmix64
    over the parts, in numpy's wrapping uint64 arithmetic): the seed of one sample's or one batch's
    augmentation from where it sits in the run (seed, epoch, rank, batch, position), the same
    whenever and wherever it is computed (ahead of the step, in a worker, after a resume)."""
    with np.errstate(over="ignore"):
        x = np.full(np.shape(last), 0x9E3779B97F4A7C15, dtype=np.uint64)
        for part in (*(np.uint64(int(p) & (2**64 - 1)) for p in prefix), np.asarray(last, dtype=np.uint64)):
            x = (x ^ part) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(31))) * np.uint64(0x94D049BB133111EB)
            x ^= x >> np.uint64(29)
        return (x >> np.uint64(1)).astype(np.int64)


def mix_seed(*parts: int) -> int:
    """mix_seeds for one set of parts."""
    return int(mix_seeds(tuple(parts[:-1]), parts[-1]))


class EpochStream:
    """The batches of consecutive epochs drawn from one endless iterator, so that the work ahead of
    the consumer (a loader's prefetch, a device's read-ahead) runs on across an epoch's end instead
    of draining there. `epoch(e, skip)` yields epoch e's batches from `skip` on: it continues the
    iterator where it stands at exactly (e, skip), else closes it and starts a new one there with
    `start(e, skip)` (which must yield epoch e from skip, then every batch of e + 1, e + 2, ...);
    `length(e)` is the number of batches of epoch e. What an epoch yields is a function of
    (e, skip) alone, so a resumed run reads what an uninterrupted one did."""

    def __init__(self, start, length):
        self.start, self.length = start, length
        self.it, self.at = None, None  # the iterator, and the (epoch, batch) it yields next

    def epoch(self, epoch: int, skip: int = 0) -> Iterator:
        if self.it is None or self.at != (epoch, skip):
            self.close()
            self.it, self.at = self.start(epoch, skip), (epoch, skip)
        n = self.length(epoch)
        for k in range(skip, n):
            try:
                item = next(self.it)
            except BaseException:  # a stream that failed (or ended) is started again when next asked
                self.close()
                raise
            self.at = (epoch, k + 1) if k + 1 < n else (epoch + 1, 0)  # taken from the stream: consumed
            yield item

    def close(self) -> None:
        it, self.it, self.at = self.it, None, None
        if it is not None and hasattr(it, "close"):
            it.close()


class _EndlessBatches:
    """The batch sampler of the training DataLoader: epoch `epoch`'s batches from `skip` on, then
    every epoch after it, without end; each batch is its sample indices, or (index, seed) pairs for
    a dataset that seeds each sample's augmentation (`seeded`: the seed from the sample's place in
    the run, mix_seed(seed, epoch, rank, batch, position))."""

    def __init__(self, plan, epoch: int, skip: int, seeded: bool, seed: int, rank: int):
        self.plan, self.epoch, self.skip, self.seeded, self.seed, self.rank = plan, epoch, skip, seeded, seed, rank

    def __iter__(self):
        epoch, skip = self.epoch, self.skip
        while True:
            for k, batch in enumerate(self.plan(epoch)[skip:], start=skip):
                if self.seeded:
                    seeds = mix_seeds((self.seed, epoch, self.rank, k), np.arange(len(batch)))
                    yield list(zip(batch.tolist(), seeds.tolist()))
                else:
                    yield batch.tolist()
            epoch, skip = epoch + 1, 0


class LoaderSplit:
    """A split read through a torch DataLoader (decoding and augmentation in worker processes).
    `persistent`: the training split's loader is one endless stream of batches over the epochs
    (EpochStream over _EndlessBatches), its workers and their prefetch running on across each
    epoch's end; the evaluation split's (used every few epochs) starts its workers when needed and
    leaves their memory. A dataset with `seeded = True` gets (index, seed) for each sample."""

    def __init__(self, dataset, num_workers: int = 0, pin_memory: bool = False, collate=None,
                 persistent: bool = False):
        self.dataset, self.num_workers, self.pin_memory = dataset, num_workers, pin_memory
        self.collate = collate  # None: torch's default (stack tensors and arrays)
        self.persistent = persistent
        self.stream: EpochStream | None = None
        self.stream_key: tuple | None = None
        self.skipped: list[str] = []  # files left out of their batches since take_events
        self._skipped_lock = threading.Lock()  # batches may be loaded on a read-ahead thread

    def __len__(self) -> int:
        return len(self.dataset)

    def steps_per_epoch(self, batch_size: int) -> int:
        return math.ceil(len(self) / batch_size)

    def labels(self):
        """Every label of the split, read from its label column alone (no image is decoded)."""
        return self.dataset.labels()

    def _loader(self, batch_sampler) -> Iterator[tuple]:
        """The batches through a DataLoader; a sample labelled below 0 (a file its worker could not
        read, images.UNREADABLE) is left out of its batch and its name kept for take_events."""
        import torch
        from torch.utils.data import DataLoader

        sent = _Recorded(batch_sampler)
        # a generator of its own: the workers' base seed is not drawn from the training's generator
        # (a resumed run would draw it at another step); what is random in a sample has its own seed
        loader = DataLoader(self.dataset, batch_sampler=sent, num_workers=self.num_workers,
                            pin_memory=self.pin_memory, collate_fn=self.collate,
                            generator=torch.Generator().manual_seed(LOADER_SEED))
        for x, y in loader:
            indices = sent.taken.popleft()
            if torch.is_tensor(y) and (y < 0).any():
                bad = y < 0
                names = [self.dataset.name_of(_index(indices[j])) for j in bad.nonzero().flatten().tolist()]
                with self._skipped_lock:
                    self.skipped += names
                if bad.all():
                    raise RuntimeError(f"no image of this batch can be read: {', '.join(names)}")
                x, y = x[~bad], y[~bad]
            yield x, y

    def train_batches(self, batch_size: int, seed: int, epoch: int, skip: int = 0, rank: int = 0,
                      world: int = 1, repeats: int = 1) -> Iterator[tuple]:
        seeded = getattr(self.dataset, "seeded", False)

        def plan(e: int) -> list[np.ndarray]:
            return batch_indices(len(self), batch_size, seed, e, rank, world, repeats)

        if not self.persistent:
            yield from self._loader(_Listed(_EndlessBatches(plan, epoch, skip, seeded, seed, rank),
                                            len(plan(epoch)) - skip))
            return
        key = (batch_size, seed, rank, world, repeats)
        if self.stream is None or self.stream_key != key:
            if self.stream is not None:
                self.stream.close()
            self.stream_key = key
            self.stream = EpochStream(
                lambda e, s: self._loader(_EndlessBatches(plan, e, s, seeded, seed, rank)),
                lambda e: math.ceil(len(self) / batch_size))
        yield from self.stream.epoch(epoch, skip)

    def eval_batches(self, batch_size: int, limit: int | None = None,
                     part: tuple[int, int] = (0, 1)) -> Iterator[tuple]:
        """The evaluation batches in order; with part (rank, world) batches rank, rank + world, ...
        (only those are loaded)."""
        n = len(self) if limit is None else min(limit, len(self))
        starts = range(part[0] * batch_size, n, part[1] * batch_size)
        yield from self._loader([list(range(i, min(i + batch_size, n))) for i in starts])

    def take_events(self) -> dict[str, list[str]]:
        with self._skipped_lock:
            skipped, self.skipped = self.skipped, []
        return {SKIPPED: skipped}

    def close(self) -> None:
        """Stop the training stream: its loader's workers end."""
        if self.stream is not None:
            self.stream.close()
            self.stream = None


class _Recorded:
    """A batch sampler that keeps the batches it handed to the DataLoader until they come back (in
    order): the indices of a loaded batch, to name its unreadable files."""

    def __init__(self, sampler):
        import collections

        self.sampler, self.taken = sampler, collections.deque()

    def __iter__(self):
        for batch in self.sampler:
            self.taken.append(batch)
            yield batch


class _Listed:
    """The first `count` batches of an endless batch sampler, as a finite one."""

    def __init__(self, endless, count: int):
        self.endless, self.count = endless, count

    def __iter__(self):
        import itertools

        return itertools.islice(iter(self.endless), self.count)


def _index(item) -> int:
    """A sample's index in its dataset, from what the batch sampler gave: the index or (index, seed)."""
    return item[0] if isinstance(item, tuple) else item


@dataclass
class Splits:
    """What a prepared dataset gives a task: a train split, an eval split, and its facts.
    `finish`, when set, turns a loaded batch into model input and labels on the training device
    (`finish.train(x, y, device, seed)`, every random draw from `seed`; `finish.eval(x, y,
    device)`); otherwise batches are ready tensors."""

    train: Any
    eval: Any
    meta: dict
    finish: Any = None
