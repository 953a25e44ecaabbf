"""The training side of every task: the contract the one training loop relies on, and the
evaluation loop the tasks share."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..registry import Registry
from . import TaskInfo, add_task, trainer_metric, trainer_names

# every task's training class, registered where it is defined: @trains("task name")
TRAINERS = Registry("training class of task", trainer_names)


def trains(*tasks: str | TaskInfo) -> Callable[[type], type]:
    """Decorator: the training class of each of `tasks`, by name (a record of the catalogue), or by
    its record itself, which is added to the catalogue here (a task defined outside this package
    in one place: its record on its class)."""
    for task in tasks:
        if isinstance(task, TaskInfo):
            add_task(task)
    return TRAINERS.register(*(t.name if isinstance(t, TaskInfo) else t for t in tasks))


class Task:
    """A task's training side. The loop asks it for:
      steps_per_epoch                       optimiser steps in one epoch
      train_batches(epoch, skip, rank, world) this process's share of each batch of an epoch
      loss(model, batch) -> (loss, n)        the mean loss of a batch and its number of samples
      evaluate(model, autocast) -> dict      the history's evaluation columns (under DDP every rank
                                            evaluates its share: share_evaluation)
      probe_inputs(n)                        the fixed batch condition numbers are measured on
      diagnostics(model), data_info()        extras for metrics.json (none by default)
      take_data_events()                     files the data path had to work around (none by default)
      close()                                what it keeps running between epochs stopped (a loader's
                                            workers, a read-ahead thread; nothing by default)
    Its `name` is the spec's task; the metric it tracks comes from the catalogue."""

    name: str
    shards_evaluation = True  # False: rank 0 evaluates alone (a metric that needs every prediction)
    eval_part: tuple[int, int] = (0, 1)  # (rank, world): this process's share of the evaluation batches
    eval_gather: Callable[[Any], list] | None = None  # every rank's object, in rank order, on every rank

    def share_evaluation(self, rank: int, world: int, gather: Callable[[Any], list]) -> None:
        """From now on evaluate batches rank, rank + world, ... and combine every rank's sums
        (`evaluation_sums`): the metric is one process's, bit for bit."""
        self.eval_part, self.eval_gather = (rank, world), gather

    def sums(self, model, batches: Iterable[tuple[Any, Any]], autocast,
             measure: Callable[[torch.Tensor, torch.Tensor], dict]) -> dict[str, float]:
        """`evaluation_sums` over this process's share of the batches, combined over the ranks."""
        return evaluation_sums(model, batches, autocast, measure, self.eval_part, self.eval_gather)

    @property
    def primary_metric(self) -> str:
        return trainer_metric(self.name)[0]

    @property
    def primary_mode(self) -> str:
        return trainer_metric(self.name)[1]

    def close(self) -> None:
        """Stop what the task keeps running for its training batches (nothing by default)."""

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

    def eval_outcomes(self, model, autocast) -> str | None:
        """Which examples of the split behind `eval_acc` the final model gets right, in the split's
        order (`pack_outcomes`), for the claims' bootstrap over test examples; None where the task
        has no per-example accuracy."""
        return None

    def chance(self) -> dict:
        """What a predictor that ignores its input scores on the evaluation set, for metrics.json:
        {"metric", "value", "n" (evaluation examples), "predictor"}; {} where the task has none (P2's
        task, whose failure to learn is the finding, and pretraining). A variant no better than this
        did not learn (analysis.summary.learned)."""
        return {}


@torch.no_grad()
def correct_per_example(model, batches: Iterable[tuple[Any, Any]], autocast) -> str:
    """Which evaluation examples the model classifies correctly, in the batches' order, packed as
    metrics.json keeps it (`pack_outcomes`); the model in eval mode, one process."""
    import numpy as np

    model.eval()
    right = []
    for x, y in batches:
        with autocast():
            right.append((model(x).float().argmax(-1) == y).cpu())
    model.train()
    from ..io import pack_outcomes

    return pack_outcomes(torch.cat(right).numpy().astype(np.uint8) if right else np.zeros(0, np.uint8))


def majority_chance(labels, metric: str = "eval_acc") -> dict:
    """The accuracy of always answering the most frequent evaluation label."""
    import numpy as np

    labels = np.asarray(labels).astype(np.int64).ravel()
    counts = np.bincount(labels) if len(labels) else np.zeros(1, dtype=np.int64)
    return {"metric": metric, "value": float(counts.max() / max(len(labels), 1)), "n": int(len(labels)),
            "predictor": "the most frequent evaluation label"}


@torch.no_grad()
def evaluation_sums(model, batches: Iterable[tuple[Any, Any]], autocast,
                    measure: Callable[[torch.Tensor, torch.Tensor], dict], part: tuple[int, int] = (0, 1),
                    gather: Callable[[Any], list] | None = None) -> dict[str, float]:
    """Sum `measure(output, y)` (numbers or 0-dim tensors, by name) over `batches` of device
    tensors, the model in eval mode; every batch's values in float64, read once at the end.

    Several processes: `batches` are this rank's share (part = (rank, world): global batches
    rank, rank + world, ...), `gather` brings every rank's per-batch values to every rank, and all
    ranks add them in the global batch order, as one process does: the same sums, bit for bit."""
    model.eval()
    rows: list[dict] = []
    for x, y in batches:
        with autocast():
            out = model(x)
        rows.append(measure(out, y))
    model.train()
    keys = sorted({key for row in rows for key in row})
    mine: list[tuple[int, dict[str, float]]] = []
    if rows:
        device = next((v.device for row in rows for v in row.values() if isinstance(v, torch.Tensor)), None)
        table = torch.stack([torch.stack([torch.as_tensor(row[key], dtype=torch.float64, device=device)
                                          for key in keys]) for row in rows]).tolist()  # one transfer
        mine = [(part[0] + k * part[1], dict(zip(keys, values))) for k, values in enumerate(table)]
    every = sorted((b for share in gather(mine) for b in share), key=lambda b: b[0]) if gather else mine
    sums: dict[str, float] = {}
    for _, values in every:
        for key, value in values.items():
            sums[key] = sums[key] + value if key in sums else value
    return sums


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
