"""The sequence tasks: LRA ListOps, a causal LM, BERT-style masked-LM pretraining and GLUE
fine-tuning."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data.glue import PAD
from ..io import read_json
from ..runspec import RunSpec
from .base import Task, classification_measure, correct_per_example, majority_chance, trains, trim

UNIGRAM_TOKENS = 1 << 24  # of the training text, for the unigram a language model must beat


@trains("listops")
class SequenceClassification(Task):
    """LRA ListOps: token sequences -> one of 10 values; cross-entropy; accuracy on val (and test)."""

    name = "listops"

    def __init__(self, spec: RunSpec, data_path: str, device: torch.device):
        from ..data import InMemorySplit, open_data

        splits = open_data(data_path, spec, device)
        recipe = spec.recipe
        self.device, self.seed, self.batch_size = device, spec.seed, recipe.batch_size
        self.eval_batch_size = recipe.eval_batch_size
        self.label_smoothing = recipe.label_smoothing
        self.lengths = {s: lengths for s, (_, lengths, _) in splits.items()}
        self.splits = {s: InMemorySplit(tokens, labels) for s, (tokens, _, labels) in splits.items()}
        self.steps_per_epoch = self.splits["train"].steps_per_epoch(self.batch_size)

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        from ..compute.distributed import check_split

        check_split(len(self.splits["train"]), self.batch_size, world)
        for x, y in self.splits["train"].train_batches(self.batch_size, self.seed, epoch, skip, rank, world):
            yield trim(x), y

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        return F.cross_entropy(model(x).float(), y, label_smoothing=self.label_smoothing), len(y)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict[str, float]:
        out = {}
        for split, prefix in (("val", "eval"), ("test", "test")):
            batches = ((trim(x).to(self.device), y.to(self.device))
                       for x, y in self.splits[split].eval_batches(self.eval_batch_size, part=self.eval_part))
            s = self.sums(model, batches, autocast, classification_measure)
            out.update({f"{prefix}_loss": s["loss"] / max(s["n"], 1), f"{prefix}_acc": s["correct"] / max(s["n"], 1)})
        return out

    def eval_outcomes(self, model, autocast) -> str:
        batches = ((trim(x).to(self.device), y.to(self.device))
                   for x, y in self.splits["val"].eval_batches(self.eval_batch_size))
        return correct_per_example(model, batches, autocast)

    def chance(self) -> dict:
        return majority_chance(self.splits["val"].labels())

    def probe_inputs(self, n: int) -> torch.Tensor:
        """The first n validation sequences, padded to the longest of them."""
        x = next(self.splits["val"].eval_batches(n))[0]
        return trim(x)

    def probe_lengths(self, n: int) -> torch.Tensor:
        """Real lengths of the probe sequences: kappa is taken over these rows only (not padding)."""
        return self.lengths["val"][:n]


@trains("language_model")
class LanguageModeling(Task):
    """Next-token prediction on a tokenized corpus: windows of `context` tokens; cross-entropy;
    validation loss (nats per byte) and perplexity on fixed windows."""

    name = "language_model"

    def __init__(self, spec: RunSpec, data_path: str, device: torch.device):
        from ..data import open_data

        recipe = spec.recipe
        self.device, self.seed, self.batch_size = device, spec.seed, recipe.batch_size
        self.context = spec.model.max_len
        self.eval_batch_size = recipe.eval_batch_size
        self.eval_tokens = read_json(data_path).get("eval_tokens", 1 << 18)
        self.train, self.eval = open_data(data_path, spec, device)
        self.steps_per_epoch = recipe.steps_per_epoch
        self.eval_windows = self.eval.eval_starts(self.context, self.eval_tokens)

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        from ..compute.distributed import check_split, shard

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

        def measure(logits, y):
            return {"loss": F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum"),
                    "n": y.numel()}

        def batches():
            rank, world = self.eval_part
            for i in range(rank * self.eval_batch_size, len(self.eval_windows), world * self.eval_batch_size):
                x, y = self.eval.window_batch(self.eval_windows[i:i + self.eval_batch_size], self.context)
                yield x.to(self.device), y.to(self.device)

        s = self.sums(model, batches(), autocast, measure)
        loss = s["loss"] / max(s["n"], 1)
        return {"eval_loss": loss, "eval_ppl": math.exp(min(loss, 50.0)), "eval_bits_per_byte": loss / math.log(2)}

    def chance(self) -> dict:
        """The evaluation loss of the training text's unigram (byte frequencies, add-one smoothed,
        from up to UNIGRAM_TOKENS of it) on the evaluated targets: a model below it uses its context."""
        sample = np.asarray(self.train.tokens[:UNIGRAM_TOKENS], dtype=np.int64)
        targets = np.concatenate([np.asarray(self.eval.tokens[s + 1:s + 1 + self.context], dtype=np.int64)
                                  for s in self.eval_windows])
        counts = np.bincount(sample, minlength=int(max(sample.max(), targets.max())) + 1) + 1.0
        logp = np.log(counts / counts.sum())
        return {"metric": "eval_loss", "value": float(-logp[targets].mean()), "n": int(len(targets)),
                "predictor": "the training text's byte frequencies (unigram)"}

    def probe_inputs(self, n: int) -> torch.Tensor:
        return self.eval.window_batch(self.eval_windows[:n], self.context)[0]


@trains("glue")
class MaskedLanguageModeling(Task):
    """BERT-style pretraining on a tokenized corpus: windows [CLS] bytes [SEP] (document ends become
    [SEP]), 15% of the bytes chosen for prediction (80% [MASK], 10% a random byte, 10% kept), all
    drawn from (seed, step); cross-entropy on the chosen positions."""

    name = "glue"
    MASK_P = 0.15

    def __init__(self, spec: RunSpec, data_path: str, device: torch.device):
        from ..data import open_data

        recipe = spec.recipe
        self.device, self.seed, self.batch_size = device, spec.seed, recipe.batch_size
        self.span = spec.model.max_len - 2
        self.eval_batch_size = recipe.eval_batch_size
        self.train, self.eval = open_data(data_path, spec, device)
        self.steps_per_epoch = recipe.steps_per_epoch
        self.eval_windows = self.eval.eval_starts(self.span, read_json(data_path).get("eval_tokens", 1 << 18))

    def _windows(self, stream, starts) -> torch.Tensor:
        from ..data.glue import CLS, SEP
        from ..data.text import EOT

        body = stream.window_batch(starts, self.span)[0]
        body = torch.where(body == EOT, torch.full_like(body, SEP), body)
        n = len(body)
        return torch.cat([torch.full((n, 1), CLS), body, torch.full((n, 1), SEP)], 1)

    def _mask(self, tokens: torch.Tensor, *keys: int) -> tuple[torch.Tensor, torch.Tensor]:
        from ..data.glue import MASK

        g = torch.Generator().manual_seed(int(np.random.SeedSequence([*keys, 0xB3]).generate_state(1)[0]))
        chosen = (torch.rand(tokens.shape, generator=g) < self.MASK_P) & (tokens < 256)
        labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
        roll = torch.rand(tokens.shape, generator=g)
        random_bytes = torch.randint(0, 256, tokens.shape, generator=g)
        inputs = torch.where(chosen & (roll < 0.8), torch.full_like(tokens, MASK), tokens)
        inputs = torch.where(chosen & (roll >= 0.8) & (roll < 0.9), random_bytes, inputs)
        return inputs, labels

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        from ..compute.distributed import check_split, shard

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
        def measure(logits, y):  # the chosen positions only
            keep = y != -100
            return {**classification_measure(logits[keep], y[keep]), "n": keep.sum()}

        def batches():
            rank, world = self.eval_part
            for i in range(rank * self.eval_batch_size, len(self.eval_windows), world * self.eval_batch_size):
                tokens = self._windows(self.eval, self.eval_windows[i:i + self.eval_batch_size])
                yield tuple(t.to(self.device) for t in self._mask(tokens, 12345, i))

        s = self.sums(model, batches(), autocast, measure)
        return {"eval_loss": s["loss"] / max(s["n"], 1), "eval_mlm_acc": s["correct"] / max(s["n"], 1)}

    def probe_inputs(self, n: int) -> torch.Tensor:
        return self._windows(self.eval, self.eval_windows[:n])


@trains("glue_finetune")
class GlueFinetune(Task):
    """One GLUE task on a pretrained encoder: cross-entropy (MSE for STS-B's similarity score);
    the task's GLUE metric on its evaluation split as `eval_score`."""

    name = "glue_finetune"
    shards_evaluation = False  # its score (Matthews, F1, Pearson) needs every prediction: rank 0 alone

    def __init__(self, spec: RunSpec, data_path: str, device: torch.device):
        from ..data import InMemorySplit, open_data

        recipe, self.glue_task = spec.recipe, spec.glue_task
        data = open_data(data_path, spec, device)
        self.regression = spec.model.num_classes == 1
        self.device, self.seed, self.batch_size = device, spec.seed, recipe.batch_size
        self.eval_batch_size = recipe.eval_batch_size
        self.splits = {role: InMemorySplit(*data[role]) for role in ("train", "eval")}
        self.steps_per_epoch = self.splits["train"].steps_per_epoch(self.batch_size)

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        from ..compute.distributed import check_split

        check_split(len(self.splits["train"]), self.batch_size, world)
        for x, y in self.splits["train"].train_batches(self.batch_size, self.seed, epoch, skip, rank, world):
            yield trim(x, pad=PAD), y

    def _loss(self, logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        if self.regression:
            return F.mse_loss(logits.float().squeeze(-1), y.float(), reduction=reduction)
        return F.cross_entropy(logits.float(), y, reduction=reduction)

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        return self._loss(model(x), y), len(y)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict[str, float]:
        from ..data.glue import score

        model.eval()
        preds, labels, loss_sum = [], [], 0.0
        for x, y in self.splits["eval"].eval_batches(self.eval_batch_size):
            x, y = trim(x, pad=PAD).to(self.device), y.to(self.device)
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
        return trim(next(self.splits["eval"].eval_batches(n))[0], pad=PAD)
