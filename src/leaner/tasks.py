"""Tasks: what a study trains on and how it is scored. The training loop is shared; a task
contributes its data (train batches as a function of epoch, a fixed evaluation set, a fixed probe
batch for condition numbers), its loss and its metric.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.nn.functional as F

from .io import read_json


class ImageClassification:
    """Images -> class logits; cross-entropy (optionally label smoothing, Mixup/CutMix); accuracy."""

    name = "image_classification"
    primary_metric = "eval_acc"
    primary_mode = "max"

    def __init__(self, spec: dict, data_path: str, device: torch.device):
        from .data import load_splits

        recipe = spec["recipe"]
        self.splits = load_splits(data_path, recipe, device.type)
        self.device, self.seed, self.batch_size = device, spec["seed"], recipe["batch_size"]
        self.steps_per_epoch = self.splits.train.steps_per_epoch(self.batch_size)
        self.label_smoothing = recipe.get("label_smoothing", 0.0)
        self.eval_batch_size = recipe.get("eval_batch_size", 256)
        self.mixup = None
        if recipe.get("mixup", 0) > 0 or recipe.get("cutmix", 0) > 0:
            from timm.data import Mixup

            self.mixup = Mixup(mixup_alpha=recipe.get("mixup", 0.0), cutmix_alpha=recipe.get("cutmix", 0.0),
                               label_smoothing=self.label_smoothing, num_classes=spec["model"]["num_classes"])

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        """This process's share of each global batch of `epoch`, from batch `skip` on (only the
        share is loaded and augmented)."""
        from .distributed import check_split

        check_split(len(self.splits.train), self.batch_size, world)
        return self.splits.train.train_batches(self.batch_size, self.seed, epoch, skip, rank, world)

    def _to_device(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        x, y = self._to_device(batch)
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
        model.eval()
        total, correct, loss_sum = 0, 0, 0.0
        for batch in self.splits.eval.eval_batches(self.eval_batch_size):
            x, y = self._to_device(batch)
            with autocast():
                logits = model(x).float()
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(-1) == y).sum().item()
            total += len(y)
        model.train()
        return {"eval_loss": loss_sum / max(total, 1), "eval_acc": correct / max(total, 1)}

    def probe_inputs(self, n: int) -> torch.Tensor:
        """The fixed evaluation batch for condition numbers: the first n eval examples."""
        xs = [x for x, _ in self.splits.eval.eval_batches(self.eval_batch_size, limit=n)]
        return torch.cat(xs)[:n]

    def diagnostics(self, model) -> dict:
        return {}


def nearest_point_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """P2's loss: squared error summed over coordinates, averaged over tokens and batch (so the
    zero predictor scores 1 on unit vectors)."""
    return (pred.float() - target).pow(2).sum(-1).mean()


class NearestPoint:
    """P2's farthest-point task: a stream of point sets, MSE to each point's farthest neighbour.
    The run's metric is the minimum over epochs of the epoch-mean training MSE (fresh samples
    every step, so training MSE is the population risk); eval MSE on a fixed set is logged too."""

    name = "nearest_point"
    primary_metric = "train_loss"
    primary_mode = "min"

    def __init__(self, spec: dict, data_path: str, device: torch.device):
        from .data.nearest_point import PointStream

        meta, recipe, model = read_json(data_path), spec["recipe"], spec["model"]
        self.device = device
        self.steps_per_epoch = recipe["steps_per_epoch"]
        self.stream = PointStream(model["dim"], model["tokens"], recipe["batch_size"], spec["seed"],
                                  streams=meta["streams"], eval_samples=meta["eval_samples"],
                                  eval_seed=meta["eval_seed"])

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        """This process's share of each global batch of `epoch` (every rank draws the global batch
        from the stream's seed and keeps its rows: cheap next to the model)."""
        from .distributed import check_split, shard

        check_split(self.stream.batch_size, self.stream.batch_size, world)
        first = epoch * self.steps_per_epoch + skip
        for batch in self.stream.batches(first, (epoch + 1) * self.steps_per_epoch):
            yield shard(batch, rank, world)

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        return nearest_point_mse(model(x), y), len(x)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict[str, float]:
        model.eval()
        total, err = 0, 0.0
        for x, y in self.stream.eval_batches():
            x, y = x.to(self.device), y.to(self.device)
            with autocast():
                err += nearest_point_mse(model(x), y).item() * len(x)
            total += len(x)
        model.train()
        return {"eval_mse": err / max(total, 1)}

    def probe_inputs(self, n: int) -> torch.Tensor:
        return torch.cat([x for x, _ in self.stream.eval_batches(limit=n)])

    def diagnostics(self, model) -> dict:
        """fig_perfect's statistic for every head of the first layer."""
        from .models.nearest import qk_identity_angle

        qk = model.blocks[0].attn.qk().detach()
        return {"qk_angle_deg": qk_identity_angle(model),
                "qk_fro": qk.flatten(-2).norm(dim=-1).flatten().tolist()}


TASKS: dict[str, Any] = {"image_classification": ImageClassification, "nearest_point": NearestPoint}


def make_task(spec: dict, data_path: str, device: torch.device):
    try:
        cls = TASKS[spec["task"]]
    except KeyError:
        raise ValueError(f"unknown task {spec['task']!r} (allowed: {', '.join(TASKS)})") from None
    return cls(spec, data_path, device)

