"""A timm VisionTransformer built from an explicit spec: depth, heads, width D, head dim, MLP width.

timm derives the head dim (D/h) and the MLP width (ratio x D) itself; both protocols and an
absolute MLP width need them set exactly, so the attention and MLP layers are small subclasses of
timm's own that pin those two numbers and change nothing else. A logit scale other than 1 sits in
timm's own `q_norm` slot (applied to the queries before either attention path), so the fused and
the plain path both see it and the parameters do not change.
"""

from __future__ import annotations

from functools import cache

import torch
from timm.layers import Mlp
from timm.models.vision_transformer import Attention, VisionTransformer

from .config import ViTConfig


class LogitScale(torch.nn.Module):
    """Queries times a fixed factor: every attention logit scaled by `scale` (no parameter)."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return q * self.scale

    def extra_repr(self) -> str:
        return f"scale={self.scale}"


@cache
def attention_with_head_dim(head_dim: int, qk_scale: float = 1.0) -> type:
    """timm `Attention` with the per-head dimension fixed (so h*head_dim may differ from D) and its
    logits scaled by `qk_scale` over timm's 1/sqrt(head_dim)."""

    class HeadDimAttention(Attention):
        def __init__(self, dim, num_heads=8, **kwargs):
            kwargs.pop("attn_head_dim", None)
            super().__init__(dim, num_heads=num_heads, attn_head_dim=head_dim, **kwargs)
            if qk_scale != 1.0:
                self.q_norm = LogitScale(qk_scale)

    name = f"Attention_hd{head_dim}" + (f"_qk{qk_scale:g}" if qk_scale != 1.0 else "")
    HeadDimAttention.__name__ = HeadDimAttention.__qualname__ = name
    return HeadDimAttention


@cache
def mlp_with_hidden(hidden: int) -> type:
    """timm `Mlp` with an absolute hidden width (instead of int(ratio * D))."""

    class FixedHiddenMlp(Mlp):
        def __init__(self, in_features, hidden_features=None, **kwargs):
            super().__init__(in_features, hidden_features=hidden, **kwargs)

    FixedHiddenMlp.__name__ = FixedHiddenMlp.__qualname__ = f"Mlp_{hidden}"
    return FixedHiddenMlp


def build_vit(config: ViTConfig) -> VisionTransformer:
    c = config
    model = VisionTransformer(
        img_size=c.img_size, patch_size=c.patch_size, in_chans=c.in_chans, num_classes=c.num_classes,
        embed_dim=c.width, depth=c.depth, num_heads=c.heads, mlp_ratio=c.mlp_hidden / c.width,
        qkv_bias=c.qkv_bias, drop_path_rate=c.drop_path_rate, global_pool=c.global_pool,
        attn_layer=attention_with_head_dim(c.head_dim, c.qk_scale), mlp_layer=mlp_with_hidden(c.mlp_hidden),
    )
    block = model.blocks[0]
    assert block.attn.head_dim == c.head_dim and block.attn.num_heads == c.heads
    assert block.mlp.fc1.out_features == c.mlp_hidden
    return model

