"""Images from webdataset tar shards (`kind: webdataset`), read in sequence, as fast ImageNet
training reads them: the hub's `timm/imagenet-1k-wds` is 1,024 train and 64 validation shards of
about 1,250 samples, each sample a run of tar members sharing a key (`n01440764_10026.jpg`,
`n01440764_10026.cls`, ...).

Random access into Arrow or parquet (kind hub) asks the filesystem for one image at a time; a
shard is one long sequential read, which is what a shared filesystem or an object store serves
fastest. Order stays a pure function of (seed, epoch) for a given number of loader workers, so a
resumed run (with the same workers) reads what it would have:
  - each epoch deals a permutation of the shards to the processes in turn, and each process's
    shards to its loader workers in turn;
  - a worker reads its shards one after the other and shuffles their samples through a buffer
    (`SHUFFLE_BUFFER`) drawn from a generator seeded by (seed, epoch, rank, worker); with
    `repeat_aug` r each sample enters the buffer r times (its copies reach the same process, mostly
    in different batches: timm's sampler, which deals copies to different GPUs, needs random access);
  - it yields whole batches (this process's share of the global batch), and starts its shards
    over when it runs out, so that every process takes the same number of steps: an epoch is
    floor(samples / batch_size) steps, each sample read about once (exactly once when the shards
    hold equal counts and their number divides among processes and workers);
  - the DataLoader takes the workers' batches in turn; a resumed epoch reads and drops the batches
    already trained on.
"""

from __future__ import annotations

import os
import tarfile
import threading
from pathlib import Path

import numpy as np
from torch.utils.data import IterableDataset

from ..io import write_json
from .splits import LOADER_SEED, SKIPPED, mix_seed

SHUFFLE_BUFFER = 2000  # samples a worker shuffles through: about 1.6 of ImageNet's shards


def shard_files(root: str | Path, split: str) -> list[Path]:
    """The shards of `split` in folder `root`: `*{split}-*.tar` (timm's `imagenet1k-train-0000.tar`), sorted."""
    return sorted(Path(root).glob(f"*{split}-*.tar"))


def write_shard(path: str | Path, samples) -> None:
    """A webdataset shard at `path` (written to a temporary name, then renamed): `samples` is an
    iterable of (key, {extension: bytes}), each sample's members stored one after the other."""
    import io

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w") as tar:
        for key, members in samples:
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    tmp.replace(path)


def _samples(path: Path, image_key: str, label_key: str):
    """(key, image bytes, label) of each sample of a shard, read in sequence; a sample missing its
    image or label is passed over."""
    with tarfile.open(path, "r|") as tar:  # a stream: one sequential read
        key, parts = None, {}
        for member in tar:
            if not member.isfile():
                continue
            name = os.path.basename(member.name)
            stem, _, ext = name.partition(".")
            if stem != key:
                if key is not None and image_key in parts and label_key in parts:
                    yield key, parts[image_key], int(parts[label_key])
                key, parts = stem, {}
            if ext in (image_key, label_key):
                parts[ext] = tar.extractfile(member).read()
        if key is not None and image_key in parts and label_key in parts:
            yield key, parts[image_key], int(parts[label_key])


def _shard_index(files: list[Path], image_key: str, label_key: str, with_labels: bool) -> tuple[list[dict], list]:
    """Each shard's sample count (and every label, for the evaluation split) from its tar headers,
    seeking past the images (a shard of ImageNet is ~140 MB, its headers a few hundred KB)."""
    shards, labels = [], []
    for f in files:
        parts: dict[str, dict] = {}
        with tarfile.open(f, "r:") as tar:
            for member in tar:
                stem, _, ext = os.path.basename(member.name).partition(".")
                if member.isfile() and ext in (image_key, label_key):
                    parts.setdefault(stem, {})[ext] = member
            complete = [p for p in parts.values() if len(p) == 2]
            if with_labels:
                labels += [int(tar.extractfile(p[label_key]).read()) for p in complete]
        shards.append({"file": str(f), "samples": len(complete)})
    return shards, labels


def prepare_shards(name: str, spec: dict, out_manifest: str) -> dict:
    """Count each split's samples shard by shard (and keep the evaluation labels, for the chance
    level), check the labels against num_classes, and write the manifest the training jobs read."""
    splits, eval_labels = {}, []
    for role in ("train_split", "eval_split"):
        files = shard_files(spec["path"], spec[role])
        if not files:
            raise ValueError(f"dataset {name!r}: no shards for split {spec[role]!r} in {spec['path']} "
                             f"(allowed: tar files named *{spec[role]}-*.tar)")
        shards, labels = _shard_index(files, spec["image_key"], spec["label_key"], role == "eval_split")
        if sum(s["samples"] for s in shards) == 0:
            raise ValueError(f"dataset {name!r}: the {spec[role]!r} shards hold no sample with both a "
                             f".{spec['image_key']} and a .{spec['label_key']} member")
        splits[role] = shards
        eval_labels = labels if role == "eval_split" else eval_labels
    bad = sorted({y for y in eval_labels if not 0 <= y < spec["num_classes"]})
    if bad:
        raise ValueError(f"dataset {name!r}: labels {bad[:5]} in the {spec['eval_split']!r} shards are outside "
                         f"0..{spec['num_classes'] - 1} (allowed: num_classes covering every label)")
    manifest = {"dataset": name, **spec, "shards": splits, "eval_labels": eval_labels,
                "n_train": sum(s["samples"] for s in splits["train_split"]),
                "n_eval": sum(s["samples"] for s in splits["eval_split"])}
    write_json(out_manifest, manifest)
    return manifest


class ShardStream(IterableDataset):
    """An IterableDataset over a split's shards: each worker yields (x, y, file names) batches of
    `plan["batch"]` samples from its share of the shards (`plan`, set before each pass), each
    sample made model input by `to_sample(data, name, label)` and the batch by `collate`."""

    def __init__(self, to_sample, collate):
        self.to_sample, self.collate = to_sample, collate
        self.plan: dict = {}

    def _read(self, shards: list[str]):
        image_key, label_key = self.plan["keys"]
        for f in shards:
            for key, data, label in _samples(Path(f), image_key, label_key):
                yield f"{key}.{image_key}", data, label

    def _batch(self, items: list) -> tuple:
        x, y = self.collate([self.to_sample(data, name, label) for name, data, label in items])
        return x, y, [name for name, _, _ in items]

    def __iter__(self):
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        p = self.plan
        shards = p["shards"][worker::workers] or p["shards"]  # more workers than shards: each reads them all
        batch: list = []
        if not p["train"]:  # in order, each shard once, the last batch short
            for item in self._read(shards):
                batch.append(item)
                if len(batch) == p["batch"]:
                    yield self._batch(batch)
                    batch = []
            if batch:
                yield self._batch(batch)
            return
        rng = np.random.default_rng([p["seed"], p["epoch"], p["rank"], worker, 0x5A4D])
        buffer: list = []
        while True:  # the split stops a training stream after its epoch's steps; shards start over till then
            for item in self._read(shards):
                buffer += [item] * p["repeats"]
                yield from self._drain(buffer, batch, rng, keep=p["buffer"] - 1)
            yield from self._drain(buffer, batch, rng, keep=0)  # a pass's end: the rest, shuffled

    def _drain(self, buffer: list, batch: list, rng, keep: int):
        """Samples drawn at random out of `buffer` until `keep` remain, yielded in full batches."""
        while len(buffer) > keep:
            batch.append(buffer.pop(int(rng.integers(len(buffer)))))
            if len(batch) == self.plan["batch"]:
                yield self._batch(batch)
                batch.clear()


class ShardSplit:
    """A split of tar shards with the interface of splits.LoaderSplit (train_batches, eval_batches,
    steps_per_epoch, labels, take_events)."""

    def __init__(self, shards: list[dict], keys: tuple[str, str], to_sample, collate, num_workers: int = 0,
                 pin_memory: bool = False, labels: list | None = None):
        self.shards, self.keys, self.num_workers, self.pin_memory = shards, keys, num_workers, pin_memory
        self.stream = ShardStream(to_sample, collate)
        self._labels, self.skipped = labels, []
        self._skipped_lock = threading.Lock()  # batches may be loaded on a read-ahead thread

    def __len__(self) -> int:
        return sum(s["samples"] for s in self.shards)

    def steps_per_epoch(self, batch_size: int) -> int:
        return max(1, len(self) // batch_size)

    def labels(self):
        if self._labels is None:
            raise ValueError("the labels of a training split of shards are not kept (only the evaluation split's)")
        return self._labels

    def _batches(self, plan: dict):
        """The stream's batches through a DataLoader (the workers' in turn); a sample labelled below
        0 (decode: pil, a file Pillow cannot read) is left out of its batch and named."""
        import torch
        from torch.utils.data import DataLoader

        self.stream.plan = {"keys": self.keys, **plan}
        # the workers' base seed from the epoch's place in the run, not from the training's generator:
        # a resumed epoch (which reads and drops the batches trained on) draws what the first run drew
        base = mix_seed(LOADER_SEED, plan.get("seed", 0), plan.get("epoch", -1), plan.get("rank", 0))
        loader = DataLoader(self.stream, batch_size=None, num_workers=self.num_workers, pin_memory=self.pin_memory,
                            generator=torch.Generator().manual_seed(base))
        for x, y, names in loader:
            if torch.is_tensor(x) and (y < 0).any():
                bad = y < 0
                with self._skipped_lock:
                    self.skipped += [names[j] for j in bad.nonzero().flatten().tolist()]
                if bad.all():
                    raise RuntimeError(f"no image of this batch can be read: {', '.join(names)}")
                x, y = x[~bad], y[~bad]
            yield x, y

    def train_batches(self, batch_size: int, seed: int, epoch: int, skip: int = 0, rank: int = 0,
                      world: int = 1, repeats: int = 1):
        """This process's share of each of the epoch's batches, from `skip` on (read and dropped
        before it: a resumed epoch)."""
        from ..compute.distributed import shard_bounds

        start, stop = shard_bounds(batch_size, rank, world)
        order = np.random.default_rng([seed, epoch, 0x5EED]).permutation(len(self.shards))
        mine = [self.shards[i]["file"] for i in (order[rank::world] if len(order) >= world else order)]
        plan = {"train": True, "shards": mine, "seed": seed, "epoch": epoch, "rank": rank, "batch": stop - start,
                "repeats": repeats, "buffer": SHUFFLE_BUFFER}
        steps = self.steps_per_epoch(batch_size)
        for step, batch in enumerate(self._batches(plan)):
            if step >= steps:
                return
            if step >= skip:
                yield batch

    def eval_batches(self, batch_size: int, limit: int | None = None, part: tuple[int, int] = (0, 1)):
        """The evaluation batches in order; with part (rank, world) batches rank, rank + world, ...
        (every rank still reads the stream: the shards' batches are known only as they come)."""
        plan = {"train": False, "shards": [s["file"] for s in self.shards], "batch": batch_size}
        left = len(self) if limit is None else min(limit, len(self))
        for i, (x, y) in enumerate(self._batches(plan)):
            if left <= 0:
                return
            if i % part[1] == part[0]:
                yield (x, y) if len(y) <= left else (x[:left], y[:left])  # a tensor, or images.EncodedBatch
            left -= len(y)

    def take_events(self) -> dict[str, list[str]]:
        with self._skipped_lock:
            skipped, self.skipped = self.skipped, []
        return {SKIPPED: skipped}
