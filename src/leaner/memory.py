"""Host memory a variant's jobs ask for, from the size of its model.

A study's `resources.mem_mb` is one number for all its variants, and conditioning declared none: a
cluster then gives the profile's default (4 GB), which a large variant outgrows. The estimate
counts the parameters of the model and what each stage holds per parameter:

  training      fp32 weights, gradients and AdamW's two moments, 16 bytes, in every process
  conditioning  a fresh fp32 model, the fp32 weights loaded into it and its float64 copy for the
                probe, 16 bytes (measured peak: 12.3 bytes per parameter, ViTs of 76M and 151M)

plus a quarter for what that leaves out (activations, allocator slack) and the runtime itself
(Python, torch, timm and the data at rest: 0.7-0.9 GB measured).

The count comes from built models, on the meta device (shapes only), and is made fast enough for a
DAG of thousands of variants: one model of depth 1 per architecture without its depth, whose
blocks are all alike, gives every depth as its count plus one block per further layer. The counts
are kept in $LEANER_CACHE_DIR (default ~/.cache/leaner) for the same model code, torch and timm,
so that Snakemake, which asks for them while it builds the DAG, need not import torch and timm
(seconds) again for architectures it has seen.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path

from .io import write_json

MIB = 2**20
RUNTIME_MB = 1024
MARGIN = 1.25
TRAINING_BYTES = 16
CONDITIONING_BYTES = 16


def _cache_file() -> Path:
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("LEANER_CACHE_DIR") or user_cache / "leaner") / "param_counts.json"


@functools.cache
def _code_version() -> str:
    """The model code and the torch and timm it builds with (a kept count holds for these only)."""
    from importlib.metadata import version

    digest = hashlib.sha256(f"torch {version('torch')} timm {version('timm')}".encode())
    for path in sorted((Path(__file__).parent / "models").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def _kept() -> dict:
    """The counts kept for this code: {architecture: [parameters at depth 1, of one block]}."""
    try:
        data = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return data.get("counts", {}) if isinstance(data, dict) and data.get("code") == _code_version() else {}


@functools.cache
def _one_layer(shape_json: str) -> tuple[int, int]:
    """(parameters of the model at depth 1, parameters of its block)."""
    kept = _kept()
    if shape_json not in kept:
        import torch

        from .models import build_model, param_counts

        with torch.device("meta"):
            model = build_model({**json.loads(shape_json), "depth": 1})
        kept[shape_json] = [param_counts(model)["total"], sum(p.numel() for p in model.blocks[0].parameters())]
        try:
            write_json(_cache_file(), {"code": _code_version(), "counts": kept})
        except OSError:  # a read-only home: counted again next time
            pass
    total, block = kept[shape_json]
    return total, block


def model_params(model: dict) -> int:
    """Parameters of the model spec `model` (built once per architecture without its depth)."""
    total, block = _one_layer(json.dumps({k: v for k, v in model.items() if k != "depth"}, sort_keys=True))
    return total + (model["depth"] - 1) * block


def _mb(params: int, bytes_per_param: int, copies: int = 1) -> int:
    return math.ceil(MARGIN * params * bytes_per_param * copies / MIB) + RUNTIME_MB


def training_mem_mb(model: dict, processes: int, asked_mb: int) -> int:
    """A training job's mem_mb: the study's `asked_mb`, or more where `processes` copies of the
    model's training state need more."""
    return max(asked_mb, _mb(model_params(model), TRAINING_BYTES, processes))


def conditioning_mem_mb(model: dict) -> int:
    """A conditioning job's mem_mb, from its model's size."""
    return _mb(model_params(model), CONDITIONING_BYTES)
