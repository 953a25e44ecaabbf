"""A model's settings, typed, one class per architecture (as nanoGPT's GPTConfig): the plan builds
one per variant, its spec holds it as a plain dict (`to_spec`), and a run reads it back once,
as `RunSpec.of(spec).model` (runspec.py). The keys a study may set in its `model:` block take their defaults
from the schema's `model` section, their one home (schema.defaults); the others come from the grid
point (depth, heads, widths) and the dataset (image size, classes, vocabulary, context). Light (no
torch): the workflow layer builds these.

A spec's model dict has exactly the fields of its architecture's class: `model_config` refuses an
unknown key, or a missing one, in one line. A field marked `omit_at_default` is left out of the
spec at its default, so that specs planned before the field existed stay the same (and their runs
are not retrained)."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import ClassVar

from ..schema import defaults

_MODEL = defaults("model")  # the schema's defaults of the study's `model:` keys


def _schema(key: str):
    return field(default=_MODEL[key])


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """What every architecture has: `depth` blocks of `heads` attention heads of dimension `head_dim`."""

    arch: ClassVar[str]
    depth: int
    heads: int
    head_dim: int

    @property
    def attention_heads(self) -> int:
        """Heads in one layer's attention, over all its modules."""
        return self.heads

    @property
    def residual_width(self) -> int:
        """The width of the residual stream (a block's input and output)."""
        raise NotImplementedError

    @property
    def seq_len(self) -> int:
        """Tokens of the longest input (padded sequences: their full length; a ViT's class token counted)."""
        raise NotImplementedError

    def to_spec(self) -> dict:
        """The plain dict a spec (JSON) holds: `arch`, then every field."""
        out = {"arch": self.arch}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (f.metadata.get("omit_at_default") and value == f.default):
                out[f.name] = value
        return out

    def shape_key(self) -> str:
        """The spec without its depth, as sorted JSON: what a block's parameters, FLOPs and memory
        depend on (models/memory.py and footprint.py count them once per key, for every depth)."""
        return json.dumps({k: v for k, v in self.to_spec().items() if k != "depth"}, sort_keys=True)


@dataclass(frozen=True, kw_only=True)
class BlockStack(ModelConfig):
    """timm `Block`s: pre-norm, GELU MLP of `mlp_hidden` units, residual stream of `width`."""

    width: int
    mlp_hidden: int
    qkv_bias: bool = _schema("qkv_bias")
    drop_path_rate: float = _schema("drop_path_rate")
    # the attention logits' factor over timm's 1/sqrt(head_dim) (a softmax temperature of 1/qk_scale):
    # the one knob that moves the heads' conditioning with the parameters and shapes fixed
    qk_scale: float = field(default=1.0, metadata={"omit_at_default": True})

    @property
    def residual_width(self) -> int:
        return self.width


@dataclass(frozen=True, kw_only=True)
class ViTConfig(BlockStack):
    """A timm VisionTransformer (models/vit.py)."""

    arch: ClassVar[str] = "vit"
    patch_size: int = _schema("patch_size")
    global_pool: str = _schema("global_pool")
    img_size: int
    in_chans: int
    num_classes: int

    @property
    def seq_len(self) -> int:
        return (self.img_size // self.patch_size) ** 2 + 1  # and the class token


@dataclass(frozen=True, kw_only=True)
class SequenceConfig(BlockStack):
    """A token-sequence transformer (models/sequence.py) over `vocab_size` tokens, `max_len` at most."""

    vocab_size: int
    max_len: int

    @property
    def seq_len(self) -> int:
        return self.max_len


@dataclass(frozen=True, kw_only=True)
class ClassifierConfig(SequenceConfig):
    """An encoder that mean-pools its real tokens into `num_classes` logits (ListOps, GLUE)."""

    arch: ClassVar[str] = "sequence_classifier"
    num_classes: int
    pad_id: int = field(default=0, metadata={"omit_at_default": True})  # ListOps pads with token 0


@dataclass(frozen=True, kw_only=True)
class CausalLMConfig(SequenceConfig):
    """A GPT-style language model: causal attention, no padding."""

    arch: ClassVar[str] = "causal_lm"


@dataclass(frozen=True, kw_only=True)
class MaskedLMConfig(SequenceConfig):
    """A BERT-style masked language model; padding keys are masked."""

    arch: ClassVar[str] = "masked_lm"
    pad_id: int


@dataclass(frozen=True, kw_only=True)
class TimmConfig(ModelConfig):
    """One of timm's own backbones (`backbone`, a timm model name) with its depth, heads, width and
    MLP width set through its family's own arguments (models/backbones.py)."""

    arch: ClassVar[str] = "timm"
    backbone: str
    width: int
    mlp_hidden: int
    img_size: int
    in_chans: int
    num_classes: int
    drop_path_rate: float = _schema("drop_path_rate")
    qk_scale: float = field(default=1.0, metadata={"omit_at_default": True})  # only 1: leaner's own ViT's knob

    @property
    def residual_width(self) -> int:
        return self.width

    @property
    def seq_len(self) -> int:
        """Tokens of the first attention: DaViT's stride-4 stem's positions; XCiT's patches (8 or 16
        pixels, as the model's name says; its class token joins after the XCA blocks); TNT's and
        its class token."""
        if self.backbone.startswith("davit"):
            return (self.img_size // 4) ** 2
        patch = 8 if re.search(r"_p8_|patch8", self.backbone) else 16
        return (self.img_size // patch) ** 2 + self.backbone.startswith("tnt")


@dataclass(frozen=True, kw_only=True)
class NearestConfig(ModelConfig):
    """P2's encoder (models/nearest.py): `modules` averaged attentions of `heads` heads of rank
    `head_dim` = d_model / heads, on `tokens` points in R^`dim` (plus `posn` positions)."""

    arch: ClassVar[str] = "nearest_point_encoder"
    ff: int = _schema("ff")
    posn_dim: int = _schema("posn_dim")
    modules: int
    dim: int
    tokens: int
    posn: str
    d_model: int

    @property
    def attention_heads(self) -> int:
        return self.heads * self.modules

    @property
    def residual_width(self) -> int:
        return self.d_model

    @property
    def seq_len(self) -> int:
        return self.tokens


# The grid axes a spec leaves out at their default, with that default (a logit scale of 1): where a
# variant id, a label or a summary written before the axis existed names them only when they differ.
AXIS_DEFAULTS = {f.name: f.default for f in dataclasses.fields(BlockStack) if f.metadata.get("omit_at_default")}


CONFIGS: dict[str, type[ModelConfig]] = {c.arch: c for c in (
    ViTConfig, ClassifierConfig, CausalLMConfig, MaskedLMConfig, NearestConfig, TimmConfig)}


def model_config(values: dict | ModelConfig) -> ModelConfig:
    """The typed config of a model dict (a spec's `model`: `arch` and its class's fields)."""
    if isinstance(values, ModelConfig):
        return values
    arch = values.get("arch")
    if arch not in CONFIGS:
        raise ValueError(f"model.arch: unknown architecture {arch!r} (allowed: {', '.join(CONFIGS)})")
    cls = CONFIGS[arch]
    names = [f.name for f in dataclasses.fields(cls)]
    given = {k: v for k, v in values.items() if k != "arch"}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"model.{unknown[0]}: not a setting of a {arch} model (allowed: {', '.join(names)})")
    missing = [f.name for f in dataclasses.fields(cls)
               if f.name not in given and f.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"model.{missing[0]}: missing from a {arch} model (required: {', '.join(missing)})")
    return cls(**given)
