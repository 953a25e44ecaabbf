"""Token-sequence transformers built from timm `Block`s: an encoder classifier (LRA ListOps, GLUE
fine-tuning), a BERT-style masked LM and a GPT-style causal LM.

Same blocks as the ViT (pre-norm, GELU MLP, timm `Attention` with the head dim and the MLP width
pinned, see vit.py), so the conditioning hook on `blocks[i].attn.proj` and the parameter groups
work unchanged. Encoders mask padding keys; the classifier mean-pools the real tokens; the LMs
predict a token at every position with the output layer tied to the token embedding (GPT-2,
BERT); the causal LM runs causal attention (`is_causal`, fused SDPA where available).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from timm.layers import trunc_normal_
from timm.models.vision_transformer import Block

from .config import CausalLMConfig, SequenceConfig
from .vit import attention_with_head_dim, mlp_with_hidden


class SequenceTransformer(nn.Module):
    """tokens (B, N) -> pooled logits (B, C) when `num_classes` is given, else token logits (B, N, V)
    from an output layer tied to the embedding."""

    def __init__(self, vocab_size: int, max_len: int, width: int, depth: int, heads: int, head_dim: int,
                 mlp_hidden: int, num_classes: int | None = None, causal: bool = False, pad_id: int | None = 0,
                 qkv_bias: bool = True, drop_path_rate: float = 0.0,
                 qk_scale: float = 1.0):
        super().__init__()
        self.causal, self.pad_id, self.max_len = causal, pad_id, max_len
        self.pooled = num_classes is not None
        self.token_embed = nn.Embedding(vocab_size, width)
        self.pos_embed = nn.Parameter(torch.zeros(1, max_len, width))
        rates = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()  # numbers, even on the meta device
        self.blocks = nn.ModuleList([
            Block(width, heads, mlp_ratio=mlp_hidden / width, qkv_bias=qkv_bias, drop_path=rates[i],
                  attn_layer=attention_with_head_dim(head_dim, qk_scale), mlp_layer=mlp_with_hidden(mlp_hidden))
            for i in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_classes if self.pooled else vocab_size, bias=self.pooled)
        self.apply(_init)
        trunc_normal_(self.pos_embed, std=0.02)
        if not self.pooled:  # GPT-2 / BERT: the output layer is the token embedding
            self.head.weight = self.token_embed.weight

    def no_weight_decay(self) -> set[str]:
        return {"pos_embed"}

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        if n > self.max_len:
            raise ValueError(f"sequence of {n} tokens is longer than the model's {self.max_len}")
        x = self.token_embed(tokens) + self.pos_embed[:, :n]
        valid = None if self.causal or self.pad_id is None else tokens != self.pad_id
        mask = None if valid is None else valid[:, None, None, :]  # keys: True = attend
        for blk in self.blocks:
            x = blk(x, attn_mask=mask, is_causal=self.causal)
        x = self.norm(x)
        if not self.pooled:
            return self.head(x)
        if valid is None:
            return self.head(x.mean(1))
        w = valid.unsqueeze(-1).to(x.dtype)
        return self.head((x * w).sum(1) / w.sum(1).clamp_min(1.0))


def _init(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)


def build_sequence_model(config: SequenceConfig) -> SequenceTransformer:
    """A classifier (ClassifierConfig), a causal LM or a masked LM."""
    c = config
    model = SequenceTransformer(
        vocab_size=c.vocab_size, max_len=c.max_len, width=c.width, depth=c.depth, heads=c.heads,
        head_dim=c.head_dim, mlp_hidden=c.mlp_hidden, num_classes=getattr(c, "num_classes", None),
        causal=isinstance(c, CausalLMConfig), pad_id=getattr(c, "pad_id", None), qkv_bias=c.qkv_bias,
        drop_path_rate=c.drop_path_rate, qk_scale=c.qk_scale)
    attn = model.blocks[0].attn
    assert attn.head_dim == c.head_dim and attn.num_heads == c.heads
    return model
