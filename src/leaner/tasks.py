"""Tasks: what a study trains on and how it is scored. The training loop is shared; a task
contributes its data, its loss and its metric.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .data import load_splits


class ImageClassification:
    """Images -> class logits; cross-entropy (optionally label smoothing, Mixup/CutMix); accuracy."""

    name = "image_classification"
    primary_metric = "eval_acc"
    primary_mode = "max"

    def __init__(self, spec: dict, data_path: str, device: torch.device):
        recipe = spec["recipe"]
        self.splits = load_splits(data_path, recipe, device.type)
        self.train_split, self.eval_split = self.splits.train, self.splits.eval
        self.device = device
        self.label_smoothing = recipe.get("label_smoothing", 0.0)
        self.eval_batch_size = recipe.get("eval_batch_size", 256)
        self.mixup = None
        if recipe.get("mixup", 0) > 0 or recipe.get("cutmix", 0) > 0:
            from timm.data import Mixup

            self.mixup = Mixup(mixup_alpha=recipe.get("mixup", 0.0), cutmix_alpha=recipe.get("cutmix", 0.0),
                               label_smoothing=self.label_smoothing, num_classes=spec["model"]["num_classes"])

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
        for batch in self.eval_split.eval_batches(self.eval_batch_size):
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
        xs = [x for x, _ in self.eval_split.eval_batches(self.eval_batch_size, limit=n)]
        return torch.cat(xs)[:n]


TASKS: dict[str, Any] = {"image_classification": ImageClassification}


def make_task(spec: dict, data_path: str, device: torch.device):
    try:
        cls = TASKS[spec["task"]]
    except KeyError:
        raise ValueError(f"unknown task {spec['task']!r} (allowed: {', '.join(TASKS)})") from None
    return cls(spec, data_path, device)
