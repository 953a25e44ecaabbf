"""The DeiT image recipe on uint8 tensors, on the training device (a dataset's `decode: device`).

With `decode: pil` (the default) the loader's worker processes decode each JPEG with Pillow and
run timm's transforms on it: about 236 images/s per worker at 224 px, so one H200 at 3400 images/s
needs ~15 workers. With `decode: device` the workers only read the encoded bytes; the training
process decodes a whole batch at once with torchvision (nvJPEG on a GPU, libjpeg-turbo on the CPU;
other formats are decoded in the workers) and augments it here, on the device.

The recipe keeps its meaning, op for op (timm's `create_transform(is_training=True,
auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, interpolation="bicubic")`), and all but the
crop runs on the whole batch at once, each sample with its own random parameters:
  - RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3), bicubic with antialiasing, one call per image
    (decoded images differ in size), then the batch is stacked; horizontal flip 0.5;
  - RandAugment: 2 of timm's 15 "increasing" ops per image, each applied with probability 0.5, at
    magnitude N(9, 0.5) clipped to [0, 10], with timm's own level-to-argument functions (so the
    same ranges and random signs). At each step every op runs once, on the samples that drew it,
    with a factor or matrix per sample: Pillow's integer ops as tensor ops (torchvision's
    autocontrast and equalize), its enhancements as blends with torchvision's batched degenerate
    images (grey, mean, black or a 3x3 blur), its affine maps (rotate, shear, translate; bicubic,
    filled with the dataset mean, in Pillow's coordinates) by kornia's per-sample warp. Each op
    leaves uint8 as Pillow's do;
  - normalisation, then timm's RandomErasing (probability 0.25, per-pixel normal noise).
Evaluation: resize the short side to img_size / 0.875 (bicubic, antialiased), centre crop.
"""

from __future__ import annotations

import math

import torch

from ..schema import Recipe
from .splits import CPU_DECODED, SKIPPED

CROP_PCT = 0.875  # timm's default eval crop
RAND_AUGMENT = {"ops": 2, "prob": 0.5, "magnitude": 9.0, "magnitude_std": 0.5, "max": 10.0}
JPEG_MAGIC = b"\xff\xd8\xff"
ENHANCE_OPS = ("ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing")
AFFINE_OPS = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")


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


def _affine_rows(name: str, args: list[tuple], h: int, w: int) -> torch.Tensor:
    """Pillow's affine maps for op `name`, one per sample, as (n, 3, 3) matrices from an output
    pixel's position to the input position it samples, in pixel-index coordinates (Pillow works
    with pixel corners: x_in + 0.5 = A (x_out + 0.5))."""
    rows = []
    for (v,) in args:
        if name == "Rotate":  # Image.rotate(v): counter-clockwise about the centre (w/2, h/2)
            a = -math.radians(v)
            cos, sin, cx, cy = math.cos(a), math.sin(a), w / 2, h / 2
            m = [cos, sin, cx - cos * cx - sin * cy, -sin, cos, cy + sin * cx - cos * cy]
        elif name == "ShearX":
            m = [1, v, 0, 0, 1, 0]
        elif name == "ShearY":
            m = [1, 0, 0, v, 1, 0]
        elif name == "TranslateXRel":
            m = [1, 0, v * w, 0, 1, 0]
        else:  # TranslateYRel
            m = [1, 0, 0, 0, 1, v * h]
        rows.append(m + [0, 0, 1])
    corner = torch.tensor([[1.0, 0, 0.5], [0, 1, 0.5], [0, 0, 1]], dtype=torch.float64)
    back = torch.tensor([[1.0, 0, -0.5], [0, 1, -0.5], [0, 0, 1]], dtype=torch.float64)
    return back @ torch.tensor(rows, dtype=torch.float64).view(-1, 3, 3) @ corner


def _to_uint8_(x: torch.Tensor) -> torch.Tensor:
    """A float batch of grey levels back to uint8 (rounded, clipped), in place where it can."""
    return x.round_().clamp_(0, 255).to(torch.uint8)


def _degenerate(name: str, x: torch.Tensor) -> torch.Tensor:
    """What Pillow's enhancer `name` blends a uint8 batch with (factor 0): its grey version (Color),
    its mean grey level (Contrast), its 3x3 smoothing with the border kept (Sharpness);
    torchvision's batched ops at factor 0. (Brightness blends with black.)"""
    from torchvision.transforms.v2 import functional as F

    if name == "ColorIncreasing":
        return F.adjust_saturation(x, 0.0) if x.shape[1] == 3 else x
    if name == "ContrastIncreasing":
        return F.adjust_contrast(x, 0.0)
    return F.adjust_sharpness(x, 0.0)


def apply_op(name: str, x: torch.Tensor, args: list[tuple], fill: list[int]) -> torch.Tensor:
    """timm's RandAugment op `name` on a uint8 (n, C, H, W) batch, sample i with timm's arguments
    args[i], in one batched call: Pillow's integer ops as tensor ops (torchvision's autocontrast and
    equalize), its enhancements as blends with torchvision's batched degenerate images by a factor
    per sample, its affine maps by kornia's warp with a matrix per sample. The result is uint8
    again, as each of Pillow's ops leaves it."""
    from kornia.geometry.transform import warp_affine
    from torchvision.transforms.v2 import functional as F

    def per_sample(values, dtype=torch.float32) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype).to(x.device, non_blocking=True).view(-1, 1, 1, 1)

    first = [a[0] for a in args] if args and args[0] else []
    if name == "AutoContrast":
        return F.autocontrast(x)
    if name == "Equalize":
        return F.equalize(x)
    if name == "Invert":
        return F.invert(x)
    if name == "PosterizeIncreasing":  # keep the top `bits`: 0 bits is a black image (see images._posterize)
        masks = [(0xFF << (8 - b)) & 0xFF if b > 0 else 0 for b in map(int, first)]
        return x & per_sample(masks, torch.uint8)
    if name == "SolarizeIncreasing":  # Pillow: every level >= threshold inverted
        return torch.where(x.to(torch.int16) >= per_sample(first, torch.int16), 255 - x, x)
    if name == "SolarizeAdd":  # timm's solarize_add: levels below 128 raised by `add`
        raised = (x.to(torch.int16) + per_sample(first, torch.int16)).clamp_(max=255).to(torch.uint8)
        return torch.where(x < 128, raised, x)
    if name in ENHANCE_OPS:  # Pillow's ImageEnhance: a blend of the image with its degenerate version
        factor = per_sample(first)
        if name == "BrightnessIncreasing":  # a blend with black
            out = x.float().mul_(factor)
        else:
            out = torch.lerp(_degenerate(name, x).float(), x.float(), factor)
        return _to_uint8_(out)
    if name in AFFINE_OPS:
        # kornia warps every sample by its own matrix; the fill is exact for any interpolation
        # kernel: warping (image - fill) with zeros outside, then adding fill back
        h, w = x.shape[-2:]
        forward = torch.linalg.inv(_affine_rows(name, args, h, w))[:, :2].float().to(x.device, non_blocking=True)
        fill_value = torch.tensor(fill[: x.shape[1]], dtype=torch.float32).to(x.device, non_blocking=True)
        fill_value = fill_value.view(1, -1, 1, 1)
        return _to_uint8_(warp_affine(x.float().sub_(fill_value), forward, (h, w), mode="bicubic").add_(fill_value))
    raise ValueError(f"unknown RandAugment op {name!r}")


def rand_augment_ops() -> list[str]:
    from timm.data.auto_augment import _RAND_INCREASING_TRANSFORMS

    return list(_RAND_INCREASING_TRANSFORMS)


def draw_rand_augment(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """timm's rand-m9-mstd0.5-inc1 draws for a batch of n, on the host, for each of its steps:
    the op of each sample (one of the 15, with replacement across steps), whether it is applied
    (probability 0.5), and its magnitude (N(9, 0.5) clipped to [0, 10]); each (steps, n)."""
    cfg = RAND_AUGMENT
    ops = torch.randint(len(rand_augment_ops()), (cfg["ops"], n))
    applied = torch.rand(cfg["ops"], n) < cfg["prob"]
    magnitude = torch.normal(cfg["magnitude"], cfg["magnitude_std"], (cfg["ops"], n)).clamp_(0.0, cfg["max"])
    return ops, applied, magnitude


def rand_augment(x: torch.Tensor, fill: list[int], hparams: dict | None = None) -> torch.Tensor:
    """timm's rand-m9-mstd0.5-inc1 on a uint8 (n, C, H, W) batch, every sample drawing its own ops
    and magnitudes: at each step, each op runs once, on the samples that drew it (about 15 batched
    calls a step, whatever the batch size). The arguments come from timm's own level functions
    (its ranges and random signs); nothing waits on the device."""
    from timm.data.auto_augment import LEVEL_TO_ARG

    names, hparams = rand_augment_ops(), hparams or {}
    ops, applied, magnitude = draw_rand_augment(len(x))
    x = x.clone()
    for step in range(len(ops)):
        for k, name in enumerate(names):
            rows = ((ops[step] == k) & applied[step]).nonzero().flatten()
            if len(rows) == 0:
                continue
            level_fn = LEVEL_TO_ARG[name]
            args = [level_fn(m, hparams) if level_fn else () for m in magnitude[step, rows].tolist()]
            index = rows.to(x.device, non_blocking=True)
            x[index] = apply_op(name, x[index], args, fill)
    return x


def jpeg_decoder():
    """The batched device decoder: torchvision's decode_jpeg (nvJPEG on a GPU, libjpeg-turbo on the CPU)."""
    from torchvision.io import decode_jpeg

    return decode_jpeg


class DeviceTransforms:
    """Decode a batch of encoded images on `device` and apply the train or eval recipe. A JPEG the
    device decoder rejects (nvJPEG: CMYK, some progressive and malformed files) is decoded on the
    CPU with Pillow instead; a file nothing can read is left out of its batch, label and all.
    Both are counted (`take_events`), for a line in the log each epoch and a count in metrics.json."""

    def __init__(self, meta: dict, recipe: Recipe):
        from timm.data.random_erasing import RandomErasing

        self.size, self.channels = meta["img_size"], meta["in_chans"]
        self.mean, self.std = list(meta["mean"]), list(meta["std"])
        self.fill = [round(255 * m) for m in self.mean]
        self.hparams = {"img_mean": tuple(self.fill), "translate_const": int(self.size * 0.45)}  # as timm's factory
        self._scale: tuple[torch.Tensor, torch.Tensor] | None = None  # mean, std on the batch's device
        self.augment = recipe.augment
        self.erasing = RandomErasing(probability=0.25, mode="pixel", max_count=1) if self.augment else None
        self.events: dict[str, list[str]] = {CPU_DECODED: [], SKIPPED: []}

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
        """(batch / 255 - mean) / std, as one scale and shift of one new float tensor."""
        if self._scale is None or self._scale[0].device != batch.device:  # once: a copy to a GPU waits on it
            mean, std = (torch.tensor(v, dtype=torch.float64) for v in (self.mean, self.std))
            self._scale = tuple(v.float().view(1, -1, 1, 1).to(batch.device) for v in (1 / (255 * std), mean / std))
        scale, shift = self._scale
        return batch.float().mul_(scale).sub_(shift)

    def train(self, batch, labels: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The augmented, normalised batch on `device` and its labels (an unreadable file's dropped)."""
        from timm.data.transforms import RandomResizedCropAndInterpolation
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2 import functional as F

        images, kept = self.decode(batch, device)
        crops = []
        for img in images:  # each image its own size: one crop-and-resize each (timm's crop draws)
            top, left, h, w = RandomResizedCropAndInterpolation.get_params(img, scale=(0.08, 1.0),
                                                                           ratio=(3 / 4, 4 / 3))
            crops.append(F.resized_crop(img, top, left, h, w, [self.size, self.size],
                                        interpolation=InterpolationMode.BICUBIC, antialias=True))
        x = torch.stack(crops)
        flipped = (torch.rand(len(x)) < 0.5).nonzero().flatten().to(x.device, non_blocking=True)
        x[flipped] = x[flipped].flip(-1)
        if self.augment:
            x = rand_augment(x, self.fill, self.hparams)
        x = self._normalize(x)
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
