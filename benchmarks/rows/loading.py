"""Rows 1b-1d of benchmarks/run.py, the input pipeline: data loading against the step it feeds (and the
loader's rate per worker, `--loader-rate`), `decode: device`'s batched augmentation against the
per-image one, and reading the prepared data against decoding it (the image sets they read:
image_sets.py)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from .common import REPO, RUN, _unpack, median_spread, table
from .image_sets import _image_manifest, _jpeg_means, _write_images

# ----------------------------------------------------------------------------- 1b. data loading

def _loader_rate(manifest: str, workers: int, batch: int, device: str = "cpu", batches: int | None = None) -> float:
    """Images per second out of the training loader (read, decode, DeiT augmentation, collate), as
    model input on `device` (finished there: normalised and erased, or for `decode: device` decoded
    and augmented), timed from the loader's start (its workers' start-up included) over `batches`
    batches (default: 10 a worker, at least 10), across epochs where one is shorter: a rate over a
    stretch that holds many of each worker's batches, not the arrival of batches built before the
    clock started."""
    import itertools

    from leaner.data import load_splits
    from leaner.schema import Recipe

    splits = load_splits(manifest, Recipe.of({"augment": True, "num_workers": workers}))
    dev, want = torch.device(device), batches or max(10, 10 * workers)
    if splits.finish is not None:  # its lazy start (CUDA, nvJPEG, kornia) is not the loader's: warmed before
        x, y = next(splits.eval.eval_batches(batch, limit=batch))
        _finisher(splits.finish)(x, y, dev, 0)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    t0, n, k = time.perf_counter(), 0, 0
    for epoch in itertools.count():
        for x, y in splits.train.train_batches(batch, seed=0, epoch=epoch):
            if splits.finish is not None:  # a tree whose workers finished the batch has none (row 1f's baseline)
                x, y = _finisher(splits.finish)(x, y, dev, k)
            n, k = n + len(x), k + 1
            if k == want:
                break
        if k == want:
            break
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def loader_rate_per_worker(repeats: int, workers: int = 2, images: int = 256) -> float:
    """Images/s one Pillow worker gives at 224 px from JPEGs of ImageNet's sizes and qualities
    (_write_photos) with the DeiT augmentation (row 1b's ImageNet-sized case at `workers` workers,
    the best of `repeats`, divided by the workers): what `leaner cost --loader-rate` takes."""
    with tempfile.TemporaryDirectory() as tmp:
        manifest = _image_manifest(Path(tmp), images, "imagenet", 224, "jpg", ("pil",))["pil"]
        return max(_loader_rate(manifest, workers, 32) for _ in range(repeats)) / workers


def bench_loading(manifest: str, repeats: int, trained: dict, work: Path, quick: bool) -> tuple[str, float]:
    """In-memory batches against the step they feed; the image loader's throughput per worker at
    CIFAR (32 px, PNG) and ImageNet (224 px from 256 px JPEG) sizes with the DeiT augmentation."""
    from leaner.data import load_splits
    from leaner.schema import Recipe

    spec = trained["spec"]
    split = load_splits(manifest, Recipe.of(spec["recipe"])).train
    fetch = []
    for _ in range(repeats):
        t0, steps = time.perf_counter(), 0
        for _batch in split.train_batches(spec["recipe"]["batch_size"], 0, 0):
            steps += 1
        fetch.append((time.perf_counter() - t0) / steps)
    step_s = trained["train_s"] / trained["steps"]
    rows = [["digits in memory (index lookup)", "-", median_spread([1e3 * f for f in fetch]) + " ms/batch",
             f"{1e3 * step_s:.3g} ms", median_spread([100 * f / step_s for f in fetch]) + " %"]]
    rates_224: dict[str, float] = {}
    n = 32 if quick else 256
    worker_counts = [0] if quick else sorted({0, 1, os.cpu_count() or 1})
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cases = (("CIFAR-like 32 px PNG", 32, 32, "png"), ("224 px from 256 px JPEGs", 224, 256, "jpg"),
             ("ImageNet-sized JPEGs (~400 x 350 px), 224 px", 224, "imagenet", "jpg"))
    for label, size, stored, fmt in cases:
        manifests = _image_manifest(work / f"images{size}-{stored}", n, stored, size, fmt)
        if stored == "imagenet":
            photo_pixels, photo_kib = _jpeg_means(work / f"images{size}-{stored}" / "imgs")
        for decode, manifest_path in manifests.items():
            # decode: device does its work in the training process: its rate is that process's
            for workers in (worker_counts if decode == "pil" else [0]):
                rates = [_loader_rate(manifest_path, workers, 32, device) for _ in range(repeats)]
                per_proc = statistics.median(rates) / max(1, workers)
                if stored == "imagenet":  # what row 5 and `leaner cost` take: ImageNet's sizes
                    rates_224[decode] = max(rates_224.get(decode, 0.0), per_proc)
                where = "Pillow in workers" if decode == "pil" else f"on {device} in the training process"
                rows.append([f"{label}, decode: {decode} ({where})", workers, median_spread(rates) + " images/s", "-",
                             f"{per_proc:.0f} images/s per process"])
    text = table("1b. Data loading against the step it feeds", ["data", "workers", "loading", "training step",
                                                              "loading / step"], rows)
    text += (f"\nIn-memory batches (digits, P2's points, token windows) cost a fraction of the step above. "
             f"Image datasets go through a torch DataLoader with `recipe.num_workers` processes (pinned memory on "
             f"CUDA); {n} images per split, batch 32, DeiT training transform (RandomResizedCrop, flip, "
             f"RandAugment m9, random erasing). `decode: device`: the workers read the encoded bytes, the "
             f"training process decodes each batch (nvJPEG on a GPU) and runs the same recipe on tensors. "
             f"ImageNet-sized: photo-like JPEGs made here at ImageNet's sizes and qualities (mean "
             f"{photo_pixels:,.0f} pixels, {photo_kib:.0f} KiB a file; IMAGENET_SIZES; ImageNet's ~140,000 and "
             f"~110). Row 5 divides a GPU's images/s by their per-process rate to give "
             f"the processes it needs.\n")
    return text, rates_224


# ----------------------------------------------------------------------------- 1c. device augmentation

PER_IMAGE_REV = "cf78aec"  # the last commit whose `decode: device` augmented image by image


def _augment_rate(manifest: str, batch: int, n_batches: int, repeats: int, device: str) -> dict:
    """Images/s of `decode: device`'s work in the training process (decode, crop, flip, RandAugment,
    normalise, erase) on batches read beforehand, so that the workers' reading is not in it; and the
    operations on image-sized tensors (>= 1024 elements, views aside) it dispatches per image:
    each is a kernel launch on a GPU, what launch overhead scales with."""
    import itertools
    import random

    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            first = out[0] if isinstance(out, (tuple, list)) and out else out
            view = any(r.alias_info is not None for r in func._schema.returns)
            Count.ops += isinstance(first, torch.Tensor) and first.numel() >= 1024 and not view
            return out

    splits = _splits_of_any_tree(manifest, {"augment": True, "num_workers": 0})
    batches = list(itertools.islice(splits.train.train_batches(batch, seed=0, epoch=0), n_batches))
    dev, rates = torch.device(device), []
    finish = _finisher(splits.finish)
    finish(*batches[0], dev, 0)  # warm: lazy imports, first allocations
    for _ in range(repeats):
        torch.manual_seed(0)
        random.seed(0)
        t0, n = time.perf_counter(), 0
        for k, (x, y) in enumerate(batches):
            n += len(finish(x, y, dev, k)[0])
        if dev.type == "cuda":
            torch.cuda.synchronize()
        rates.append(n / (time.perf_counter() - t0))
    torch.manual_seed(0)
    random.seed(0)
    with Count():
        for k, (x, y) in enumerate(batches):
            finish(x, y, dev, k)
    return {"rates": rates, "ops_per_image": Count.ops / n}


def _params(fn) -> set[str]:
    import inspect

    return set(inspect.signature(fn).parameters)


def _finisher(finish):
    """finish.train(x, y, device, seed) of this tree, or of an older one whose batches drew from the
    process's generators (row 1c's baseline: no seed)."""
    if "seed" in _params(finish.train):
        return finish.train
    return lambda x, y, device, seed: finish.train(x, y, device)


def _splits_of_any_tree(manifest: str, recipe: dict):
    """load_splits of the tree this process imports: this one's takes a typed Recipe, an older one's
    (row 1c's baseline, before runspec.py) the recipe's dict."""
    from leaner.data import load_splits

    try:
        from leaner.runspec import RunSpec  # noqa: F401  (a tree that types the recipe before the data)
        from leaner.schema import Recipe
    except ImportError:
        return load_splits(manifest, recipe)
    return load_splits(manifest, Recipe.of(recipe))


def _augment_rates_of(src: Path, manifest: str, batch: int, n_batches: int, repeats: int, device: str) -> dict:
    """_augment_rate with the package of another source tree, in a process of its own."""
    env = {**os.environ, "LEANER_BENCH_SRC": str(src)}
    out = subprocess.run([sys.executable, str(RUN), "--augment-rate", manifest, str(batch),
                          str(n_batches), str(repeats), device], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"row 1c with {src} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_augment(repeats: int, work: Path, quick: bool, baseline_rev: str | None) -> str:
    """The batched device augmentation against the per-image one it replaced (baseline_rev's
    source, unpacked from git), the same encoded images, one thread each, in alternating processes."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch, n_batches = (64, 1) if quick else (128, 4)  # 128: a GPU's share of the paper's 1024
    root = work / "augment"
    manifest = _image_manifest(root, batch * n_batches, 256, 224, "jpg", ("device",))["device"]
    trees = {"batched (this tree)": REPO / "src"}
    baseline, note = _unpack(baseline_rev, root / "baseline")
    if baseline:
        trees[f"per image ({baseline_rev})"] = baseline
    rates: dict[str, list[float]] = {label: [] for label in trees}
    ops: dict[str, float] = {}
    for _ in range(repeats):  # alternate, so that a slow spell of the machine hits both
        for label, src in trees.items():
            measured = _augment_rates_of(src, manifest, batch, n_batches, 1, device)
            rates[label] += measured["rates"]
            ops[label] = measured["ops_per_image"]
    rows = [[label, median_spread(r) + " images/s", f"{ops[label]:.1f}"] for label, r in rates.items()]
    if len(rates) == 2:
        (batched, per_image), (ops_b, ops_p) = rates.values(), ops.values()
        rows.append(["ratio, batched / per image", median_spread([a / b for a, b in zip(batched, per_image)]),
                     f"{ops_b / ops_p:.3f}"])
    text = table(f"1c. `decode: device` augmentation on {device}: batched against per image",
                 ["path", "rate", "image-sized tensor ops per image (kernels on a GPU)"], rows)
    return text + (f"\n{batch * n_batches} JPEGs of 256 px, batch {batch}, 224 px crops, the DeiT training recipe "
                   f"(RandAugment m9, erasing 0.25); read beforehand, timed from decode to the normalised, erased "
                   f"batch; one thread.{note}\n")


# ----------------------------------------------------------------------------- 1d. read path

def bench_read(repeats: int, work: Path, quick: bool) -> str:
    """Reading the prepared data as the loader's workers do, against decoding it (libjpeg-turbo,
    one thread), per core, the same images: a hub dataset's Arrow file (a row's encoded bytes,
    memory-mapped, `decode: device`'s dataset) in the epoch's random order and in file order, and
    webdataset tar shards read in sequence (kind webdataset)."""
    import datasets
    import numpy as np
    from torchvision.io import ImageReadMode, decode_jpeg

    from leaner.data.images import EncodedImageDataset
    from leaner.data.shards import _samples, write_shard

    n, size = (64, 384) if quick else (1024, 384)
    root = work / "read"
    _write_images(root / "imgs", n, size, "jpg")
    files = sorted((root / "imgs" / "train").rglob("*.jpg"))
    images = [f.read_bytes() for f in files]
    labels = [int(f.parent.name[1:]) for f in files]
    ds = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": f.name} for b, f in zip(images, files)],
                                     "label": labels},
                                    features=datasets.Features({"image": datasets.Image(),
                                                                "label": datasets.Value("int64")}))
    ds.save_to_disk(str(root / "arrow"))  # the bytes inside the Arrow file, as a hub dataset's are
    reader = EncodedImageDataset(datasets.load_from_disk(str(root / "arrow")), "image", "label", 3)
    per_shard = max(1, n // 8)
    shards = []
    for k in range(0, n, per_shard):
        shards.append(root / f"read-train-{k // per_shard:04d}.tar")
        write_shard(shards[-1], ((f"{i:06d}", {"jpg": images[i], "cls": str(labels[i]).encode()})
                                 for i in range(k, min(n, k + per_shard))))
    order = np.random.default_rng(0).permutation(n)
    rates: dict[str, list[float]] = {"Arrow rows, random order": [], "Arrow rows, file order": [],
                                     "tar shards, in sequence": [], "decode (libjpeg-turbo)": []}
    for _ in range(repeats):
        for label, idx in (("Arrow rows, random order", order), ("Arrow rows, file order", range(n))):
            t0 = time.perf_counter()
            encoded = [reader[int(i)][0][0] for i in idx]
            rates[label].append(n / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        read = sum(1 for f in shards for _ in _samples(f, "jpg", "cls"))
        rates["tar shards, in sequence"].append(read / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for data in encoded:
            decode_jpeg(data, mode=ImageReadMode.RGB)
        rates["decode (libjpeg-turbo)"].append(n / (time.perf_counter() - t0))
    decode = statistics.median(rates["decode (libjpeg-turbo)"])
    rows = [[label, median_spread(r) + " images/s", f"{statistics.median(r) / decode:.2f}"]
            for label, r in rates.items()]
    mean_kb = statistics.mean(len(b) for b in images) / 1024
    return table("1d. Reading the prepared data against decoding it, per core", ["step", "rate", "/ decode"], rows) + \
        (f"\n{n} JPEGs of {size} px ({mean_kb:.0f} KiB each on average; ImageNet's are about 110 KiB), from the page "
         f"cache; one process, one thread. Arrow rows through the loader's dataset for `decode: device` (the bytes "
         f"inside the Arrow file, as a hub dataset's are); shards of {per_shard} samples read as kind webdataset's "
         f"workers read them.\n")
