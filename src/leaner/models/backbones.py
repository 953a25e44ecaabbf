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
"""

from __future__ import annotations

import functools
import inspect

import torch

from .config import TimmConfig

FAMILIES = ("xcit", "tnt", "davit")
IMG_SIZED = ("xcit", "tnt")  # the families whose constructor takes img_size (DaViT's windows take any size)


def family_of(name: str) -> str:
    """The family (timm module) of timm model `name`; a model that is not timm's, or of a family
    whose knobs are not known here, is one line."""
    import timm
    from timm.models import is_model, is_model_in_modules, model_entrypoint

    if not is_model(name):
        near = timm.list_models(f"*{name.split('_')[0]}*")[:6]
        raise ValueError(f"model.timm: {name!r} is not a timm model (allowed: a name of timm.list_models()"
                         + (f", e.g. {', '.join(near)})" if near else ")"))
    for family in FAMILIES:
        if is_model_in_modules(name, [family]):
            return family
    with torch.device("meta"):
        built = model_entrypoint(name)()
    args = [p for p in inspect.signature(type(built).__init__).parameters if p not in ("self", "kwargs")]
    module = model_entrypoint(name).__module__.rsplit(".", 1)[-1]
    raise ValueError(f"model.timm: {name} ({module}) has no depth/heads knobs leaner knows (its arguments: "
                     f"{', '.join(args)}; allowed: a model of the families {', '.join(FAMILIES)})")


@functools.cache
def own_stages(name: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """A DaViT's own (depths, num_heads, embed_dims) per stage, read from timm's model on the meta device."""
    import timm

    with torch.device("meta"):
        model = timm.create_model(name)
    return (tuple(len(s.blocks) for s in model.stages),
            tuple(s.blocks[0][0].attn.num_heads for s in model.stages),
            tuple(s.blocks[0][0].attn.proj.in_features for s in model.stages))


def deepest_stage(depths: tuple[int, ...]) -> int:
    """The stage a DaViT's change of depth goes to: its deepest (the first of equals)."""
    return max(range(len(depths)), key=lambda i: (depths[i], -i))


def min_depth(name: str) -> int:
    """The fewest layers timm model `name` can be built with as a grid's depth: 1, or for a DaViT its
    other stages' blocks and one in its deepest."""
    if family_of(name) != "davit":
        return 1
    depths = own_stages(name)[0]
    return sum(depths) - depths[deepest_stage(depths)] + 1


def repeated_block(c: TimmConfig) -> tuple[int, str]:
    """Where one more layer of the variant `c` goes: (a depth at which that block exists twice, the
    path of its second copy in the model built at that depth). Each layer beyond adds one more copy of
    it, so a quantity measured there extends to any depth (models/footprint.py): XCiT's and TNT's
    second block; a DaViT's second pair of blocks in its deepest stage, the others at their own depths."""
    if family_of(c.backbone) != "davit":
        return 2, "blocks.1"
    return min_depth(c.backbone) + 1, f"stages.{deepest_stage(own_stages(c.backbone)[0])}.blocks.1"


def timm_kwargs(c: TimmConfig) -> dict:
    """The arguments of `timm.create_model(c.backbone, ...)` that make the variant `c`."""
    family = family_of(c.backbone)
    out = {"num_classes": c.num_classes, "in_chans": c.in_chans, "drop_path_rate": c.drop_path_rate,
           "mlp_ratio": c.mlp_hidden / c.width}
    if family in IMG_SIZED:
        out["img_size"] = c.img_size
    if c.width % c.heads or c.width // c.heads != c.head_dim:
        raise ValueError(f"model: a {family} backbone's head dim is its width over its heads ({c.width}/{c.heads}), "
                         f"not {c.head_dim} (allowed: protocol fixed_width or fixed_head_dim)")
    if family == "xcit":
        return {**out, "depth": c.depth, "num_heads": c.heads, "embed_dim": c.width}
    if family == "tnt":
        return {**out, "depth": c.depth, "num_heads_outer": c.heads, "embed_dim": c.width}
    depths, heads, widths = own_stages(c.backbone)
    deepest = deepest_stage(depths)
    grown = depths[deepest] + c.depth - sum(depths)
    if grown < 1:
        raise ValueError(f"model: depth {c.depth} leaves no block in {c.backbone}'s deepest stage (its stages: "
                         f"{'-'.join(map(str, depths))}; allowed: depth {min_depth(c.backbone)} or more)")
    stage_depths = tuple(grown if i == deepest else d for i, d in enumerate(depths))
    return {**out, "depths": stage_depths,
            "num_heads": tuple(c.heads * h // heads[0] for h in heads),
            "embed_dims": tuple(c.width * w // widths[0] for w in widths)}


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
