"""The GPU cards a job may be priced on and checked against: what each offers (memory, dense peaks
at each precision, memory bandwidth), named on the command line (`leaner cost --gpu`), given as
$LEANER_GPU_MEM_GB, or found on this machine."""

from __future__ import annotations

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


CARDS = {"h100": Card("an H100 SXM", 80, 989, 494.5, 67, 67, 3.35),
         "h200": Card("an H200", 141, 989, 494.5, 67, 67, 4.8),
         "a100": Card("an A100 80GB", 80, 312, 156, 19.5, 19.5, 2.0)}


def card(name: str) -> Card:
    if name not in CARDS:
        raise ValueError(f"--gpu {name}: unknown card (allowed: {', '.join(CARDS)})")
    return CARDS[name]



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
    return Card(f"this machine's {props.name}", props.total_memory / 1e9, math.nan, math.nan, math.nan)
