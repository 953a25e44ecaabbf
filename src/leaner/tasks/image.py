"""Image classification (ViT on digits, CIFAR, ImageNet)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from ..compute.side_stream import read_ahead
from ..data.splits import EpochStream
from ..runspec import RunSpec
from .base import Task, classification_measure, correct_per_example, majority_chance, trains

READ_AHEAD = 2  # training batches finished on a GPU ahead of the step


def batch_seed(seed: int, epoch: int, rank: int, batch: int) -> int:
    """The seed of the random draws that finish training batch `batch` of `epoch` on `rank`."""
    from ..data.splits import mix_seed

    return mix_seed(seed, epoch, rank, batch, 0xF1)


@trains("image_classification")
class ImageClassification(Task):
    """Images -> class logits; cross-entropy (optionally label smoothing, Mixup/CutMix); accuracy."""

    name = "image_classification"

    def __init__(self, spec: RunSpec, data_path: str, device: torch.device):
        from ..data import InMemorySplit, open_data

        recipe = spec.recipe
        self.splits = open_data(data_path, spec, device.type)
        for split in (self.splits.train, self.splits.eval):
            if device.type == "cuda" and isinstance(split, InMemorySplit):
                split.to(device)  # small arrays (digits, benchmarks): gathered on the GPU, no copy per step
        self.device, self.seed, self.batch_size = device, spec.seed, recipe.batch_size
        self.stream: EpochStream | None = None  # the finished training batches, across epochs
        self.stream_key: tuple | None = None
        self.steps_per_epoch = self.splits.train.steps_per_epoch(self.batch_size)
        self.label_smoothing = recipe.label_smoothing
        self.repeats = recipe.repeat_aug
        self.eval_batch_size = recipe.eval_batch_size
        self.mixup = None
        if recipe.mixup > 0 or recipe.cutmix > 0:
            from timm.data import Mixup

            classes = spec.model.num_classes
            self.mixup = Mixup(mixup_alpha=recipe.mixup, cutmix_alpha=recipe.cutmix,
                               label_smoothing=self.label_smoothing, num_classes=classes)

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        """This process's share of each global batch of `epoch`, from batch `skip` on (only the
        share is loaded and augmented), as model input and labels on the device. Where the split
        ends on the device (`finish`: normalisation and erasing of uint8 batches, or `decode:
        device`'s decode and augmentation) each batch is finished from its own seed, READ_AHEAD
        batches ahead of the step on CUDA (compute/side_stream.py), in one stream across epochs
        (data/splits.EpochStream), so that neither the loader nor the read-ahead drains at an
        epoch's end."""
        from ..compute.distributed import check_split

        check_split(len(self.splits.train), self.batch_size, world)
        split, finish = self.splits.train, self.splits.finish
        if finish is None:  # in memory: batches are index lookups on the device
            return split.train_batches(self.batch_size, self.seed, epoch, skip, rank, world, self.repeats)
        key = (rank, world)
        if self.stream is None or self.stream_key != key:
            self.close()
            self.stream_key = key
            self.stream = EpochStream(lambda e, s: self._finished(e, s, rank, world),
                                      lambda e: self.steps_per_epoch)
        return self.stream.epoch(epoch, skip)

    def _finished(self, epoch: int, skip: int, rank: int, world: int) -> Iterator[tuple]:
        """Every finished training batch from (epoch, skip) on, without end."""
        import itertools

        finish, device = self.splits.finish, self.device

        split = self.splits.train

        def loaded():
            for e in itertools.count(epoch):
                first = k = skip if e == epoch else 0
                for k, (x, y) in enumerate(split.train_batches(self.batch_size, self.seed, e, first, rank, world,
                                                               self.repeats), start=first):
                    yield x, y, batch_seed(self.seed, e, rank, k)
                    k += 1
                if k != self.steps_per_epoch:  # the next epoch's batches must not fill a short one
                    raise RuntimeError(f"epoch {e} gave {k} training batches, not {self.steps_per_epoch}")

        # a loader without workers loads in this process: on the thread that asks (no read-ahead)
        ahead = READ_AHEAD if device.type == "cuda" and getattr(split, "num_workers", 1) > 0 else 0
        return read_ahead(lambda b: finish.train(b[0], b[1], device, b[2]), loaded(), device, ahead)

    def close(self) -> None:
        """Stop the read-ahead, then the training split's stream (its loader's workers end)."""
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if hasattr(self.splits.train, "close"):
            self.splits.train.close()

    def _to_device(self, batch, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Model input and labels on the device: an evaluation batch finished here (a training
        batch comes finished from train_batches)."""
        x, y = batch
        finish = self.splits.finish
        if finish is not None and not train:
            x, y = finish.eval(x, y, self.device)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def take_data_events(self) -> dict[str, list[str]]:
        """Files decoded on the CPU or skipped, by the loaders' workers or on the device."""
        events: dict[str, list[str]] = {}
        for source in (self.splits.train, self.splits.eval, self.splits.finish):
            for what, names in (source.take_events() if hasattr(source, "take_events") else {}).items():
                events.setdefault(what, []).extend(names)
        return events

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        x, y = self._to_device(batch, train=True)
        if self.mixup is not None and len(y) % 2 == 0:
            x, soft = self.mixup(x, y)
            logits = model(x)
            loss = torch.sum(-soft * F.log_softmax(logits.float(), dim=-1), dim=-1).mean()
        else:
            logits = model(x)
            loss = F.cross_entropy(logits.float(), y, label_smoothing=self.label_smoothing)
        return loss, len(y)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict[str, float]:
        batches = (self._to_device(b, train=False)
                   for b in self.splits.eval.eval_batches(self.eval_batch_size, part=self.eval_part))
        s = self.sums(model, batches, autocast, classification_measure)
        return {"eval_loss": s["loss"] / max(s["n"], 1), "eval_acc": s["correct"] / max(s["n"], 1)}

    def eval_outcomes(self, model, autocast) -> str:
        batches = (self._to_device(b, train=False) for b in self.splits.eval.eval_batches(self.eval_batch_size))
        return correct_per_example(model, batches, autocast)

    def chance(self) -> dict:
        return majority_chance(self.splits.eval.labels())

    def probe_inputs(self, n: int) -> torch.Tensor:
        """The fixed evaluation batch for condition numbers: the first n eval examples."""
        xs = [self._to_device(batch, train=False)[0].cpu()
              for batch in self.splits.eval.eval_batches(self.eval_batch_size, limit=n)]
        return torch.cat(xs)[:n]
