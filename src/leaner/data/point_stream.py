"""P2's nearest-point task (papers.md 2.1): a stream of point sets, fresh or replayed (the kind
that opens it: nearest_point.py).

Each sequence holds N points i.i.d. uniform on the unit sphere in R^d (Gaussian, normalised). The
target for point i is the point farthest from it, x_j with j = argmin_j <x_j, x_i> (the nearest
neighbour of -x_i; the nearest point to x_i in its own set is x_i itself).

Batch k is a pure function of (data seed, k), so a resumed run sees the batches an uninterrupted
run would have seen. P2 drew batches from 7 loader workers seeded data_seed + worker, so data seeds
s and s+1 share 6 of 7 streams; `streams: 7` keeps that structure (batch k comes from stream
data_seed + k mod 7), `streams: 1` makes every data seed independent.

Two regimes (`stream` in the dataset's settings). `fresh`: batch k as above for every k, so the
training MSE is the population risk. `replay`: P2's code as it ran (papers.md 2.1), with the
authors' own points: loader worker w (of `streams`, P2: 7) owns a CPU `torch.Generator` seeded
data_seed + w and draws each point set as `torch.randn((d, N))` normalised per point (a column),
a batch being `batch_size` consecutive sets of one worker and batch k coming from worker k mod 7
(its (k // 7)-th batch). The loader re-seeds every worker each epoch, so every epoch replays the
same steps_per_epoch batches (25,600 sequences at batch 256) and the reported MSE is a
training-set MSE. The stream keeps each worker's generator state at the start of each of its
batches (5 KB each), so batch k stays a pure function of (data seed, k) and a resumed run draws
it without replaying the run; it keeps the drawn batches themselves, on the training device, where
an epoch of them fits REPLAY_KEEP_BYTES (fig1's shape does). Either way the evaluation set holds
points no run trains on: under replay it is the fresh-point (population) MSE reported beside the
authors' metric.

Replicates (`replicates` in the recipe, papers.md 2.1). `paper`: as above, so data seeds s and s+1
share 6 of 7 streams (under replay, 85 of their 100 batches), and every run starts from the same
init seed: not independent replicates. `independent`: every stream and worker is seeded from the
data seed through numpy's SeedSequence under a spawn key of their own (no two data seeds share one,
and none is a paper stream), and the model's initialisation from the run's own seed (training/train.py).

On a GPU the fresh regime's batches are drawn there (`device`), from a CUDA generator seeded the
same way: still a pure function of (data seed, k), so resume stays exact, but CUDA's Philox
numbers are not the CPU's Mersenne Twister ones, so a GPU run sees other points than a CPU run of
the same seed (same distribution). The replay regime draws the authors' points on the CPU
wherever the run trains. metrics.json records where the points were drawn. The evaluation set is
always drawn on the CPU: every run, wherever it trained, is scored on the same points.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

EVAL_CHUNK = 512


def sample_sphere(batch: int, tokens: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    x = torch.randn(batch, tokens, dim, generator=generator, device=generator.device)
    return x / x.norm(dim=-1, keepdim=True)


def farthest_targets(x: torch.Tensor) -> torch.Tensor:
    """y_i = x_j with j = argmin_j <x_j, x_i>, for x of shape (B, N, d). On a GPU the inner
    products are taken in float64: TF32 matmuls (on for training) would pick a wrong point at
    near-ties."""
    products = x.double() if x.is_cuda else x
    j = torch.einsum("bid,bjd->bij", products, products).argmin(dim=-1)
    return torch.gather(x, 1, j[..., None].expand_as(x))


def _seed(*keys: int, spawn: tuple[int, ...] = ()) -> int:
    seq = np.random.SeedSequence([int(k) for k in keys], spawn_key=spawn)
    return int(seq.generate_state(1, dtype=np.uint64)[0])


# the SeedSequence spawn key of independent replicates' streams: (data seed, k) alone would be the
# key of P2's stream data_seed at position k, so an independent run would replay a paper run's batches
INDEPENDENT = (1,)


def _generator(*keys: int) -> torch.Generator:
    return torch.Generator().manual_seed(_seed(*keys))


# replay keeps an epoch's drawn batches (points and targets) on the training device up to this
# size: drawing one on the CPU costs 5-9 ms at d 64, N 16 (256 point sets, one thread, measured on
# this project's CPU machine), several times a fig1 step under a CUDA graph (0.8 ms at L1-H1-W1,
# results.md 6b); kept, an epoch costs that once. 256 MiB holds fig1's and
# the posn study's epochs (210 MB: 6 jobs on a GPU add 1.3 GB) but not figN's N >= 64 or fig_d's
# d >= 128, whose steps take longer than the draw, which overlaps them (no sync per step).
REPLAY_KEEP_BYTES = 256 * 2**20


def authors_point_set(dim: int, tokens: int, generator: torch.Generator) -> torch.Tensor:
    """One point set as P2's code draws it: (d, N) Gaussians, each point (column) normalised."""
    x = torch.randn((dim, tokens), generator=generator)
    return x / x.norm(dim=0)


class PointStream:
    """The training stream of one run and its fixed evaluation set."""

    def __init__(self, dim: int, tokens: int, batch_size: int, data_seed: int, streams: int = 7,
                 eval_samples: int = 4096, eval_seed: int = 12345, device: str | torch.device = "cpu",
                 replay: int | None = None, independent: bool = False):
        """replay: the number of batches every epoch replays (None: a fresh stream); independent:
        streams seeded from the data seed alone (no stream shared with another data seed)."""
        self.dim, self.tokens, self.batch_size = dim, tokens, batch_size
        self.data_seed, self.streams, self.replay = data_seed, streams, replay
        self.independent = independent
        self.eval_samples, self.eval_seed = eval_samples, eval_seed
        self.device = torch.device(device)
        self._train_gen = torch.Generator(self.device)  # re-seeded for every batch
        self._worker_gen = torch.Generator()  # replay: the authors' worker generators live on the CPU
        self._worker_states: dict[tuple[int, int], torch.Tensor] = {}  # (worker, its batch) -> state at its start
        # replay: the epoch's batches (points and targets, on the device) kept once drawn, where they fit
        epoch_bytes = 2 * 4 * (replay or 0) * batch_size * tokens * dim
        self._kept: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = (
            {} if replay is not None and epoch_bytes <= REPLAY_KEEP_BYTES else None)

    def batch(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training batch k, on the stream's device (seeding a CUDA generator needs no sync).
        Replayed batches that are kept are the same tensors every epoch: read them, never write."""
        if self.replay is not None:
            k %= self.replay
            if self._kept is not None and k in self._kept:
                return self._kept[k]
            x = self._authors_batch(k)  # targets found on the CPU too: a GPU run trains on a CPU run's pairs
            pair = (x.to(self.device, non_blocking=True), farthest_targets(x).to(self.device, non_blocking=True))
            if self._kept is not None:
                self._kept[k] = pair
            return pair
        if self.independent:
            self._train_gen.manual_seed(_seed(self.data_seed, k, spawn=INDEPENDENT))
        else:
            stream, position = self.data_seed + k % self.streams, k // self.streams
            self._train_gen.manual_seed(_seed(stream, position))
        x = sample_sphere(self.batch_size, self.tokens, self.dim, self._train_gen)
        return x, farthest_targets(x)

    def worker_seed(self, worker: int) -> int:
        """P2's worker seed, data_seed + worker; independent replicates: one no other data seed shares."""
        return _seed(self.data_seed, worker, spawn=INDEPENDENT) if self.independent else self.data_seed + worker

    def _authors_batch(self, k: int) -> torch.Tensor:
        """Batch k of an epoch of P2's loader: the (k // streams)-th batch of worker k mod streams,
        from the worker's generator state at that batch's start (drawn forward and kept once)."""
        worker, j = k % self.streams, k // self.streams
        start = max((i for (w, i) in self._worker_states if w == worker and i <= j), default=None)
        if start is None:
            self._worker_gen.manual_seed(self.worker_seed(worker))
            start = 0
        else:
            self._worker_gen.set_state(self._worker_states[(worker, start)])
        for i in range(start, j + 1):
            self._worker_states.setdefault((worker, i), self._worker_gen.get_state())
            sets = [authors_point_set(self.dim, self.tokens, self._worker_gen) for _ in range(self.batch_size)]
        return torch.stack(sets).transpose(1, 2).contiguous()  # (B, d, N) -> our (B, N, d)

    def batches(self, first: int, last: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for k in range(first, last):
            yield self.batch(k)

    def eval_batches(self, limit: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The same evaluation points for every run with this (d, N), whatever its data seed or
        batch size: fixed chunks of EVAL_CHUNK sequences, each from its own seed."""
        n = self.eval_samples if limit is None else min(limit, self.eval_samples)
        for c, start in enumerate(range(0, n, EVAL_CHUNK)):
            x = sample_sphere(EVAL_CHUNK, self.tokens, self.dim, _generator(self.eval_seed, self.dim, self.tokens, c))
            x = x[:n - start]
            yield x, farthest_targets(x)
