"""P2's encoder for the nearest-point task (Amsel et al., papers.md 2.2), in the style of its code.

- Post-norm layers acting directly in R^d: no token embedding, no output head.
- Normalisation x -> s * x / ||x|| with one learnable scalar s (init 1, eps 0).
- ReLU feed-forward, no dropout.
- Attention = the average of W independent multi-head attention modules, each with `heads`
  heads of rank d_model / heads. They are computed batched here (one in-projection for all W
  modules, then a block-averaging out-projection), which is the same function as W separate
  `nn.MultiheadAttention` modules averaged: `AveragedMultiheadAttention.from_modules` and the tests
  check that.
- Every layer starts as a copy of the first (as `nn.TransformerEncoder` does), and modules are
  built in the order of P2's code, so its init seed (613) gives its initial weights.
- Optional positions: additive (d x N table, init N(-1, 1) as in P2's code) or concatenated
  (posn_dim x N table, init U(-1, 1); d_model = d + posn_dim).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import NearestConfig


class ScalarUnitNorm(nn.Module):
    """x -> s * x / ||x||_2 with a single learnable scalar s."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x / x.norm(dim=-1, keepdim=True)


class AveragedProjection(nn.Module):
    """The W out-projections, applied to each module's block of the concatenated head outputs
    and averaged. Input (B, N, W * d_model): exactly the heads' outputs before any projection."""

    def __init__(self, modules: int, d_model: int):
        super().__init__()
        self.modules_, self.d_model = modules, d_model
        self.weight = nn.Parameter(torch.empty(modules, d_model, d_model))
        self.bias = nn.Parameter(torch.zeros(modules, d_model))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        b, n, _ = z.shape
        z = z.view(b, n, self.modules_, self.d_model)
        return (torch.einsum("bnwd,wed->bnwe", z, self.weight) + self.bias).mean(dim=2)


FUSED_MIN_TOKENS = 64  # on CUDA: from this many points per sequence on, the fused kernel (see attention_kernel)
LOWRANK_MAX_RANK = 8  # models/lowrank.py's kernel unrolls the head dim: up to this rank
# Where CUDA takes models/lowrank.py's kernel: fp32 heads of rank <= LOWRANK_CUDA_RANK, where a GPU run
# measured it faster than today's forms (`make gpu-check` section p2kernel, one H200, 2026-12-04: figN's
# H64 N256 rank 1 1.9 ps a score against the fused form's 22.2, fig1's H64 N16 13.4 against 46.7), and not
# above it (rank 8: 23.6 against 22.2). planning/cost.py prices by the same rule (P2_SCORE_S["lowrank"]).
LOWRANK_ON_CUDA = True
LOWRANK_CUDA_RANK = 2


def attention_kernel(tokens: int, head_dim: int, dtype: torch.dtype, device_type: str) -> tuple[str, int]:
    """How `attention` computes softmax(q k^T / sqrt(r)) v for sequences of `tokens` points and
    head dim r: ("fused", the head dim handed to the kernel), ("math", r) or, on CUDA (LOWRANK_ON_CUDA),
    ("lowrank", r) for fp32 heads of rank <= LOWRANK_CUDA_RANK.

    The fused kernels (flash, memory-efficient, cuDNN) take 4-D inputs only, and on CUDA a head
    dim that is a multiple of 8 for 16-bit inputs (4 for fp32); they never store the N x N
    scores, so memory grows with N. P2's head dims D/h go down to 1, so q, k and v are padded
    with zeros up to that multiple: the padding adds zeros to every dot product (the scale stays
    1/sqrt(r)) and gives zero output columns, which are cut off.
    On CUDA a short sequence takes the math form instead: measured on an H100 (benchmarks/p2_gpu.py,
    fp32, batch 256), at N = 16 the padded fused kernel used 2.5-3.6x the memory of the math form
    and ran 1.4-4.5x slower (P2's fig1: 29 GB, 409 ms against 9.3 GB, 91 ms), while at N = 64 and
    256 the math form needed 28 GB to over 80 GB where the fused kernel needed 14-43 GB. The CPU's
    flash kernel takes any head dim at any N: always fused there."""
    if device_type != "cuda":
        return "fused", head_dim
    if LOWRANK_ON_CUDA and dtype == torch.float32 and head_dim <= LOWRANK_CUDA_RANK:
        return "lowrank", head_dim
    if tokens < FUSED_MIN_TOKENS:
        return "math", head_dim
    align = 8 if dtype in (torch.float16, torch.bfloat16) else 4
    return "fused", -(-head_dim // align) * align


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(r)) v for 4-D (B, heads, N, r) inputs, by `attention_kernel`'s choice."""
    n, r = q.shape[-2:]
    return attend(q, k, v, *attention_kernel(n, r, q.dtype, q.device.type))


class _LowRankSaves(torch.autograd.Function):
    """What models/lowrank.py's kernel keeps for backward (q, k, v, the output and one log-sum-exp a
    row, none of them padded), without computing it: footprint.py's fake CUDA tensors, where the
    Triton kernel cannot run."""

    @staticmethod
    def forward(ctx, q, k, v):
        out = torch.empty_like(q)
        ctx.save_for_backward(q, k, v, out, q.new_empty(q.shape[:-1]))
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: str, width: int) -> torch.Tensor:
    """softmax(q k^T / sqrt(r)) v in the form `kernel`: "math", "fused" with the head dim
    zero-padded to `width`, "lowrank" (models/lowrank.py: many heads of rank <= 8 per program, a
    Triton kernel) or "flex" (torch's FlexAttention, head dim zero-padded to `width`: its CUDA
    kernels take 16 at least, their tl.dot's minimum; compiled on CUDA; forward only on the CPU,
    where torch has no backward for it). The last two are measured by
    `make gpu-check` (section p2kernel) and chosen by no rule until a GPU run says they are faster."""
    r = q.shape[-1]
    if kernel == "math":
        return torch.softmax(q @ k.transpose(-2, -1) * r ** -0.5, dim=-1) @ v
    if kernel == "lowrank":
        from torch._subclasses.fake_tensor import is_fake

        if is_fake(q):  # footprint.py's fake CUDA tensors: what the kernel keeps for backward, unpadded
            return _LowRankSaves.apply(q, k, v)
        from .lowrank import lowrank_attention

        return lowrank_attention(q, k, v)
    if kernel == "flex":
        pad = (0, width - r)
        return _flex(q.device.type)(F.pad(q, pad), F.pad(k, pad), F.pad(v, pad), scale=r ** -0.5)[..., :r]
    if width == r:
        return F.scaled_dot_product_attention(q, k, v)
    pad = (0, width - r)
    out = F.scaled_dot_product_attention(F.pad(q, pad), F.pad(k, pad), F.pad(v, pad), scale=r ** -0.5)
    return out[..., :r]


def _flex(device_type: str):
    """torch's flex_attention: compiled once per process on CUDA (eager, its reference, elsewhere)."""
    from torch.nn.attention.flex_attention import flex_attention

    if device_type not in _FLEX:
        _FLEX[device_type] = torch.compile(flex_attention) if device_type == "cuda" else flex_attention
    return _FLEX[device_type]


_FLEX: dict = {}


class AveragedMultiheadAttention(nn.Module):
    """Mean over W modules of nn.MultiheadAttention(d_model, heads), batched."""

    def __init__(self, d_model: int, heads: int, modules: int):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"heads ({heads}) must divide d_model ({d_model})")
        self.d_model, self.heads, self.modules_ = d_model, heads, modules
        self.head_dim = d_model // heads
        self.in_proj_weight = nn.Parameter(torch.empty(modules, 3 * d_model, d_model))
        self.in_proj_bias = nn.Parameter(torch.zeros(modules, 3 * d_model))
        self.proj = AveragedProjection(modules, d_model)
        with torch.no_grad():  # each module initialised as nn.MultiheadAttention initialises itself
            self.copy_from([nn.MultiheadAttention(d_model, heads, batch_first=True) for _ in range(modules)])

    @torch.no_grad()
    def copy_from(self, mhas: list[nn.MultiheadAttention]) -> AveragedMultiheadAttention:
        for w, mha in enumerate(mhas):
            self.in_proj_weight[w].copy_(mha.in_proj_weight)
            self.in_proj_bias[w].copy_(mha.in_proj_bias)
            self.proj.weight[w].copy_(mha.out_proj.weight)
            self.proj.bias[w].copy_(mha.out_proj.bias)
        return self

    @classmethod
    def from_modules(cls, mhas: list[nn.MultiheadAttention]) -> AveragedMultiheadAttention:
        first = mhas[0]
        return cls(first.embed_dim, first.num_heads, len(mhas)).copy_from(mhas)

    def qk(self) -> torch.Tensor:
        """Per module and head, the bilinear form of the attention scores: W_Q^T W_K, (W, H, d, d)."""
        w = self.in_proj_weight.view(self.modules_, 3, self.heads, self.head_dim, self.d_model)
        return torch.einsum("whrd,whre->whde", w[:, 0], w[:, 1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = torch.einsum("bnd,wed->bnwe", x, self.in_proj_weight) + self.in_proj_bias
        qkv = qkv.view(b, n, self.modules_, 3, self.heads, self.head_dim).permute(3, 0, 2, 4, 1, 5)
        q, k, v = (t.reshape(b, self.modules_ * self.heads, n, self.head_dim) for t in qkv.unbind(0))
        out = attention(q, k, v)  # (B, W * H, N, r): softmax(q k^T / sqrt(r)) v
        out = out.view(b, self.modules_, self.heads, n, self.head_dim).permute(0, 3, 1, 2, 4)
        return self.proj(out.reshape(b, n, self.modules_ * self.d_model))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, hidden), nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class PostNormBlock(nn.Module):
    """x <- N1(x + SA(x)); x <- N2(x + FF(x)).

    Built in the order of P2's layer (papers.md 2.2), so that the init seed draws its weights: a
    subclass of nn.TransformerEncoderLayer, it first builds the stock attention module it never uses,
    then the feed-forward's two layers, and only then its W attention modules. The unused module is
    drawn here and dropped (P2 counts its parameters; this model does not)."""

    def __init__(self, d_model: int, heads: int, modules: int, ff: int):
        super().__init__()
        nn.MultiheadAttention(d_model, heads, batch_first=True)  # P2's unused self_attn: its draws only
        mlp = FeedForward(d_model, ff)
        self.attn = AveragedMultiheadAttention(d_model, heads, modules)
        self.mlp = mlp
        self.norm1, self.norm2 = ScalarUnitNorm(), ScalarUnitNorm()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.mlp(x))


class NearestPointEncoder(nn.Module):
    """Maps a sequence of points (B, N, d) to predictions (B, N, d) of each point's farthest neighbour."""

    def __init__(self, dim: int, tokens: int, depth: int, heads: int, modules: int = 1, ff: int = 2048,
                 posn: str = "none", posn_dim: int = 64):
        super().__init__()
        self.dim, self.posn = dim, posn
        d_model = dim + (posn_dim if posn == "concatenated" else 0)
        first = PostNormBlock(d_model, heads, modules, ff)
        self.blocks = nn.ModuleList([first] + [copy.deepcopy(first) for _ in range(depth - 1)])  # start identical
        # P2's tables are (features, N), drawn after the layers: drawn in that layout, stored as (N, features)
        if posn == "additive":
            self.pos_embed = nn.Parameter(torch.empty(dim, tokens).normal_(-1.0, 1.0).T.contiguous())
        elif posn == "concatenated":
            self.pos_embed = nn.Parameter(torch.empty(posn_dim, tokens).uniform_(-1.0, 1.0).T.contiguous())
        elif posn != "none":
            raise ValueError(f"unknown posn {posn!r} (allowed: none, additive, concatenated)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        if self.posn == "additive":
            x = x + self.pos_embed[:n]
        elif self.posn == "concatenated":
            x = torch.cat([x, self.pos_embed[:n].expand(x.shape[0], -1, -1)], dim=-1)
        for blk in self.blocks:
            x = blk(x)
        return x[..., :self.dim]


def build_nearest(config: NearestConfig) -> NearestPointEncoder:
    return NearestPointEncoder(dim=config.dim, tokens=config.tokens, depth=config.depth, heads=config.heads,
                               modules=config.modules, ff=config.ff, posn=config.posn, posn_dim=config.posn_dim)


def qk_identity_angle(model: NearestPointEncoder) -> list[float]:
    """fig_perfect: for every head of the first layer, the angle (degrees) between W_Q^T W_K and the
    identity, acos(tr(M) / (||M||_F sqrt(d))). The trained construction Q K^T = -c I gives 180."""
    m = model.blocks[0].attn.qk().detach().double()
    d = m.shape[-1]
    cos = torch.diagonal(m, dim1=-2, dim2=-1).sum(-1) / (m.flatten(-2).norm(dim=-1) * math.sqrt(d))
    return torch.rad2deg(torch.acos(cos.clamp(-1, 1))).flatten().tolist()
