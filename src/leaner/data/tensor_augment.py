"""The DeiT image recipe on uint8 tensors, on the training device (a dataset's `decode: device`).

With `decode: pil` (the default) the loader's worker processes decode each JPEG with Pillow and
run timm's transforms on it up to uint8: ~100 images/s per worker at 224 px on the H200 machine's
cores, so one H200 at 3,400 images/s would need ~34 workers. With `decode: device` the workers only
read the encoded bytes; the training process decodes a whole batch at once with torchvision (nvJPEG
on a GPU, libjpeg-turbo on the CPU; other formats are decoded in the workers) and augments it
here, on the device.

The recipe keeps its meaning, op for op (timm's `create_transform(is_training=True,
auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, interpolation="bicubic")`), and all but the
crop runs on the whole batch at once, each sample with its own random parameters:
  - RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3), bicubic with antialiasing, one call per image
    (decoded images differ in size), then the batch is stacked; horizontal flip 0.5;
  - RandAugment: 2 of timm's 15 "increasing" ops per image, batched op by op (rand_augment.py);
  - normalisation, then timm's RandomErasing (probability 0.25, per-pixel normal noise).
Evaluation: resize the short side to img_size / 0.875 (bicubic, antialiased), centre crop.

Every random draw of a training batch comes from that batch's own seed (splits.mix_seeds of its
place in the run: seed, epoch, rank, batch), through a `random.Random` and torch generators of its
own, never the process's global ones: a batch is the same bits whenever it is made, so it can be
made ahead of the step (compute/side_stream.py read_ahead) and a resumed run makes what an
uninterrupted one did. `Normalized` is the part of this that `decode: pil` runs on the device too:
its workers send uint8 (a quarter of float32's bytes across the process boundary and the host-to-
device copy), and the training process normalises and erases each batch there, as timm's
PrefetchLoader does.
"""

from __future__ import annotations

import math
import random
import threading

import torch

from ..schema import Recipe
from .rand_augment import rand_augment
from .splits import CPU_DECODED, SKIPPED

CROP_PCT = 0.875  # timm's default eval crop
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


def crop_box(rng: random.Random, h: int, w: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """timm's RandomResizedCropAndInterpolation.get_params, its draws from `rng`: (top, left,
    height, width) of a crop of scale x the area and aspect ratio in `ratio` (log-uniform), ten
    tries, then the centre crop."""
    area = w * h
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = rng.uniform(*scale) * area
        aspect = math.exp(rng.uniform(*log_ratio))
        tw, th = int(round(math.sqrt(target_area * aspect))), int(round(math.sqrt(target_area / aspect)))
        if tw <= w and th <= h:
            return rng.randint(0, h - th), rng.randint(0, w - tw), th, tw
    if w / h < min(ratio):
        tw, th = w, int(round(w / min(ratio)))
    elif w / h > max(ratio):
        th, tw = h, int(round(h * max(ratio)))
    else:
        tw, th = w, h
    return (h - th) // 2, (w - tw) // 2, th, tw


ERASING = {"probability": 0.25, "min_area": 0.02, "max_area": 1 / 3, "min_aspect": 0.3}  # timm's, re_prob 0.25


def random_erase_(x: torch.Tensor, rng: random.Random, noise: torch.Generator) -> torch.Tensor:
    """timm's RandomErasing(probability=0.25, mode="pixel", max_count=1) on a normalised (n, C, H, W)
    batch, in place, sample by sample as timm draws it, its draws from `rng` and its per-pixel
    normal noise from `noise` (a generator on the batch's device)."""
    n, chans, h, w = x.shape
    lo, hi = math.log(ERASING["min_aspect"]), math.log(1 / ERASING["min_aspect"])
    for i in range(n):
        if rng.random() > ERASING["probability"]:
            continue
        for _ in range(10):
            target_area = rng.uniform(ERASING["min_area"], ERASING["max_area"]) * h * w
            aspect = math.exp(rng.uniform(lo, hi))
            eh, ew = int(round(math.sqrt(target_area * aspect))), int(round(math.sqrt(target_area / aspect)))
            if ew < w and eh < h:
                top, left = rng.randint(0, h - eh), rng.randint(0, w - ew)
                x[i, :, top:top + eh, left:left + ew] = torch.empty((chans, eh, ew), dtype=x.dtype,
                                                                    device=x.device).normal_(generator=noise)
                break
    return x


def generators(seed: int, device: torch.device) -> tuple[random.Random, torch.Generator, torch.Generator]:
    """A batch's own random sources from its seed: Python's (crop boxes, erasing boxes), torch's on
    the host (RandAugment's draws, flips) and torch's on `device` (erasing noise)."""
    host = torch.Generator().manual_seed(seed)
    on_device = host if device.type == "cpu" else torch.Generator(device=device).manual_seed(seed)
    return random.Random(seed), host, on_device


def jpeg_decoder():
    """The batched device decoder: torchvision's decode_jpeg (nvJPEG on a GPU, libjpeg-turbo on the CPU)."""
    from torchvision.io import decode_jpeg

    return decode_jpeg


class Normalized:
    """The end of the DeiT recipe on the training device, for uint8 batches (`decode: pil`, whose
    workers stop at uint8): the batch to the device, (x / 255 - mean) / std there, and for a
    training batch timm's random erasing (when the recipe augments) from the batch's own seed."""

    def __init__(self, meta: dict, recipe: Recipe):
        self.size, self.channels = meta["img_size"], meta["in_chans"]
        self.mean, self.std = list(meta["mean"]), list(meta["std"])
        self.augment = recipe.augment
        self._scale: tuple[torch.Tensor, torch.Tensor] | None = None  # mean, std on the batch's device

    def _normalize(self, batch: torch.Tensor) -> torch.Tensor:
        """(batch / 255 - mean) / std, as one scale and shift of one new float tensor."""
        if self._scale is None or self._scale[0].device != batch.device:  # once: a copy to a GPU waits on it
            mean, std = (torch.tensor(v, dtype=torch.float64) for v in (self.mean, self.std))
            self._scale = tuple(v.float().view(1, -1, 1, 1).to(batch.device) for v in (1 / (255 * std), mean / std))
        scale, shift = self._scale
        return batch.float().mul_(scale).sub_(shift)

    def _finish(self, x: torch.Tensor, rng: random.Random, noise: torch.Generator) -> torch.Tensor:
        x = self._normalize(x)
        return random_erase_(x, rng, noise) if self.augment else x

    def train(self, x: torch.Tensor, y: torch.Tensor, device: torch.device, seed: int) -> tuple[torch.Tensor,
                                                                                                torch.Tensor]:
        rng, _, noise = generators(seed, device)
        x = x.to(device, non_blocking=True)
        return self._finish(x, rng, noise), y.to(device, non_blocking=True)

    def eval(self, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        return self._normalize(x.to(device, non_blocking=True)), y.to(device, non_blocking=True)


class DeviceTransforms(Normalized):
    """Decode a batch of encoded images on `device` and apply the train or eval recipe. A JPEG the
    device decoder rejects (nvJPEG: CMYK, some progressive and malformed files) is decoded on the
    CPU with Pillow instead; a file nothing can read is left out of its batch, label and all.
    Both are counted (`take_events`), for a line in the log each epoch and a count in metrics.json."""

    def __init__(self, meta: dict, recipe: Recipe):

        super().__init__(meta, recipe)
        self.fill = [round(255 * m) for m in self.mean]
        self.hparams = {"img_mean": tuple(self.fill), "translate_const": int(self.size * 0.45)}  # as timm's factory
        self.events: dict[str, list[str]] = {CPU_DECODED: [], SKIPPED: []}
        self._events_lock = threading.Lock()  # batches may be made on a read-ahead thread

    def _decode_jpegs(self, data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        """Decode on `device`. On CUDA, nvJPEG works on a stream of its own and writes into memory
        the caching allocator handed out for the current stream, which kernels still queued there
        may be reading (pytorch/vision #9606: 134 of 200 runs corrupted on an H100): the host waits
        for the current stream before the decode and after it (the barrier torchcodec #1634 added),
        so the decode neither overwrites memory in use nor is read unfinished. A training batch is
        decoded with a side stream current (compute/side_stream.py): then these barriers wait for
        that stream's own work only, never for the training step's kernels."""
        from torchvision.io import ImageReadMode

        mode = ImageReadMode.GRAY if self.channels == 1 else ImageReadMode.RGB
        if device.type != "cuda":
            return jpeg_decoder()(data, mode=mode, device=device)
        stream = torch.cuda.current_stream(device)
        stream.synchronize()
        images = jpeg_decoder()(data, mode=mode, device=device)
        stream.synchronize()  # torchvision's decoder stream, which it made this one wait for
        return images

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
        with self._events_lock:
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
                with self._events_lock:
                    self.events[CPU_DECODED].append(name)
                return img.to(device, non_blocking=True)
            return None

    def take_events(self) -> dict[str, list[str]]:
        """The file names decoded on the CPU and skipped as unreadable since the last call."""
        with self._events_lock:
            events, self.events = self.events, {key: [] for key in self.events}
        return events

    def train(self, batch, labels: torch.Tensor, device: torch.device, seed: int,
              clock=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The augmented, normalised batch on `device` and its labels (an unreadable file's
        dropped), every draw from `seed` (generators). `clock(part)`, where given, is called as each
        part ends (decode, crop, flip, randaugment, normalise, erase): what gpu-check times them by."""
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2 import functional as F

        clock = clock or (lambda part: None)
        rng, host, noise = generators(seed, device)
        images, kept = self.decode(batch, device)
        clock("decode")
        crops = []
        for img in images:  # each image its own size: one crop-and-resize each (timm's crop draws)
            top, left, h, w = crop_box(rng, *img.shape[-2:])
            crops.append(F.resized_crop(img, top, left, h, w, [self.size, self.size],
                                        interpolation=InterpolationMode.BICUBIC, antialias=True))
        x = torch.stack(crops)
        clock("crop")
        flipped = (torch.rand(len(x), generator=host) < 0.5).nonzero().flatten().to(x.device, non_blocking=True)
        x[flipped] = x[flipped].flip(-1)
        clock("flip")
        if self.augment:
            x = rand_augment(x, self.fill, self.hparams, host, rng)
        clock("randaugment")
        x = self._normalize(x)
        clock("normalise")
        if self.augment:
            x = random_erase_(x, rng, noise)
        clock("erase")
        return x, labels[kept].to(device, non_blocking=True)

    def eval(self, batch, labels: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2 import functional as F

        scale = math.floor(self.size / CROP_PCT)
        images, kept = self.decode(batch, device)
        out = [F.center_crop(F.resize(img, scale, interpolation=InterpolationMode.BICUBIC, antialias=True),
                             [self.size, self.size]) for img in images]
        return self._normalize(torch.stack(out)), labels[kept].to(device, non_blocking=True)
