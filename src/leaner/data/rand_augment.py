"""timm's RandAugment ("rand-m9-mstd0.5-inc1") on uint8 tensor batches, each sample with its own
draws, for `decode: device` (data/tensor_augment.py).

At each of its two steps every sample draws one of timm's 15 "increasing" ops, applied with
probability 0.5, at magnitude N(9, 0.5) clipped to [0, 10]; every op then runs once, on the samples
that drew it, with a factor or matrix per sample: Pillow's integer ops as tensor ops (torchvision's
autocontrast and equalize), its enhancements as blends with torchvision's batched degenerate images
(grey, mean, black or a 3x3 blur), its affine maps (rotate, shear, translate; bicubic, filled with
the dataset mean, in Pillow's coordinates) by kornia's per-sample warp. Each op leaves uint8 as
Pillow's do. The arguments come from timm's own level functions, their random signs drawn from the
batch's own generator (`timm_draws_from`), never the process's global one.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading

import torch

RAND_AUGMENT = {"ops": 2, "prob": 0.5, "magnitude": 9.0, "magnitude_std": 0.5, "max": 10.0}
ENHANCE_OPS = ("ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing")
AFFINE_OPS = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")


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


def draw_rand_augment(n: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                                  torch.Tensor]:
    """timm's rand-m9-mstd0.5-inc1 draws for a batch of n, on the host, for each of its steps:
    the op of each sample (one of the 15, with replacement across steps), whether it is applied
    (probability 0.5), and its magnitude (N(9, 0.5) clipped to [0, 10]); each (steps, n)."""
    cfg = RAND_AUGMENT
    ops = torch.randint(len(rand_augment_ops()), (cfg["ops"], n), generator=generator)
    applied = torch.rand(cfg["ops"], n, generator=generator) < cfg["prob"]
    magnitude = torch.normal(cfg["magnitude"], cfg["magnitude_std"], (cfg["ops"], n),
                             generator=generator).clamp_(0.0, cfg["max"])
    return ops, applied, magnitude


_TIMM_DRAWS = threading.Lock()


@contextlib.contextmanager
def timm_draws_from(rng: random.Random):
    """timm's level-to-argument functions draw their random signs from `rng` (they call the
    `random` module of timm.data.auto_augment, swapped for `rng` here, under a lock)."""
    from timm.data import auto_augment

    with _TIMM_DRAWS:
        module, auto_augment.random = auto_augment.random, rng
        try:
            yield
        finally:
            auto_augment.random = module


def rand_augment(x: torch.Tensor, fill: list[int], hparams: dict | None = None,
                 generator: torch.Generator | None = None, rng: random.Random | None = None) -> torch.Tensor:
    """timm's rand-m9-mstd0.5-inc1 on a uint8 (n, C, H, W) batch, every sample drawing its own ops
    and magnitudes: at each step, each op runs once, on the samples that drew it (about 15 batched
    calls a step, whatever the batch size). The arguments come from timm's own level functions
    (its ranges and random signs, drawn from `rng`); the draws from `generator`; nothing waits on
    the device."""
    from timm.data.auto_augment import LEVEL_TO_ARG

    names, hparams = rand_augment_ops(), hparams or {}
    ops, applied, magnitude = draw_rand_augment(len(x), generator)
    rng = rng or random.Random(int(torch.randint(2**62, (1,), generator=generator)))
    x = x.clone()
    for step in range(len(ops)):
        for k, name in enumerate(names):
            rows = ((ops[step] == k) & applied[step]).nonzero().flatten()
            if len(rows) == 0:
                continue
            level_fn = LEVEL_TO_ARG[name]
            with timm_draws_from(rng):
                args = [level_fn(m, hparams) if level_fn else () for m in magnitude[step, rows].tolist()]
            index = rows.to(x.device, non_blocking=True)
            x[index] = apply_op(name, x[index], args, fill)
    return x
