"""The image sets the input pipeline's rows read (benchmarks/run.py rows 1b-1f and 5, gpu-check's
vit sections): textured images at a fixed size, and photo-like JPEGs at ImageNet's sizes and
qualities, made here (no download), prepared as a local ImageFolder for each decode path."""

from __future__ import annotations

import statistics
from pathlib import Path


def _write_images(root: Path, n: int, size: int, fmt: str) -> None:
    """A local ImageFolder (train/validation, 4 classes) of n textured images per split."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "validation"):
        for i in range(n):
            folder = root / split / f"c{i % 4}"
            folder.mkdir(parents=True, exist_ok=True)
            base = rng.integers(0, 255, (size // 8 + 1, size // 8 + 1, 3), dtype=np.uint8)
            pixels = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))[:size, :size]
            Image.fromarray(pixels).save(folder / f"{i}.{fmt}", quality=90)


# A stand-in for ImageNet's training JPEGs, made here (no download): (width, height) and share, and
# the JPEG qualities, drawn so that the means come near ImageNet's (~400 x 350 px, ~110 KiB a file):
# mostly photos with a 500-px long side (4:3 and 3:2, a quarter of them portrait), a quarter small.
IMAGENET_SIZES = (((500, 375), 0.35), ((375, 500), 0.10), ((500, 333), 0.20), ((333, 500), 0.10),
                  ((250, 188), 0.25))
IMAGENET_QUALITIES = (85, 90, 95)
PHOTO_DETAIL = 36  # grey levels of fine noise over the smooth field: photo-like entropy (calibrated to ~110 KiB)


def _write_photos(root: Path, n: int, unique: int = 256) -> None:
    """A local ImageFolder (train/validation, 4 classes) of n photo-like JPEGs per split at
    IMAGENET_SIZES and IMAGENET_QUALITIES: a smooth random field (coarse and mid-scale colour
    blobs) with fine noise, which compresses about as photographs do. Past `unique` images a split
    repeats the first ones' bytes (drawing one takes ~15 ms)."""
    import shutil

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    sizes, shares = zip(*IMAGENET_SIZES)
    for split in ("train", "validation"):
        drawn = []
        for i in range(n):
            folder = root / split / f"c{i % 4}"
            folder.mkdir(parents=True, exist_ok=True)
            if i >= unique:
                shutil.copyfile(drawn[i % unique], folder / f"{i}.jpg")
                continue
            w, h = sizes[rng.choice(len(sizes), p=shares)]
            coarse = Image.fromarray(rng.integers(0, 255, (h // 16 + 2, w // 16 + 2, 3), dtype=np.uint8))
            mid = Image.fromarray(rng.integers(0, 255, (h // 4 + 1, w // 4 + 1, 3), dtype=np.uint8))
            field = 0.7 * np.asarray(coarse.resize((w, h), Image.BICUBIC)) + \
                0.3 * np.asarray(mid.resize((w, h), Image.BILINEAR))
            noisy = (field + rng.normal(0, PHOTO_DETAIL, (h, w, 3))).clip(0, 255).astype(np.uint8)
            path = folder / f"{i}.jpg"
            Image.fromarray(noisy).save(path, quality=int(rng.choice(IMAGENET_QUALITIES)))
            drawn.append(path)


def _jpeg_means(folder: Path) -> tuple[float, float]:
    """(mean pixels, mean KiB) of the JPEGs under `folder` (sizes from their headers)."""
    from PIL import Image

    files = sorted(folder.rglob("*.jpg"))
    pixels = [Image.open(f).size for f in files]
    return statistics.mean(w * h for w, h in pixels), statistics.mean(f.stat().st_size / 1024 for f in files)


def _image_manifest(root: Path, n: int, stored: int | str, img_size: int, fmt: str, decodes=("pil", "device")) -> dict:
    """A local ImageFolder of n images per split, stored at `stored` px (or "imagenet": photo-like
    JPEGs at ImageNet's sizes, _write_photos), prepared for each decode path: {decode: manifest path}."""
    from leaner.data import prepare

    if stored == "imagenet":
        _write_photos(root / "imgs", n)
    else:
        _write_images(root / "imgs", n, stored, fmt)
    meta = {"kind": "imagefolder", "path": str(root / "imgs"), "train_split": "train", "eval_split": "validation",
            "image_key": "image", "label_key": "label", "num_classes": 4, "img_size": img_size, "in_chans": 3,
            "mean": [0.5] * 3, "std": [0.25] * 3}
    manifests = {}
    for decode in decodes:
        manifests[decode] = str(root / decode / "manifest.json")
        prepare(root.name, {**meta, "decode": decode}, manifests[decode])
    return manifests
