"""The DeiT image recipe on uint8 tensors, on the training device (a dataset's `decode: device`).

With `decode: pil` (the default) the loader's worker processes decode each JPEG with Pillow and
run timm's transforms on it: about 236 images/s per worker at 224 px, so one H200 at 3400 images/s
needs ~15 workers. With `decode: device` the workers only read the encoded bytes; the training
process decodes a whole batch at once with torchvision (nvJPEG on a GPU, libjpeg-turbo on the CPU;
other formats are decoded in the workers) and augments it here, on the device.

The recipe keeps its meaning, op for op (timm's `create_transform(is_training=True,
auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, interpolation="bicubic")`):
  - RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3), bicubic with antialiasing; horizontal flip 0.5;
  - RandAugment: 2 of timm's 15 "increasing" ops per image, each applied with probability 0.5, at
    magnitude N(9, 0.5) clipped to [0, 10], with timm's own level-to-argument functions (so the
    same ranges and random signs). The pixel ops are torchvision's tensor versions of Pillow's
    (autocontrast, equalize, invert, posterize, solarize, enhance = blend with grey/mean/blur);
    the geometric ones (rotate, shear, translate) fill with the dataset mean as timm does, but
    resample bilinearly (torchvision has no bicubic affine for tensors) and shear about the
    top-left corner, like Pillow;
  - normalisation, then timm's RandomErasing (probability 0.25, per-pixel normal noise).
Evaluation: resize the short side to img_size / 0.875 (bicubic, antialiased), centre crop.
"""

from __future__ import annotations

import math
import random

import torch

from .splits import CPU_DECODED, SKIPPED

CROP_PCT = 0.875  # timm's default eval crop
RAND_AUGMENT = {"ops": 2, "prob": 0.5, "magnitude": 9.0, "magnitude_std": 0.5, "max": 10.0}
JPEG_MAGIC = b"\xff\xd8\xff"


def open_image(data: bytes, channels: int):
    """Any image Pillow reads (CMYK and progressive JPEGs, PNG, grayscale) as a Pillow image of
    `channels` (1: grayscale, 3: RGB), decoded; None for a file that cannot be read."""
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.convert("L" if channels == 1 else "RGB")
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def decode_on_cpu(data: bytes, channels: int) -> torch.Tensor | None:
    """open_image as a uint8 CHW tensor; None for a file that cannot be read."""
    import numpy as np

    img = open_image(data, channels)
    if img is None:
        return None
    pixels = np.asarray(img)
    return torch.from_numpy(pixels.copy()).reshape(*pixels.shape[:2], -1).permute(2, 0, 1).contiguous()


def _affine(img, fill, **kw):
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    base = {"angle": 0.0, "translate": [0.0, 0.0], "scale": 1.0, "shear": [0.0, 0.0]}
    return F.affine(img, **{**base, **kw}, interpolation=InterpolationMode.BILINEAR, fill=fill)


def _solarize_add(img, add, thresh=128):
    return torch.where(img < thresh, (img.to(torch.int16) + add).clamp(max=255).to(torch.uint8), img)


def _op(name: str, img: torch.Tensor, args: tuple, fill: list[float]) -> torch.Tensor:
    """timm's op `name` with timm's arguments `args`, on a uint8 CHW tensor."""
    from torchvision.transforms.v2 import functional as F

    h, w = img.shape[-2:]
    if name == "AutoContrast":
        return F.autocontrast(img)
    if name == "Equalize":
        return F.equalize(img)
    if name == "Invert":
        return F.invert(img)
    if name == "Rotate":  # Pillow turns counter-clockwise, torchvision's affine clockwise
        return _affine(img, fill, angle=-float(args[0]))
    if name == "PosterizeIncreasing":  # 0 bits kept is a black image (see images._posterize)
        return F.posterize(img, int(args[0])) if args[0] > 0 else torch.zeros_like(img)
    if name == "SolarizeIncreasing":
        return F.solarize(img, float(args[0]))
    if name == "SolarizeAdd":
        return _solarize_add(img, int(args[0]))
    if name == "ColorIncreasing":
        return F.adjust_saturation(img, args[0]) if img.shape[0] == 3 else img
    if name == "ContrastIncreasing":
        return F.adjust_contrast(img, args[0])
    if name == "BrightnessIncreasing":
        return F.adjust_brightness(img, args[0])
    if name == "SharpnessIncreasing":
        return F.adjust_sharpness(img, args[0])
    if name in ("ShearX", "ShearY"):  # Pillow's shear matrix, about the top-left corner
        angle = math.degrees(math.atan(args[0]))
        return _affine(img, fill, shear=[angle, 0.0] if name == "ShearX" else [0.0, angle], center=[0.0, 0.0])
    if name in ("TranslateXRel", "TranslateYRel"):  # Pillow samples at x + shift: the image moves back
        shift = [-args[0] * w, 0.0] if name == "TranslateXRel" else [0.0, -args[0] * h]
        return _affine(img, fill, translate=shift)
    raise ValueError(f"unknown RandAugment op {name!r}")


def rand_augment_ops() -> list[str]:
    from timm.data.auto_augment import _RAND_INCREASING_TRANSFORMS

    return list(_RAND_INCREASING_TRANSFORMS)


def rand_augment(img: torch.Tensor, fill: list[float], hparams: dict | None = None) -> torch.Tensor:
    """timm's rand-m9-mstd0.5-inc1 on one uint8 CHW tensor (timm's op list and level functions,
    drawn from Python's `random` as timm draws them)."""
    from timm.data.auto_augment import LEVEL_TO_ARG

    cfg, hparams = RAND_AUGMENT, hparams or {}
    for name in random.choices(rand_augment_ops(), k=cfg["ops"]):
        if random.random() > cfg["prob"]:
            continue
        magnitude = max(0.0, min(random.gauss(cfg["magnitude"], cfg["magnitude_std"]), cfg["max"]))
        level_fn = LEVEL_TO_ARG[name]
        img = _op(name, img, level_fn(magnitude, hparams) if level_fn else (), fill)
    return img


def jpeg_decoder():
    """The batched device decoder: torchvision's decode_jpeg (nvJPEG on a GPU, libjpeg-turbo on the CPU)."""
    from torchvision.io import decode_jpeg

    return decode_jpeg


class DeviceTransforms:
    """Decode a batch of encoded images on `device` and apply the train or eval recipe. A JPEG the
    device decoder rejects (nvJPEG: CMYK, some progressive and malformed files) is decoded on the
    CPU with Pillow instead; a file nothing can read is left out of its batch, label and all.
    Both are counted (`take_events`), for a line in the log each epoch and a count in metrics.json."""

    def __init__(self, meta: dict, recipe: dict):
        from timm.data.random_erasing import RandomErasing

        self.size, self.channels = meta["img_size"], meta["in_chans"]
        self.mean, self.std = list(meta["mean"]), list(meta["std"])
        self.fill = [round(255 * m) for m in self.mean]
        self._scale: tuple[torch.Tensor, torch.Tensor] | None = None  # mean, std on the batch's device
        self.augment = recipe.get("augment", False)
        self.erasing = RandomErasing(probability=0.25, mode="pixel", max_count=1) if self.augment else None
        self.events: dict[str, list[str]] = {CPU_DECODED: [], SKIPPED: []}

    def _decode_jpegs(self, data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        from torchvision.io import ImageReadMode

        return jpeg_decoder()(data, mode=ImageReadMode.GRAY if self.channels == 1 else ImageReadMode.RGB, device=device)

    def decode(self, batch, device: torch.device) -> tuple[list[torch.Tensor], list[int]]:
        """(uint8 CHW images on `device`, the batch positions they come from): JPEGs (1-D byte
        tensors) decoded together, then one by one if the device decoder rejects the batch, with
        Pillow where it rejects the image; the rest as the workers decoded them; unreadable files
        left out."""
        items, names = batch.images, batch.names
        out = [t.to(device, non_blocking=True) if t is not None and t.ndim == 3 else None for t in items]
        encoded = [i for i, t in enumerate(items) if t is not None and t.ndim == 1]
        if encoded:
            try:
                decoded = self._decode_jpegs([items[i] for i in encoded], device)
            except RuntimeError:  # one image spoils a batched decode: find it
                decoded = [self._decode_one(items[i], names[i], device) for i in encoded]
            for i, img in zip(encoded, decoded):
                out[i] = img
        kept = [i for i, img in enumerate(out) if img is not None]
        self.events[SKIPPED] += [names[i] for i in range(len(out)) if out[i] is None]
        if not kept:
            raise RuntimeError(f"no image of this batch can be read: {', '.join(names)}")
        return [out[i] for i in kept], kept

    def _decode_one(self, data: torch.Tensor, name: str, device: torch.device) -> torch.Tensor | None:
        try:
            return self._decode_jpegs([data], device)[0]
        except RuntimeError:
            img = decode_on_cpu(data.numpy().tobytes(), self.channels)
            if img is not None:
                self.events[CPU_DECODED].append(name)
                return img.to(device, non_blocking=True)
            return None

    def take_events(self) -> dict[str, list[str]]:
        """The file names decoded on the CPU and skipped as unreadable since the last call."""
        events, self.events = self.events, {key: [] for key in self.events}
        return events

    def _normalize(self, batch: torch.Tensor) -> torch.Tensor:
        if self._scale is None or self._scale[0].device != batch.device:  # once: a copy to a GPU waits on it
            self._scale = tuple(torch.tensor(v, device=batch.device).view(1, -1, 1, 1) for v in (self.mean, self.std))
        mean, std = self._scale
        return (batch.float() / 255 - mean) / std

    def train(self, batch, labels: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The augmented, normalised batch on `device` and its labels (an unreadable file's dropped)."""
        from torchvision.transforms import InterpolationMode, RandomResizedCrop
        from torchvision.transforms.v2 import functional as F

        out = []
        images, kept = self.decode(batch, device)
        for img in images:
            top, left, h, w = RandomResizedCrop.get_params(img, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
            img = F.resized_crop(img, top, left, h, w, [self.size, self.size],
                                 interpolation=InterpolationMode.BICUBIC, antialias=True)
            if random.random() < 0.5:
                img = F.horizontal_flip(img)
            if self.augment:
                img = rand_augment(img, self.fill)
            out.append(img)
        x = self._normalize(torch.stack(out))
        if self.erasing is not None:
            self.erasing.device = x.device  # noise drawn where the batch is
            x = self.erasing(x)
        return x, labels[kept]

    def eval(self, batch, labels: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2 import functional as F

        scale = math.floor(self.size / CROP_PCT)
        images, kept = self.decode(batch, device)
        out = [F.center_crop(F.resize(img, scale, interpolation=InterpolationMode.BICUBIC, antialias=True),
                             [self.size, self.size]) for img in images]
        return self._normalize(torch.stack(out)), labels[kept]
