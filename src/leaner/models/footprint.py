"""What one architecture costs per training sample, measured from the built model without running it:
parameters, training FLOPs, and the GPU memory its activations take.

- FLOPs: one sample of the real input shape forward and backward through the model built on the
  meta device, under torch's FlopCounterMode (matmul-like ops; 2 FLOPs per multiply-add).
- Memory: the tensors autograd saves for backward (deduplicated by storage), during one forward on
  fake CUDA tensors (FakeTensorMode: shapes and dtypes, no memory, no GPU needed). CUDA tensors so
  that what decides a tensor's bytes is what CUDA would run: CUDA's bf16 autocast rules (which
  outputs stay fp32), P2's kernel choice (`attention_kernel(..., "cuda")`: the N x N scores stored
  below 64 points, a padded fused kernel from 64 on), and scaled_dot_product_attention as a fused
  kernel (on meta or fake tensors torch would take its math form and store the scores). On top of
  what is saved, the backward pass's working set at its most demanding op: the gradients in and
  out of the largest saved tensor, or of a fused attention call plus its kernel's workspace.
- Models are stacks of identical blocks, so every quantity is measured at depth 1 and 2 and
  extended to any depth exactly (a + b * depth), and memory at batch 1 and 2 (what does not grow
  with the batch, such as autocast's bf16 copies of the weights, is kept apart). One block
  configuration is measured once per process, whatever its depth, seed or recipe.

Checked against peaks measured on an H100 (tests/test_cost.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import build_model
from .config import ModelConfig, NearestConfig, TimmConfig, ViTConfig, model_config
from .params import model_params

CUDA = torch.device("cuda", 0)  # an explicit index: nothing asks torch.cuda for the current device
FUSED_BLOCK = 64  # the fused kernels' tile (queries and head dim) for their backward's accumulators


@dataclass(frozen=True)
class Footprint:
    """One architecture at one precision; bytes and FLOPs per training sample unless named otherwise."""

    params: int
    flops: float  # training FLOPs per sample, forward and backward (nan: not counted)
    saved: float  # bytes autograd keeps for backward
    working: float  # bytes the backward pass adds at its most demanding op
    largest: float  # bytes of the largest saved tensor (evaluation's forward holds about two such)
    fixed: float  # bytes saved once per step whatever the batch (autocast's bf16 copies of the weights)

    def activation_bytes(self, batch: int) -> float:
        """Activations and the backward's working set of a training batch, beyond the model's state."""
        return self.fixed + batch * (self.saved + self.working)


def footprint(model: ModelConfig | dict, precision: str, flops: bool = True) -> Footprint:
    """The footprint of `model` (a variant's model) trained at `precision` (bf16 or fp32);
    `flops=False` skips counting FLOPs (memory alone, as the onstart check needs)."""
    model = model_config(model)
    at, _ = repeated(model)
    two = dataclasses.replace(model, depth=at)
    memory = _memory_two_blocks(two, precision, _attention_rule())
    work = _flops_two_blocks(two) if flops else {"flops": (math.nan, math.nan)}

    def extend(parts: tuple[float, float]) -> float:  # all but the repeated block's second copy, and the copies beyond
        return parts[0] + (model.depth - at + 1) * parts[1]

    return Footprint(params=model_params(model), flops=extend(work["flops"]), saved=extend(memory["saved"]),
                     working=memory["working"], largest=memory["largest"], fixed=extend(memory["fixed"]))


# Each quantity of the model built at depth 2, split as (all but its second block, the second block):
# blocks 2.. of a deeper model are copies of the second (the first can differ: it has no stochastic
# depth, its drop-path rate is 0). Cached per block configuration (the model at depth 2), whatever the depth.
# A DaViT grows in its deepest stage, so it is built where that stage holds two blocks (`repeated`).

def repeated(model: ModelConfig) -> tuple[int, str]:
    """The depth the model is measured at and the path of the block each further layer copies."""
    if isinstance(model, TimmConfig):
        from .backbones import repeated_block

        return repeated_block(model)
    return 2, "blocks.1"


def _meta_model(model: ModelConfig) -> torch.nn.Module:
    with torch.device("meta"):
        return build_model(model)


@functools.cache
def _flops_two_blocks(model: ModelConfig) -> dict:
    total, in_second = training_flops(_meta_model(model), sample(model, 1, "meta"), repeated(model)[1])
    return {"flops": (total - in_second, in_second)}


def _attention_rule() -> tuple:
    """What decides which attention form CUDA takes (models/nearest.py), read now: part of the
    memory cache's key, so that a switched rule is measured again."""
    from . import nearest

    return nearest.LOWRANK_ON_CUDA, nearest.LOWRANK_CUDA_RANK, nearest.FUSED_MIN_TOKENS


@functools.cache
def _memory_two_blocks(model: ModelConfig, precision: str, rule: tuple) -> dict:
    saved = saved_tensors(_meta_model(model), model, precision)
    return {**saved, "working": max(2 * saved["largest"], saved["attention"])}


def sample(model: ModelConfig | dict, batch: int, device) -> torch.Tensor:
    """A batch of the model's real input shape: images (leaner's ViT, a timm backbone), P2's (N, d)
    points, or token sequences of the full context (the longest a batch can be)."""
    model = model_config(model)
    if isinstance(model, (ViTConfig, TimmConfig)):
        return torch.zeros(batch, model.in_chans, model.img_size, model.img_size, device=device)
    if isinstance(model, NearestConfig):
        return torch.zeros(batch, model.tokens, model.dim, device=device)
    return torch.ones(batch, model.seq_len, dtype=torch.long, device=device)  # token ids, no padding


def training_flops(model: torch.nn.Module, x: torch.Tensor, block: str = "blocks.1") -> tuple[float, float]:
    """Forward and backward FLOPs of `model` on `x` (meta tensors: nothing is computed): in all,
    and in its module `block` (the second block, `model.blocks[1]`)."""
    from torch.utils.flop_counter import FlopCounterMode

    grouped = {torch.ops.aten.convolution_backward: _conv_backward_flop}
    with FlopCounterMode(display=False, custom_mapping=grouped) as counter:
        model(x).float().sum().backward()
    by_module = counter.get_flop_counts()
    return float(counter.get_total_flops()), float(sum(by_module[f"{type(model).__name__}.{block}"].values()))


def _conv_backward_flop(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                        _output_padding, _groups, output_mask, out_shape=None, **kwargs) -> int:
    """A convolution's backward: each gradient asked for (of the input, of the weight) takes the
    forward's multiplications. torch's own formula counts a grouped convolution's weight gradient as
    if it were not grouped, a depthwise one (XCiT's LPI, DaViT's position convolutions) C times over:
    31 times the forward's convolutions in XCiT-M, 1.45x its whole training FLOPs."""
    from torch.utils.flop_counter import conv_flop_count

    return conv_flop_count(x_shape, w_shape, grad_out_shape, transposed) * (int(output_mask[0]) + int(output_mask[1]))


def saved_tensors(meta_model: torch.nn.Module, config: ModelConfig | dict, precision: str) -> dict:
    """What autograd saves for backward in one forward of one sample on fake CUDA tensors, in bytes:
    `saved` and `fixed` (autocast's copies of the weights, once per step whatever the batch), each
    as (outside the model's second block, in it); the `largest` saved tensor; and the largest
    backward working set of a fused `attention` call. Parameters (and views of them) are the
    model's state, not counted. `meta_model` becomes a fake CUDA model."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    model = _to_fake(meta_model, mode)
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    storages: dict[int, tuple[int, bool, bool]] = {}  # storage -> (bytes, in the second block, a weight copy)
    largest, inside = [0], [False]

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in params and storage._cdata not in storages:
            copy = _parameter_copy(t)
            storages[storage._cdata] = (storage.nbytes(), inside[0], copy)
            if not copy:  # a view holds at most its storage (an expanded mask holds one row)
                largest[0] = max(largest[0], min(t.numel() * t.element_size(), storage.nbytes()))
        return t

    second = model.get_submodule(repeated(model_config(config))[1])
    hooks = [second.register_forward_pre_hook(lambda *_: inside.__setitem__(0, True)),
             second.register_forward_hook(lambda *_: inside.__setitem__(0, False))]
    try:
        with mode, _cuda_autocast(precision == "bf16"), FusedAttention() as attention:
            x = sample(config, 1, CUDA)
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                model(x)
    finally:
        for h in hooks:
            h.remove()

    def split(copies: bool) -> tuple[float, float]:
        sizes = [(n, in_second) for n, in_second, copy in storages.values() if copy == copies]
        return (float(sum(n for n, s in sizes if not s)), float(sum(n for n, s in sizes if s)))

    return {"saved": split(False), "fixed": split(True), "largest": float(largest[0]),
            "attention": attention.working}


# autograd nodes of ops that only cast, reshape or view their one input
_SHAPE_OPS = frozenset({"ToCopyBackward0", "TBackward0", "ViewBackward0", "UnsafeViewBackward0", "PermuteBackward0",
                        "TransposeBackward0", "ExpandBackward0", "SliceBackward0", "SelectBackward0", "CloneBackward0",
                        "AsStridedBackward0", "UnsqueezeBackward0", "SqueezeBackward0"})


def _parameter_copy(t: torch.Tensor) -> bool:
    """Whether `t` is a parameter cast or reshaped (autocast's bf16 copy of a weight, its transpose):
    made once per step, whatever the batch."""
    fn = t.grad_fn
    while fn is not None and type(fn).__name__ in _SHAPE_OPS:
        inputs = [f for f, _ in fn.next_functions if f is not None]
        fn = inputs[0] if len(inputs) == 1 else None
    return fn is not None and type(fn).__name__ == "AccumulateGrad"


def _to_fake(meta_model: torch.nn.Module, mode) -> torch.nn.Module:
    """`meta_model` with every parameter and buffer a fake CUDA tensor (tied weights stay tied)."""
    from torch._subclasses.fake_tensor import FakeTensor

    fakes: dict[int, torch.Tensor] = {}

    def fake(t: torch.Tensor, parameter: bool) -> torch.Tensor:
        if id(t) not in fakes:
            f = FakeTensor(mode, t.detach(), CUDA)
            fakes[id(t)] = torch.nn.Parameter(f, t.requires_grad) if parameter else f
        return fakes[id(t)]

    for module in meta_model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                module._parameters[name] = fake(p, True)
        for name, b in module._buffers.items():
            if b is not None:
                module._buffers[name] = fake(b, False)
    return meta_model


@contextlib.contextmanager
def _cuda_autocast(enabled: bool):
    """bf16 autocast for CUDA tensors, also on a machine without CUDA (where torch.autocast turns
    itself off): the fake tensors are CUDA tensors, so CUDA's autocast rules decide their dtypes."""
    before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", enabled)
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    try:
        yield
    finally:
        torch.clear_autocast_cache()
        torch.set_autocast_enabled("cuda", before[0])
        torch.set_autocast_dtype("cuda", before[1])


class FusedAttention(TorchFunctionMode):
    """scaled_dot_product_attention as a fused CUDA kernel runs it in training: it keeps q, k, v,
    the output and its log-sum-exp for backward, never the N x N scores. Records the largest
    backward working set of a call (`working`, bytes): the gradients of q, k, v and of the output,
    a temporary of the output's size, and the kernel's per-(sample, head) accumulators of the
    query gradient, one 64 x 64 fp32 tile per 64 queries and 64 head dims (memory-efficient
    kernel; flash keeps a similar fp32 dq accumulator)."""

    def __init__(self):
        super().__init__()
        self.working = 0.0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        q, k, v = args[:3]
        mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
        dropout = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
        causal = args[5] if len(args) > 5 else kwargs.get("is_causal", False)
        bias = None
        if mask is not None:
            bias = mask if mask.dtype != torch.bool else torch.zeros(
                mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
            bias = bias.expand(*q.shape[:-1], k.shape[-2])
        out = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, bias, True, dropout, causal, scale=kwargs.get("scale"))[0]
        self.working = max(self.working, _attention_backward_bytes(q, k, v, out))
        return out


def _attention_backward_bytes(q, k, v, out) -> float:
    def size(t):
        return t.numel() * t.element_size()

    *batch_heads, queries, head_dim = q.shape
    tiles = math.ceil(queries / FUSED_BLOCK) * math.ceil(head_dim / FUSED_BLOCK)
    workspace = math.prod(batch_heads) * tiles * (FUSED_BLOCK * FUSED_BLOCK * 4 + 16)
    return size(q) + size(k) + size(v) + 2 * size(out) + workspace
