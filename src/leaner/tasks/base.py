"""The training side of every task: the contract the one training loop relies on, and the
evaluation loop the tasks share."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from . import trainer_metric


class Task:
    """A task's training side. The loop asks it for:
      steps_per_epoch                       optimiser steps in one epoch
      train_batches(epoch, skip, rank, world) this process's share of each batch of an epoch
      loss(model, batch) -> (loss, n)        the mean loss of a batch and its number of samples
      evaluate(model, autocast) -> dict      the history's evaluation columns
      probe_inputs(n)                        the fixed batch condition numbers are measured on
      diagnostics(model), data_info()        extras for metrics.json (none by default)
      take_data_events()                     files the data path had to work around (none by default)
    Its `name` is the spec's task; the metric it tracks comes from the catalogue."""

    name: str

    @property
    def primary_metric(self) -> str:
        return trainer_metric(self.name)[0]

    @property
    def primary_mode(self) -> str:
        return trainer_metric(self.name)[1]

    def diagnostics(self, model) -> dict:
        """Task-specific statistics of the trained model, for metrics.json."""
        return {}

    def data_info(self) -> dict:
        """How the training data was produced on this run, for metrics.json."""
        return {}

    def take_data_events(self) -> dict[str, list[str]]:
        """What the data path had to do since the last call that a reader should know, as
        {what: [file names]} (images decoded on the CPU, unreadable files skipped): logged once an
        epoch, counted in metrics.json. None by default."""
        return {}

    def chance(self) -> dict:
        """What a predictor that ignores its input scores on the evaluation set, for metrics.json:
        {"metric", "value", "n" (evaluation examples), "predictor"}; {} where the task has none (P2's
        task, whose failure to learn is the finding, and pretraining). A variant no better than this
        did not learn (analysis.summary.learned)."""
        return {}


def majority_chance(labels, metric: str = "eval_acc") -> dict:
    """The accuracy of always answering the most frequent evaluation label."""
    import numpy as np

    labels = np.asarray(labels).astype(np.int64).ravel()
    counts = np.bincount(labels) if len(labels) else np.zeros(1, dtype=np.int64)
    return {"metric": metric, "value": float(counts.max() / max(len(labels), 1)), "n": int(len(labels)),
            "predictor": "the most frequent evaluation label"}


@torch.no_grad()
def evaluation_sums(model, batches: Iterable[tuple[Any, Any]], autocast,
                    measure: Callable[[torch.Tensor, torch.Tensor], dict]) -> dict[str, float]:
    """Sum `measure(output, y)` (numbers or 0-dim tensors, by name) over `batches` of device
    tensors, the model in eval mode; sums in float64 on the device, read once at the end."""
    model.eval()
    sums: dict[str, Any] = {}
    for x, y in batches:
        with autocast():
            out = model(x)
        for key, value in measure(out, y).items():
            value = value.double() if isinstance(value, torch.Tensor) else value
            sums[key] = sums[key] + value if key in sums else value
    model.train()
    return {key: float(value) for key, value in sums.items()}


def classification_measure(logits: torch.Tensor, y: torch.Tensor) -> dict:
    """Summed cross-entropy, correct predictions and samples of one evaluation batch."""
    import torch.nn.functional as F

    logits = logits.float()
    return {"loss": F.cross_entropy(logits, y, reduction="sum"), "correct": (logits.argmax(-1) == y).sum(),
            "n": len(y)}


def trim(tokens: torch.Tensor, pad: int = 0) -> torch.Tensor:
    """Drop padding columns that every row of the batch has (padding is at the end)."""
    used = int((tokens != pad).any(0).nonzero().max()) + 1 if tokens.numel() else 0
    return tokens[:, :max(used, 1)]
