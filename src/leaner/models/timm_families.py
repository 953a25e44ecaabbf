"""timm's backbone families as leaner knows them, without importing timm (the planning side runs
where torch and timm may not be installed): which family a timm model is, a DaViT's stages, the
`timm.create_model` arguments of a variant, and a shape's parameters. How each family's knobs map
onto a grid is backbones.py's docstring.

All of it is read from timm_table.json, committed beside this module: every model of the known
families with its family and (DaViT) its own stages, and, for every timm shape the configs plan (a
variant without its depth), the count at the family's shallowest depth and of one more layer
(every further layer is one more copy of the same block: backbones.repeated_block).
tests/test_params.py builds every entry with timm and checks the configs' shapes are all there;
`make timm-table` writes it. What the table does not hold is asked of timm where it is installed,
and is one line where it is not.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from ..io import write_json
from .config import TimmConfig

FAMILIES = ("xcit", "tnt", "davit")
IMG_SIZED = ("xcit", "tnt")  # the families whose constructor takes img_size (DaViT's windows take any size)
TABLE = Path(__file__).with_name("timm_table.json")
_WITHOUT_TIMM = "torch and timm are not installed here"


@functools.cache
def table() -> dict:
    """{"timm": its version, "families": {model: family}, "stages": {DaViT: [depths, heads, widths]},
    "shapes": {shape key: [parameters at the shallowest depth, of one more layer]}}."""
    return json.loads(TABLE.read_text())


def family_of(name: str) -> str:
    """The family (timm module) of timm model `name`; a model that is not timm's, or of a family
    whose knobs are not known here, is one line."""
    family = table()["families"].get(name)
    if family:
        return family
    try:
        import timm
        import torch
        from timm.models import is_model, model_entrypoint
    except ImportError:
        raise ValueError(f"model.timm: {name!r} is not one of the timm models leaner knows and {_WITHOUT_TIMM} to "
                         f"ask timm (allowed: a model of the families {', '.join(FAMILIES)})") from None
    if not is_model(name):
        near = timm.list_models(f"*{name.split('_')[0]}*")[:6]
        raise ValueError(f"model.timm: {name!r} is not a timm model (allowed: a name of timm.list_models()"
                         + (f", e.g. {', '.join(near)})" if near else ")"))
    import inspect

    from timm.models import is_model_in_modules

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
    """A DaViT's own (depths, num_heads, embed_dims) per stage (timm's model, on the meta device,
    where the table does not hold it)."""
    kept = table()["stages"].get(name)
    if kept:
        return tuple(tuple(x) for x in kept)
    import timm
    import torch

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


def shape_key(c: TimmConfig) -> str:
    """What a timm variant's parameters depend on but its depth: its spec without depth and drop path."""
    return json.dumps({k: v for k, v in c.to_spec().items() if k not in ("depth", "drop_path_rate")},
                      sort_keys=True)


def shape_params(c: TimmConfig) -> tuple[int, int]:
    """(parameters of `c`'s shape at its family's shallowest depth, of one more layer)."""
    kept = table()["shapes"].get(shape_key(c))
    return tuple(kept) if kept else _counted(shape_key(c))


@functools.cache
def _counted(key: str) -> tuple[int, int]:
    try:
        import timm
        import torch
    except ImportError:
        raise ValueError(f"model: timm shape {key} is not in {TABLE.name} and {_WITHOUT_TIMM} to count it "
                         "(allowed: plan where they are, or add the shape with `make timm-table` there)") from None
    spec = json.loads(key)
    counts = []
    for depth in (min_depth(spec["backbone"]), min_depth(spec["backbone"]) + 1):
        c = TimmConfig(**{k: v for k, v in spec.items() if k != "arch"}, depth=depth)
        with torch.device("meta"):
            model = timm.create_model(c.backbone, pretrained=False, **timm_kwargs(c))
        counts.append(sum(p.numel() for p in model.parameters()))
    return counts[0], counts[1] - counts[0]


def write_table(shapes: list[TimmConfig]) -> dict:
    """Write timm_table.json for the installed timm: every model of FAMILIES, the DaViTs' stages and
    the parameters of each shape of `shapes`, all asked of timm (the old table is set aside first)."""
    import timm

    families = {name: family for family in FAMILIES for name in timm.list_models(module=family)}
    out = {"timm": timm.__version__, "families": dict(sorted(families.items())), "stages": {}, "shapes": {}}
    write_json(TABLE, out)
    for cached in (table, own_stages, _counted):
        cached.cache_clear()
    out["stages"] = {name: [list(x) for x in own_stages(name)] for name, family in out["families"].items()
                     if family == "davit"}
    out["shapes"] = {key: list(_counted(key)) for key in sorted({shape_key(c) for c in shapes})}
    write_json(TABLE, out)
    for cached in (table, own_stages, _counted):
        cached.cache_clear()
    return out
