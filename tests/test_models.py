"""Models are built from the spec exactly, and parameter counts come from the built model."""

from __future__ import annotations

import pytest
import torch

from leaner.models import build_model, param_counts

from conftest import small_spec

pytestmark = pytest.mark.fast

VIT_B = {"arch": "vit", "depth": 12, "heads": 12, "width": 768, "head_dim": 64, "mlp_hidden": 3072,
         "patch_size": 16, "img_size": 224, "in_chans": 3, "num_classes": 1000}


def test_vit_b_baseline_has_86_57m_parameters():
    counts = param_counts(build_model(VIT_B))
    assert counts["total"] == 86_567_656  # 86.57M, papers.md 1.3
    assert sum(v for k, v in counts.items() if k != "total") == counts["total"]
    assert counts["attention"] == 12 * (768 * 3 * 768 + 3 * 768 + 768 * 768 + 768)
    assert counts["mlp"] == 12 * (768 * 3072 + 3072 + 3072 * 768 + 768)


def test_lean_vit_counts_match_the_papers_table():
    # papers.md 1.3: 8L, head 64, h16 -> D1024, MLP 1536: 60.82M; 8L, D768, MLP 3072: 58.22M
    lean = {**VIT_B, "depth": 8, "heads": 16, "width": 1024, "head_dim": 64, "mlp_hidden": 1536}
    assert round(param_counts(build_model(lean))["total"] / 1e6, 2) == 60.82
    same_width = {**VIT_B, "depth": 8, "heads": 24, "head_dim": 32}
    assert round(param_counts(build_model(same_width))["total"] / 1e6, 2) == 58.22


def test_absolute_mlp_width_and_decoupled_head_dim():
    spec = small_spec(width=24, heads=2, head_dim=5, mlp_hidden=37)["model"]
    model = build_model(spec)
    blk = model.blocks[0]
    assert blk.mlp.fc1.out_features == 37
    assert blk.attn.head_dim == 5 and blk.attn.qkv.out_features == 3 * 2 * 5 and blk.attn.proj.in_features == 10
    out = model(torch.randn(2, 1, 8, 8))
    assert out.shape == (2, 10)


def test_same_seed_same_init():
    spec = small_spec()["model"]
    torch.manual_seed(3)
    a = build_model(spec).state_dict()
    torch.manual_seed(3)
    b = build_model(spec).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("arch", ["vit", "causal_lm"])
def test_qk_scale_scales_every_logit_and_adds_no_parameter(fused, arch):
    if arch == "vit":
        spec, x = small_spec(width=24, heads=2, head_dim=5, mlp_hidden=37)["model"], torch.randn(2, 1, 8, 8)
    else:
        spec = {"arch": "causal_lm", "depth": 2, "heads": 3, "width": 24, "head_dim": 8, "mlp_hidden": 48,
                "vocab_size": 50, "max_len": 12}
        x = torch.randint(0, 50, (2, 12))
    torch.manual_seed(0)
    plain = build_model(spec)
    torch.manual_seed(0)
    scaled = build_model({**spec, "qk_scale": 8.0})
    assert param_counts(scaled) == param_counts(plain)
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), scaled.state_dict().values()))
    assert not torch.allclose(plain(x), scaled(x), atol=1e-4)  # the scale does something
    # the same logits, made by multiplying the query projection by 8 in the unscaled model
    with torch.no_grad():
        for blk in plain.blocks:
            q = blk.attn.num_heads * blk.attn.head_dim
            blk.attn.qkv.weight[:q] *= 8.0
            if blk.attn.qkv.bias is not None:
                blk.attn.qkv.bias[:q] *= 8.0
    for model in (plain, scaled):
        for blk in model.blocks:
            blk.attn.fused_attn = fused
    torch.testing.assert_close(scaled(x), plain(x), rtol=1e-5, atol=1e-5)
