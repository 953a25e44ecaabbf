"""Every model comes from `build_model(config)`, its typed config (config.py) or a spec's model dict;
parameter counts come from the built model."""

from __future__ import annotations

from collections import Counter

from .config import ModelConfig, NearestConfig, SequenceConfig, ViTConfig, model_config


def build_model(config: ModelConfig | dict):
    """The model of `config` (a spec's model dict is typed first: `model_config`)."""
    config = model_config(config)
    if isinstance(config, ViTConfig):
        from .vit import build_vit

        return build_vit(config)
    if isinstance(config, NearestConfig):
        from .nearest import build_nearest

        return build_nearest(config)
    assert isinstance(config, SequenceConfig), config
    from .sequence import build_sequence_model

    return build_sequence_model(config)


def attention_modules(model):
    """(layer index, attention module) for every block whose attention feeds an output projection."""
    return [(i, blk.attn) for i, blk in enumerate(model.blocks)]


def _group(name: str) -> str:
    parts = name.split(".")
    if ".attn." in f".{name}":
        return "attention"
    if ".mlp." in f".{name}":
        return "mlp"
    if parts[0] in ("patch_embed", "cls_token", "pos_embed", "reg_token", "embed", "token_embed"):
        return "embedding"
    if parts[0] in ("head", "lm_head", "classifier"):
        return "head"
    return "norm"


def param_counts(model) -> dict:
    """Parameter counts by group (attention, mlp, embedding, head, norm) and in total."""
    counts: Counter = Counter()
    for name, p in model.named_parameters():
        counts[_group(name)] += p.numel()
    out = {k: int(counts.get(k, 0)) for k in ("attention", "mlp", "embedding", "head", "norm")}
    out["total"] = int(sum(p.numel() for p in model.parameters()))
    return out
