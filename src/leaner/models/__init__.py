"""Every model comes from `build_model(spec)`; parameter counts come from the built model."""

from __future__ import annotations

from collections import Counter


def build_model(spec: dict):
    arch = spec["arch"]
    if arch == "vit":
        from .vit import build_vit

        return build_vit(spec)
    if arch == "nearest_point_encoder":
        from .nearest import build_nearest

        return build_nearest(spec)
    if arch in ("sequence_classifier", "causal_lm", "masked_lm"):
        from .sequence import build_sequence_model

        return build_sequence_model(spec)
    raise ValueError(f"unknown model arch {arch!r} (allowed: vit, nearest_point_encoder, sequence_classifier, "
                     "causal_lm, masked_lm)")


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
