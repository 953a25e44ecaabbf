"""A variant's parameter count without building it: the planning side (memory per job, `leaner
match`, the DAG of thousands of variants) needs counts where torch and timm may not be installed,
such as a cluster's login node.

- leaner's own architectures (ViT, the sequence models, P2's encoder): closed forms over their
  config, layer by layer as the modules in vit.py, sequence.py and nearest.py hold them
  (tests/test_params.py holds every one equal to the built model's count).
- timm's backbones: their count at the family's shallowest depth and of one more layer, from a
  table kept true against timm (timm_families.py).
"""

from __future__ import annotations

from .config import ModelConfig, NearestConfig, SequenceConfig, TimmConfig, ViTConfig, model_config
from .timm_families import min_depth, shape_params, timm_kwargs


def _linear(fan_in: int, fan_out: int, bias: bool = True) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def _block(width: int, heads: int, head_dim: int, mlp_hidden: int, qkv_bias: bool) -> int:
    """timm's pre-norm `Block` with the head dim and MLP width pinned (vit.py): two LayerNorms,
    qkv and proj, the MLP's two layers."""
    inner = heads * head_dim
    return (2 * 2 * width + _linear(width, 3 * inner, qkv_bias) + _linear(inner, width)
            + _linear(width, mlp_hidden) + _linear(mlp_hidden, width))


def _own(c: ModelConfig) -> int:
    if isinstance(c, ViTConfig):
        patches = (c.img_size // c.patch_size) ** 2
        stem = _linear(c.in_chans * c.patch_size ** 2, c.width) + c.width + (patches + 1) * c.width  # cls, positions
        body = c.depth * _block(c.width, c.heads, c.head_dim, c.mlp_hidden, c.qkv_bias)
        return stem + body + 2 * c.width + (_linear(c.width, c.num_classes) if c.num_classes else 0)
    if isinstance(c, SequenceConfig):
        embed = (c.vocab_size + c.max_len) * c.width
        body = c.depth * _block(c.width, c.heads, c.head_dim, c.mlp_hidden, c.qkv_bias)
        classes = getattr(c, "num_classes", None)  # a classifier's head; the LMs' is the embedding (tied, no bias)
        return embed + body + 2 * c.width + (_linear(c.width, classes) if classes is not None else 0)
    assert isinstance(c, NearestConfig), c
    d = c.d_model
    attention = c.modules * (_linear(d, 3 * d) + _linear(d, d))  # W modules' in- and out-projections
    block = attention + _linear(d, c.ff) + _linear(c.ff, d) + 2  # and two scalar norms
    positions = {"none": 0, "additive": c.dim, "concatenated": c.posn_dim}[c.posn] * c.tokens
    return c.depth * block + positions


def model_params(model: ModelConfig | dict) -> int:
    """Parameters of `model` as built (tied weights once)."""
    model = model_config(model)
    if not isinstance(model, TimmConfig):
        return _own(model)
    timm_kwargs(model)  # a depth or head dim its family cannot be built with: one line
    shallowest, per_layer = shape_params(model)
    return shallowest + (model.depth - min_depth(model.backbone)) * per_layer
