"""timm's own backbones as ablation families: a study names a timm model (`model: {timm: NAME}`)
and its grid's depth, heads, width and MLP width, which map onto that family's own arguments;
the model comes from `timm.create_model` with them, never re-implemented.

A family is known by the knobs it has:

- xcit (XCiT): `depth`, `num_heads`, `embed_dim`, `mlp_ratio`; attention over channels (XCA) in
  every block, then timm's two class-attention blocks (their own heads, not a grid axis).
- tnt (Transformer in Transformer): `depth`, `num_heads_outer` (the heads over patches),
  `embed_dim` (the outer width), `mlp_ratio` (the outer MLP's); the inner (pixel) attention keeps
  the model's own heads and width.
- davit (DaViT): four stages, each `depths[i]` pairs of a window (spatial) and a channel attention
  block, their widths `embed_dims` and heads `num_heads` doubling stage by stage. The grid's depth
  is the total of the stages, and a change of it goes to the deepest stage (timm's third, which P1
  cuts from 9 to 5); heads and width are the first stage's, the later stages keeping the model's
  own ratios to it, so that the head dim is the same at every stage, as in timm's models.

A family leaner does not know the knobs of refuses in one line naming the model and its arguments.
What needs no torch (a name's family, a DaViT's stages, the arguments of a variant, its
parameters) is timm_families.py, which the planning side reads.
"""

from __future__ import annotations

import torch

from .config import TimmConfig
from .timm_families import deepest_stage, family_of, min_depth, own_stages, timm_kwargs


def repeated_block(c: TimmConfig) -> tuple[int, str]:
    """Where one more layer of the variant `c` goes: (a depth at which that block exists twice, the
    path of its second copy in the model built at that depth). Each layer beyond adds one more copy of
    it, so a quantity measured there extends to any depth (models/footprint.py): XCiT's and TNT's
    second block; a DaViT's second pair of blocks in its deepest stage, the others at their own depths."""
    if family_of(c.backbone) != "davit":
        return 2, "blocks.1"
    return min_depth(c.backbone) + 1, f"stages.{deepest_stage(own_stages(c.backbone)[0])}.blocks.1"


def build_timm(c: TimmConfig) -> torch.nn.Module:
    import timm

    if c.qk_scale != 1.0:
        raise ValueError(f"qk_scale: {c.qk_scale:g} is for leaner's own ViT (allowed: 1 with a timm backbone)")
    model = timm.create_model(c.backbone, pretrained=False, **timm_kwargs(c))
    family = family_of(c.backbone)
    blocks = ([blk for s in model.stages for blk in s.blocks] if family == "davit" else list(model.blocks))
    first = {"xcit": lambda: blocks[0].attn, "tnt": lambda: blocks[0].attn_out,
             "davit": lambda: blocks[0][0].attn}[family]()
    assert len(blocks) == c.depth and first.num_heads == c.heads, (c, len(blocks), first.num_heads)
    model.leaner_backbone = family  # models.attention_modules reads the family's attention layers
    return model


def attention_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(name, module) of every attention over a block's tokens or channels whose heads feed an
    output projection `proj`, in the model's order: XCiT's XCA (not its class attention, whose
    output is one row), TNT's inner and outer attention, DaViT's window and channel attention."""
    skip = ("cls_attn_blocks.",)
    return [(name, m) for name, m in model.named_modules()
            if hasattr(m, "num_heads") and isinstance(getattr(m, "proj", None), torch.nn.Linear)
            and not name.startswith(skip)]
