"""Paper-scale image data (CIFAR-10/100, ImageNet-1k) through Hugging Face `datasets`.

A dataset comes either from the hub by name (``uoft-cs/cifar10``, ``ILSVRC/imagenet-1k``) or from a
local ImageFolder (``root/<split>/<class>/<image>``). Images pass through the DeiT recipe:
RandomResizedCrop + flip + RandAugment + random erasing for training, resize and centre crop for
evaluation. Where that happens is the dataset's `decode`:
  - `pil` (default): the loader's worker processes decode with Pillow and run timm's transforms up
    to uint8 tensors (timm's prefetcher form); the training process normalises and erases each
    batch on its device (tensor_augment.Normalized), as timm's PrefetchLoader does;
  - `device`: the workers only read the encoded bytes, and the training process decodes and
    augments each batch on its device (tensor_augment.py): nvJPEG and CUDA kernels on a GPU.
A training sample's augmentation in a worker draws from its own seed (its place in the run, given by
the loader's batch sampler: splits._EndlessBatches), so a resumed run augments what an
uninterrupted one did, whatever the workers. (Kind webdataset's samples, read through a shuffle
buffer, draw from their worker's generators, seeded from the epoch's place in the run: a resumed
epoch, which reads and drops the batches already trained on, draws the same.)
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..io import read_json
from ..runspec import RunSpec
from ..schema import Recipe
from .checks import check_imagefolder, check_webdataset
from .image_prep import load_split, prepare_images, prepare_webdataset
from .kinds import DatasetKind, add_kind, always, settings, shared

IMAGE_NORM = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
IMAGE_LOADING = {"train_split": "train", "eval_split": "validation", "image_key": "image", "label_key": "label",
                 "img_size": 224, "in_chans": 3, "decode": "pil", **IMAGE_NORM}
IMAGE_KEY_SCHEMA = {  # what the image kinds read
    **shared("train_split", "eval_split", "num_classes", "img_size", "in_chans"),
    "image_key": {"type": "string", "minLength": 1}, "label_key": {"type": "string", "minLength": 1},
    "decode": {"enum": ["pil", "device"], "description": (
        "hub, imagefolder, webdataset: where images are decoded and augmented. pil: Pillow + timm in the loader's "
        "workers. device: the workers read the encoded bytes; the training process decodes each batch (nvJPEG on "
        "a GPU) and runs the same DeiT recipe on the device")},
    "mean": {"type": "array", "items": {"type": "number"}, "minItems": 1},
    "std": {"type": "array", "items": {"$ref": "#/$defs/posnum"}, "minItems": 1}}
IMAGE_SPLITS = "splits.Splits: a LoaderSplit (or ShardSplit) for train and for eval, decoded as the recipe says"


UNREADABLE = -1  # the label of the stand-in for a file Pillow cannot read (splits.LoaderSplit drops it)


def _file_name(image: dict, i: int) -> str:
    """The file name of row i's image column (`datasets.Image(decode=False)`: bytes and path)."""
    return os.path.basename(image.get("path") or f"row {int(i)}")


def _encoded(image: dict, i: int) -> tuple[bytes, str]:
    """Row i's encoded image (its bytes, or the file they are in) and its file name."""
    data = image["bytes"]
    if data is None:
        with open(image["path"], "rb") as fh:
            data = fh.read()
    return data, _file_name(image, i)


def pil_sample(data: bytes, name: str, label: int, transform, in_chans: int, blank):
    """One sample for `decode: pil`: the image decoded by Pillow and transformed, with its label; a
    file Pillow cannot read is `blank` labelled UNREADABLE (its name is the caller's to keep)."""
    from .tensor_augment import open_image

    img = open_image(data, in_chans)
    return (blank, UNREADABLE) if img is None else (transform(img), label)


def encoded_sample(data: bytes, name: str, label: int, in_chans: int):
    """One sample for `decode: device`: ((the JPEG's bytes as a 1-D uint8 tensor, or another
    format decoded here to uint8 CHW, or None when unreadable), file name), label."""
    import torch

    from .tensor_augment import JPEG_MAGIC, decode_on_cpu

    if data[:3] == JPEG_MAGIC:
        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    else:  # no device decoder for it: decoded here
        encoded = decode_on_cpu(data, in_chans)
    return (encoded, name), label


@contextlib.contextmanager
def seeded(seed: int | None):
    """Python's, numpy's and torch's global CPU generators seeded with `seed` inside, as they were
    after (what timm's Pillow transforms draw from: its crop and RandAugment Python's and numpy's,
    the flip torch's CPU one; the CUDA generators are not touched); nothing where `seed` is None.
    In a loader's worker process these are the worker's own; a loader of no workers runs in the
    training process, on its thread (tasks/image.py reads such a split without a read-ahead thread)."""
    if seed is None:
        yield
        return
    import random

    import numpy as np
    import torch

    cpu = torch.default_generator
    saved = random.getstate(), np.random.get_state(), cpu.get_state()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    cpu.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        cpu.set_state(saved[2])


class HFImageDataset:
    """Map-style dataset for `decode: pil`: (transformed uint8 image tensor, integer label), decoded
    by Pillow in the worker; a file Pillow cannot read gives a blank image labelled UNREADABLE, which
    the split leaves out of its batch and names (`name_of`). An item asked for as (index, seed)
    is transformed from that seed (`seeded`)."""

    seeded = True

    def __init__(self, ds, image_key: str, label_key: str, transform, in_chans: int, img_size: int):
        import datasets
        import torch

        self.ds = ds.cast_column(image_key, datasets.Image(decode=False))
        self.image_key, self.label_key, self.in_chans = image_key, label_key, in_chans
        self.transform, self.blank = transform, torch.zeros(in_chans, img_size, img_size, dtype=torch.uint8)

    def __len__(self) -> int:
        return len(self.ds)

    def labels(self) -> list[int]:
        return self.ds[self.label_key]

    def name_of(self, i: int) -> str:
        return _file_name(self.ds[int(i)][self.image_key], i)

    def __getitem__(self, item):
        i, seed = item if isinstance(item, tuple) else (item, None)
        row = self.ds[int(i)]
        data, name = _encoded(row[self.image_key], i)
        with seeded(seed):
            return pil_sample(data, name, int(row[self.label_key]), self.transform, self.in_chans, self.blank)


class EncodedImageDataset:
    """Map-style dataset for `decode: device`: ((image, file name), label), the image being the
    encoded JPEG bytes as a 1-D uint8 tensor; one in another format (a PNG, even one named .JPEG)
    is decoded here to a uint8 CHW tensor (Pillow), and one that cannot be read is None (the
    training process counts and skips it: tensor_augment.DeviceTransforms)."""

    def __init__(self, ds, image_key: str, label_key: str, in_chans: int):
        import datasets

        self.ds = ds.cast_column(image_key, datasets.Image(decode=False))
        self.image_key, self.label_key, self.in_chans = image_key, label_key, in_chans

    def __len__(self) -> int:
        return len(self.ds)

    def labels(self) -> list[int]:
        return self.ds[self.label_key]

    def __getitem__(self, i: int):
        row = self.ds[int(i)]
        data, name = _encoded(row[self.image_key], i)
        return encoded_sample(data, name, int(row[self.label_key]), self.in_chans)


@dataclass
class EncodedBatch:
    """A batch of `decode: device` images: each its own size (or None: unreadable), with its file name."""

    images: list
    names: list

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, part: slice) -> EncodedBatch:
        return EncodedBatch(self.images[part], self.names[part])


def collate_encoded(items: list) -> tuple[EncodedBatch, torch.Tensor]:  # noqa: F821
    """A batch of encoded images stays a list (each its own size); labels become a tensor."""
    import torch

    return (EncodedBatch([x for (x, _), _ in items], [n for (_, n), _ in items]),
            torch.tensor([y for _, y in items], dtype=torch.int64))


def _posterize(img, bits_to_keep, **_kwargs):
    """timm's posterize, with 0 bits kept meaning what it meant before Pillow refused it (a black
    image). RandAugment's 'inc1' posterize keeps 4 - int(0.4 m) bits: 0 at magnitude 10, which
    m9-mstd0.5 draws about 2% of the time, and which Pillow >= 11 rejects with a ValueError."""
    from PIL import Image, ImageOps

    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return Image.new(img.mode, img.size)
    return ImageOps.posterize(img, bits_to_keep)


def _fix_posterize(transform) -> None:
    """Point every posterize op of the RandAugment inside `transform` at _posterize."""
    from timm.data.auto_augment import RandAugment

    for t in getattr(transform, "transforms", []):
        if isinstance(t, RandAugment):
            for op in t.ops:
                if op.name.startswith("Posterize"):
                    op.aug_fn = _posterize


def build_transforms(meta: dict, recipe: Recipe):
    """DeiT-style train and eval transforms from timm, in timm's prefetcher form: they end at a
    uint8 tensor (normalisation and random erasing follow on the device: tensor_augment.Normalized)."""
    from timm.data import create_transform

    size = meta["img_size"]
    common = dict(input_size=(meta["in_chans"], size, size), mean=tuple(meta["mean"]), std=tuple(meta["std"]),
                  interpolation="bicubic")
    augment = recipe.augment
    train = create_transform(is_training=True, auto_augment="rand-m9-mstd0.5-inc1" if augment else None,
                             use_prefetcher=True, **common)
    evaluate = create_transform(is_training=False, use_prefetcher=True, **common)
    _fix_posterize(train)
    return train, evaluate


def _load_shard_splits(meta: dict, recipe: Recipe, workers: int, pin_memory: bool):
    """kind webdataset: tar shards read in sequence (shards.py), decoded as `decode` says."""
    import functools

    import torch

    from .shards import ShardSplit
    from .splits import Splits

    keys, shards, chans = (meta["image_key"], meta["label_key"]), meta["shards"], meta["in_chans"]
    if meta.get("decode", "pil") == "device":
        from .tensor_augment import DeviceTransforms

        sample = functools.partial(encoded_sample, in_chans=chans)
        train, evaluate = (ShardSplit(shards[role], keys, sample, collate_encoded, workers,
                                      labels=meta["eval_labels"] if role == "eval_split" else None)
                           for role in ("train_split", "eval_split"))
        return Splits(train=train, eval=evaluate, meta=meta, finish=DeviceTransforms(meta, recipe))
    from .tensor_augment import Normalized

    train_tf, eval_tf = build_transforms(meta, recipe)
    blank = torch.zeros(chans, meta["img_size"], meta["img_size"], dtype=torch.uint8)
    collate = torch.utils.data.default_collate
    train, evaluate = (ShardSplit(shards[role], keys, functools.partial(pil_sample, transform=tf, in_chans=chans,
                                                                        blank=blank), collate, workers, pin_memory,
                                  labels=meta["eval_labels"] if role == "eval_split" else None)
                       for role, tf in (("train_split", train_tf), ("eval_split", eval_tf)))
    return Splits(train=train, eval=evaluate, meta=meta, finish=Normalized(meta, recipe))


def load_image_splits(meta: dict, recipe: Recipe, pin_memory: bool = False):
    from .splits import LoaderSplit, Splits, worker_count
    from .tensor_augment import Normalized

    workers = worker_count(recipe.num_workers)
    if meta["kind"] == "webdataset":
        return _load_shard_splits(meta, recipe, workers, pin_memory)
    if meta.get("decode", "pil") == "device":
        from .tensor_augment import DeviceTransforms

        train, evaluate = (EncodedImageDataset(load_split(meta, meta[role]), meta["image_key"], meta["label_key"],
                                               meta["in_chans"]) for role in ("train_split", "eval_split"))
        return Splits(train=LoaderSplit(train, workers, collate=collate_encoded, persistent=True),
                      eval=LoaderSplit(evaluate, workers, collate=collate_encoded), meta=meta,
                      finish=DeviceTransforms(meta, recipe))
    train_tf, eval_tf = build_transforms(meta, recipe)
    train = HFImageDataset(load_split(meta, meta["train_split"]), meta["image_key"], meta["label_key"],
                           train_tf, meta["in_chans"], meta["img_size"])
    evaluate = HFImageDataset(load_split(meta, meta["eval_split"]), meta["image_key"], meta["label_key"],
                              eval_tf, meta["in_chans"], meta["img_size"])
    return Splits(train=LoaderSplit(train, workers, pin_memory, persistent=True),
                  eval=LoaderSplit(evaluate, workers, pin_memory),
                  meta=meta, finish=Normalized(meta, recipe))


def open_images(manifest_path: str, spec: RunSpec, device):
    """What a run reads (the kind's `open`, for hub, imagefolder and webdataset): both splits
    through loaders, decoded as the recipe of `spec` says; pinned memory for a CUDA device."""
    return load_image_splits(read_json(manifest_path), spec.recipe,
                             pin_memory=str(device).startswith("cuda"))


# Training-set sizes of hub datasets where no prepared manifest says (`leaner cost`: an epoch is one pass)
KNOWN_HUB_ROWS = {"ILSVRC/imagenet-1k": 1_281_167, "imagenet-1k": 1_281_167, "uoft-cs/cifar10": 50_000,
                  "cifar10": 50_000, "uoft-cs/cifar100": 50_000, "cifar100": 50_000}
SAMPLE_SIDE = 288  # rehearsal JPEGs are larger than the crop, as ImageNet's are (~400 x 350)


def hub_rows(entry: dict, manifest: dict | None, spec: RunSpec) -> int | None:
    """The known size of the hub dataset it names."""
    return KNOWN_HUB_ROWS.get(entry["name"])


def image_sample(name: str, entry: dict, folder: Path) -> dict:
    """An image folder of the entry's classes and channels: one JPEG per class in train (the class
    count is the folders'), two in validation."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    mode = "L" if entry["in_chans"] == 1 else "RGB"
    for split, count in (("train", entry["num_classes"]), ("validation", 2)):
        for c in range(count):
            path = folder / "images" / split / f"class{c:04d}" / "0.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            coarse = rng.integers(0, 256, (9, 9, 3), dtype=np.uint8)  # smooth, photo-like content
            image = Image.fromarray(coarse).resize((SAMPLE_SIDE, SAMPLE_SIDE - 32), Image.BILINEAR).convert(mode)
            image.save(path, quality=90)
    return {**entry, "kind": "imagefolder", "path": str(folder / "images"), "train_split": "train",
            "eval_split": "validation", "image_key": "image", "label_key": "label"}


# The kinds this module defines: their records, with the code above.
add_kind(DatasetKind(
    "hub", {"subset": None, **IMAGE_LOADING}, settings(240, 16000, 4, True), required=("name", "num_classes"),
    from_hub=always, tasks_read=IMAGE_SPLITS,
    prepare=prepare_images, open=open_images, sample=image_sample, rows=hub_rows,
    keys={**shared("name", "subset", "revision"), **IMAGE_KEY_SCHEMA},
    about="a Hugging Face hub dataset by name."))
add_kind(DatasetKind(
    "imagefolder", dict(IMAGE_LOADING), settings(240, 16000, 4, False), required=("path", "num_classes"),
    check=check_imagefolder, tasks_read=IMAGE_SPLITS,
    prepare=prepare_images, open=open_images, sample=image_sample,
    keys={**shared("path"), **IMAGE_KEY_SCHEMA},
    about="a local folder with train/ and val/ class sub-folders."))
add_kind(DatasetKind(
    "webdataset", {**IMAGE_LOADING, "image_key": "jpg", "label_key": "cls"}, settings(240, 4000, 1, False),
    required=("path", "num_classes"), check=check_webdataset, tasks_read=IMAGE_SPLITS,
    prepare=prepare_webdataset, open=open_images, sample=image_sample,
    keys={**shared("path"), **IMAGE_KEY_SCHEMA},
    about="a folder of tar shards (*{split}-*.tar, as the hub's timm/imagenet-1k-wds), read in sequence."))
