"""The GPU cards a job may be priced on and checked against: what each offers (memory, dense peaks
at each precision, memory bandwidth), named on the command line (`leaner cost --gpu`), given as
$LEANER_GPU_MEM_GB, or found on this machine."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Card:
    name: str  # as a sentence names it: "an H100 SXM"
    memory_gb: float
    bf16_tflops: float  # dense peaks: bf16 tensor cores,
    tf32_tflops: float  # fp32 matrix products in TF32,
    fp32_tflops: float  # fp32 without TF32
    fp64_tflops: float = math.nan  # fp64 matrix products (DGEMM on the FP64 tensor cores): conditioning
    memory_tbps: float = math.nan  # memory bandwidth, TB/s: conditioning's float64 scores are bound by it

    def peak_flops(self, arithmetic: str) -> float:
        return 1e12 * {"bf16": self.bf16_tflops, "tf32": self.tf32_tflops, "fp32": self.fp32_tflops,
                       "fp64": self.fp64_tflops}[arithmetic]

    def mfu(self, flops_per_s: float, arithmetic: str) -> float:
        """The fraction of this card's dense peak at `arithmetic` that `flops_per_s` reaches."""
        return flops_per_s / self.peak_flops(arithmetic)


# The vendors' dense peaks (no sparsity). The one table of cards: `leaner cost` prices on them, the
# onstart check holds jobs against them, and the benchmarks read a GPU's MFU off them (card_named).
CARDS = {"h100": Card("an H100 SXM", 80, 989, 494.5, 67, 67, 3.35),
         "h200": Card("an H200", 141, 989, 494.5, 67, 67, 4.8),
         "a100": Card("an A100 80GB", 80, 312, 156, 19.5, 19.5, 2.0),
         "l40s": Card("an L40S", 48, 362, 183, 91.6, 1.4, 0.864),
         "a10": Card("an A10", 24, 125, 62.5, 31.2, 0.98, 0.6)}


def card(name: str) -> Card:
    if name not in CARDS:
        raise ValueError(f"--gpu {name}: unknown card (allowed: {', '.join(CARDS)})")
    return CARDS[name]


def card_named(device_name: str) -> Card | None:
    """The card of CARDS that a CUDA device is, by the name torch gives it ("NVIDIA H100 80GB
    HBM3", "NVIDIA A100-SXM4-80GB"), or None for another."""
    name = device_name.upper()
    for key in sorted(CARDS, key=len, reverse=True):  # the longer names first: A100 before A10
        if key.upper() in name:
            return CARDS[key]
    return None


MEM_ENV = "LEANER_GPU_MEM_GB"


def parse_memory_gb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise ValueError(f"{MEM_ENV}={text}: not a GPU memory in GB (allowed: a number > 0, e.g. 80)")
    return value


def local_card() -> Card | None:
    """This machine's smallest CUDA device, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = min((torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())),
                key=lambda p: p.total_memory)
    known = card_named(props.name)
    if known is None:
        return Card(f"this machine's {props.name}", props.total_memory / 1e9, math.nan, math.nan, math.nan)
    return dataclasses.replace(known, name=f"this machine's {props.name}", memory_gb=props.total_memory / 1e9)
