"""Every model comes from `build_model(config)`, its typed config (config.py) or a spec's model dict;
parameter counts come from the built model."""

from __future__ import annotations

import re
from collections import Counter

from .config import ModelConfig, NearestConfig, SequenceConfig, TimmConfig, ViTConfig, model_config


def build_model(config: ModelConfig | dict):
    """The model of `config` (a spec's model dict is typed first: `model_config`)."""
    config = model_config(config)
    if isinstance(config, ViTConfig):
        from .vit import build_vit

        return build_vit(config)
    if isinstance(config, TimmConfig):
        from .backbones import build_timm

        return build_timm(config)
    if isinstance(config, NearestConfig):
        from .nearest import build_nearest

        return build_nearest(config)
    assert isinstance(config, SequenceConfig), config
    from .sequence import build_sequence_model

    return build_sequence_model(config)


def attention_modules(model):
    """(layer index, attention module) for every block whose attention feeds an output projection
    (a timm backbone's: each attention over tokens or channels, in order: backbones.attention_layers)."""
    if getattr(model, "leaner_backbone", None):
        from .backbones import attention_layers

        return list(enumerate(m for _, m in attention_layers(model)))
    return [(i, blk.attn) for i, blk in enumerate(model.blocks)]


_ATTENTION = re.compile(r"(^|\.)attn(_in|_out)?\.")  # ViT's attn; TNT's inner and outer attention
_MLP = re.compile(r"(^|\.)mlp(_in)?\.")
# a ViT's and the sequence models' embeddings; XCiT's conv patch stem; TNT's pixel embedding and
# positions; DaViT's stem and the patch merging between its stages
_EMBEDDING = ("patch_embed", "cls_token", "pos_embed", "reg_token", "embed", "token_embed", "stem", "pixel_embed",
              "patch_pos", "pixel_pos")


def _group(name: str) -> str:
    parts = name.split(".")
    if _ATTENTION.search(name):
        return "attention"
    if _MLP.search(name):
        return "mlp"
    if parts[0] in _EMBEDDING or ".downsample." in f".{name}":
        return "embedding"
    if parts[0] in ("head", "lm_head", "classifier"):
        return "head"
    return "norm"  # the norms, and what else sits between: TNT's pixel-to-patch projection, DaViT's conv positions


def param_counts(model) -> dict:
    """Parameter counts by group (attention, mlp, embedding, head, norm) and in total."""
    counts: Counter = Counter()
    for name, p in model.named_parameters():
        counts[_group(name)] += p.numel()
    out = {k: int(counts.get(k, 0)) for k in ("attention", "mlp", "embedding", "head", "norm")}
    out["total"] = int(sum(p.numel() for p in model.parameters()))
    return out
