"""Tasks: what a study trains on and how it is scored. The training loop is shared; a task
contributes its data (train batches as a function of epoch, a fixed evaluation set, a fixed probe
batch for condition numbers), its loss and its metric.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .data.glue import PAD
from .io import read_json


class Task:
    """What every task shares: no diagnostics and nothing to say about its data unless it has."""

    def diagnostics(self, model) -> dict:
        """Task-specific statistics of the trained model, for metrics.json."""
        return {}

    def data_info(self) -> dict:
        """How the training data was produced on this run, for metrics.json."""
        return {}


class ImageClassification(Task):
    """Images -> class logits; cross-entropy (optionally label smoothing, Mixup/CutMix); accuracy."""

    name = "image_classification"
    primary_metric = "eval_acc"
    primary_mode = "max"

    def __init__(self, spec: dict, data_path: str, device: torch.device):
        from .data import InMemorySplit, load_splits

        recipe = spec["recipe"]
        self.splits = load_splits(data_path, recipe, device.type)
        for split in (self.splits.train, self.splits.eval):
            if device.type == "cuda" and isinstance(split, InMemorySplit):
                split.to(device)  # small arrays (digits, benchmarks): gathered on the GPU, no copy per step
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

    def _to_device(self, batch, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Model input and labels on the device; `decode: device` datasets are decoded and
        augmented here."""
        x, y = batch
        finish = self.splits.finish
        if finish is not None:
            x = (finish.train if train else finish.eval)(x, self.device)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

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
        model.eval()
        total, correct, loss_sum = 0, 0, 0.0
        for batch in self.splits.eval.eval_batches(self.eval_batch_size):
            x, y = self._to_device(batch, train=False)
            with autocast():
                logits = model(x).float()
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(-1) == y).sum().item()
            total += len(y)
        model.train()
        return {"eval_loss": loss_sum / max(total, 1), "eval_acc": correct / max(total, 1)}

    def probe_inputs(self, n: int) -> torch.Tensor:
        """The fixed evaluation batch for condition numbers: the first n eval examples."""
        xs = [self._to_device(batch, train=False)[0].cpu()
              for batch in self.splits.eval.eval_batches(self.eval_batch_size, limit=n)]
        return torch.cat(xs)[:n]



def nearest_point_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """P2's loss: squared error summed over coordinates, averaged over tokens and batch (so the
    zero predictor scores 1 on unit vectors)."""
    return (pred.float() - target).pow(2).sum(-1).mean()


class NearestPoint(Task):
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
        # training points are drawn where the model trains (no copy, no host work per step)
        self.stream = PointStream(model["dim"], model["tokens"], recipe["batch_size"], spec["seed"],
                                  streams=meta["streams"], eval_samples=meta["eval_samples"],
                                  eval_seed=meta["eval_seed"], device=device)
        self._eval = None

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
        """MSE on the fixed evaluation set, drawn once and kept on the device; one sync."""
        if self._eval is None:
            self._eval = [(x.to(self.device), y.to(self.device)) for x, y in self.stream.eval_batches()]
        model.eval()
        err = torch.zeros((), dtype=torch.float64, device=self.device)
        for x, y in self._eval:
            with autocast():
                err += nearest_point_mse(model(x), y).double() * len(x)
        model.train()
        total = sum(len(x) for x, _ in self._eval)
        return {"eval_mse": err.item() / max(total, 1)}

    def probe_inputs(self, n: int) -> torch.Tensor:
        return torch.cat([x for x, _ in self.stream.eval_batches(limit=n)])

    def data_info(self) -> dict:
        kind = self.stream.device.type
        return {"points_drawn_on": kind, "generator": "CUDA Philox" if kind == "cuda" else "CPU Mersenne Twister",
                "note": "a pure function of (data seed, step) on either; the GPU's points differ from the CPU's"
                if kind == "cuda" else "a pure function of (data seed, step)"}

    def diagnostics(self, model) -> dict:
        """fig_perfect's statistic for every head of the first layer."""
        from .models.nearest import qk_identity_angle

        qk = model.blocks[0].attn.qk().detach()
        return {"qk_angle_deg": qk_identity_angle(model),
                "qk_fro": qk.flatten(-2).norm(dim=-1).flatten().tolist()}


class SequenceClassification(Task):
    """LRA ListOps: token sequences -> one of 10 values; cross-entropy; accuracy on val (and test)."""

    name = "listops"
    primary_metric = "eval_acc"
    primary_mode = "max"

    def __init__(self, spec: dict, data_path: str, device: torch.device):
        from .data import InMemorySplit
        from .data.listops import load_listops

        splits = load_listops(data_path)
        recipe = spec["recipe"]
        self.device, self.seed, self.batch_size = device, spec["seed"], recipe["batch_size"]
        self.eval_batch_size = recipe.get("eval_batch_size", 256)
        self.label_smoothing = recipe.get("label_smoothing", 0.0)
        self.lengths = {s: lengths for s, (_, lengths, _) in splits.items()}
        self.splits = {s: InMemorySplit(tokens, labels) for s, (tokens, _, labels) in splits.items()}
        self.steps_per_epoch = self.splits["train"].steps_per_epoch(self.batch_size)

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        from .distributed import check_split

        check_split(len(self.splits["train"]), self.batch_size, world)
        for x, y in self.splits["train"].train_batches(self.batch_size, self.seed, epoch, skip, rank, world):
            yield _trim(x), y

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        return F.cross_entropy(model(x).float(), y, label_smoothing=self.label_smoothing), len(y)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict[str, float]:
        model.eval()
        out = {}
        for split, prefix in (("val", "eval"), ("test", "test")):
            total, correct, loss_sum = 0, 0, 0.0
            for x, y in self.splits[split].eval_batches(self.eval_batch_size):
                x, y = _trim(x).to(self.device), y.to(self.device)
                with autocast():
                    logits = model(x).float()
                loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
                correct += (logits.argmax(-1) == y).sum().item()
                total += len(y)
            out.update({f"{prefix}_loss": loss_sum / max(total, 1), f"{prefix}_acc": correct / max(total, 1)})
        model.train()
        return out

    def probe_inputs(self, n: int) -> torch.Tensor:
        """The first n validation sequences, padded to the longest of them."""
        x = next(self.splits["val"].eval_batches(n))[0]
        return _trim(x)

    def probe_lengths(self, n: int) -> torch.Tensor:
        """Real lengths of the probe sequences: kappa is taken over these rows only (not padding)."""
        return self.lengths["val"][:n]



def _trim(tokens: torch.Tensor, pad: int = 0) -> torch.Tensor:
    """Drop padding columns that every row of the batch has (padding is at the end)."""
    used = int((tokens != pad).any(0).nonzero().max()) + 1 if tokens.numel() else 0
    return tokens[:, :max(used, 1)]


class LanguageModeling(Task):
    """Next-token prediction on a tokenized corpus: windows of `context` tokens; cross-entropy;
    validation loss (nats per byte) and perplexity on fixed windows."""

    name = "language_model"
    primary_metric = "eval_loss"
    primary_mode = "min"

    def __init__(self, spec: dict, data_path: str, device: torch.device):
        from .data.text import TokenStream

        recipe = spec["recipe"]
        self.device, self.seed, self.batch_size = device, spec["seed"], recipe["batch_size"]
        self.context = spec["model"]["max_len"]
        self.eval_batch_size = recipe.get("eval_batch_size", 64)
        self.eval_tokens = read_json(data_path).get("eval_tokens", 1 << 18)
        self.train, self.eval = TokenStream(data_path, "train"), TokenStream(data_path, "eval")
        self.steps_per_epoch = recipe["steps_per_epoch"]
        self.eval_windows = self.eval.eval_starts(self.context, self.eval_tokens)

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        from .distributed import check_split, shard

        check_split(self.batch_size, self.batch_size, world)
        for step in range(epoch * self.steps_per_epoch + skip, (epoch + 1) * self.steps_per_epoch):
            starts = self.train.random_starts(self.batch_size, self.context, self.seed, step)
            yield self.train.window_batch(shard(starts, rank, world), self.context)

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        logits = model(x).float()
        return F.cross_entropy(logits.flatten(0, 1), y.flatten()), len(x)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict[str, float]:
        import math

        model.eval()
        loss_sum, count = 0.0, 0
        for i in range(0, len(self.eval_windows), self.eval_batch_size):
            x, y = self.eval.window_batch(self.eval_windows[i:i + self.eval_batch_size], self.context)
            x, y = x.to(self.device), y.to(self.device)
            with autocast():
                logits = model(x).float()
            loss_sum += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
        model.train()
        loss = loss_sum / max(count, 1)
        return {"eval_loss": loss, "eval_ppl": math.exp(min(loss, 50.0)), "eval_bits_per_byte": loss / math.log(2)}

    def probe_inputs(self, n: int) -> torch.Tensor:
        return self.eval.window_batch(self.eval_windows[:n], self.context)[0]



class MaskedLanguageModeling(Task):
    """BERT-style pretraining on a tokenized corpus: windows [CLS] bytes [SEP] (document ends become
    [SEP]), 15% of the bytes chosen for prediction (80% [MASK], 10% a random byte, 10% kept), all
    drawn from (seed, step); cross-entropy on the chosen positions."""

    name = "glue"
    primary_metric = "eval_loss"
    primary_mode = "min"
    MASK_P = 0.15

    def __init__(self, spec: dict, data_path: str, device: torch.device):
        from .data.text import TokenStream

        recipe = spec["recipe"]
        self.device, self.seed, self.batch_size = device, spec["seed"], recipe["batch_size"]
        self.span = spec["model"]["max_len"] - 2
        self.eval_batch_size = recipe.get("eval_batch_size", 64)
        self.train, self.eval = TokenStream(data_path, "train"), TokenStream(data_path, "eval")
        self.steps_per_epoch = recipe["steps_per_epoch"]
        self.eval_windows = self.eval.eval_starts(self.span, read_json(data_path).get("eval_tokens", 1 << 18))

    def _windows(self, stream, starts) -> torch.Tensor:
        from .data.glue import CLS, SEP
        from .data.text import EOT

        body = stream.window_batch(starts, self.span)[0]
        body = torch.where(body == EOT, torch.full_like(body, SEP), body)
        n = len(body)
        return torch.cat([torch.full((n, 1), CLS), body, torch.full((n, 1), SEP)], 1)

    def _mask(self, tokens: torch.Tensor, *keys: int) -> tuple[torch.Tensor, torch.Tensor]:
        from .data.glue import MASK

        g = torch.Generator().manual_seed(int(np.random.SeedSequence([*keys, 0xB3]).generate_state(1)[0]))
        chosen = (torch.rand(tokens.shape, generator=g) < self.MASK_P) & (tokens < 256)
        labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
        roll = torch.rand(tokens.shape, generator=g)
        random_bytes = torch.randint(0, 256, tokens.shape, generator=g)
        inputs = torch.where(chosen & (roll < 0.8), torch.full_like(tokens, MASK), tokens)
        inputs = torch.where(chosen & (roll >= 0.8) & (roll < 0.9), random_bytes, inputs)
        return inputs, labels

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        from .distributed import check_split, shard

        check_split(self.batch_size, self.batch_size, world)
        for step in range(epoch * self.steps_per_epoch + skip, (epoch + 1) * self.steps_per_epoch):
            # the global batch and its masks, then this rank's rows: equal to one process
            tokens = self._windows(self.train, self.train.random_starts(self.batch_size, self.span, self.seed, step))
            yield shard(self._mask(tokens, self.seed, step), rank, world)

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        logits = model(x).float()
        return F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100), len(x)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict[str, float]:
        model.eval()
        loss_sum, correct, count = 0.0, 0, 0
        for i in range(0, len(self.eval_windows), self.eval_batch_size):
            tokens = self._windows(self.eval, self.eval_windows[i:i + self.eval_batch_size])
            x, y = (t.to(self.device) for t in self._mask(tokens, 12345, i))
            with autocast():
                logits = model(x).float()
            keep = y != -100
            loss_sum += F.cross_entropy(logits[keep], y[keep], reduction="sum").item()
            correct += (logits[keep].argmax(-1) == y[keep]).sum().item()
            count += int(keep.sum())
        model.train()
        return {"eval_loss": loss_sum / max(count, 1), "eval_mlm_acc": correct / max(count, 1)}

    def probe_inputs(self, n: int) -> torch.Tensor:
        return self._windows(self.eval, self.eval_windows[:n])



class GlueFinetune(Task):
    """One GLUE task on a pretrained encoder: cross-entropy (MSE for STS-B's similarity score);
    the task's GLUE metric on its evaluation split as `eval_score`."""

    name = "glue_finetune"
    primary_metric = "eval_score"
    primary_mode = "max"

    def __init__(self, spec: dict, data_path: str, device: torch.device):
        from .data import InMemorySplit
        from .data.glue import load_glue_task

        recipe, self.glue_task = spec["recipe"], spec["glue_task"]
        data = load_glue_task(data_path, self.glue_task)
        self.regression = spec["model"]["num_classes"] == 1
        self.device, self.seed, self.batch_size = device, spec["seed"], recipe["batch_size"]
        self.eval_batch_size = recipe.get("eval_batch_size", 256)
        self.splits = {role: InMemorySplit(*data[role]) for role in ("train", "eval")}
        self.steps_per_epoch = self.splits["train"].steps_per_epoch(self.batch_size)

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        from .distributed import check_split

        check_split(len(self.splits["train"]), self.batch_size, world)
        for x, y in self.splits["train"].train_batches(self.batch_size, self.seed, epoch, skip, rank, world):
            yield _trim(x, pad=PAD), y

    def _loss(self, logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        if self.regression:
            return F.mse_loss(logits.float().squeeze(-1), y.float(), reduction=reduction)
        return F.cross_entropy(logits.float(), y, reduction=reduction)

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        return self._loss(model(x), y), len(y)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict[str, float]:
        from .data.glue import score

        model.eval()
        preds, labels, loss_sum = [], [], 0.0
        for x, y in self.splits["eval"].eval_batches(self.eval_batch_size):
            x, y = _trim(x, pad=PAD).to(self.device), y.to(self.device)
            with autocast():
                logits = model(x).float()
            loss_sum += self._loss(logits, y, "sum").item()
            preds.append(logits.squeeze(-1) if self.regression else logits.argmax(-1))
            labels.append(y)
        model.train()
        pred, lab = torch.cat(preds).cpu().numpy(), torch.cat(labels).cpu().numpy()
        out = {f"eval_{k}": v for k, v in score(self.glue_task, pred, lab).items()}
        return {"eval_loss": loss_sum / max(len(lab), 1), **out}

    def probe_inputs(self, n: int) -> torch.Tensor:
        return _trim(next(self.splits["eval"].eval_batches(n))[0], pad=PAD)



TASKS: dict[str, Any] = {"image_classification": ImageClassification, "nearest_point": NearestPoint,
                         "listops": SequenceClassification, "language_model": LanguageModeling,
                         "glue": MaskedLanguageModeling, "glue_finetune": GlueFinetune}


def make_task(spec: dict, data_path: str, device: torch.device):
    try:
        cls = TASKS[spec["task"]]
    except KeyError:
        raise ValueError(f"unknown task {spec['task']!r} (allowed: {', '.join(TASKS)})") from None
    return cls(spec, data_path, device)

