"""Condition numbers: the kappa arithmetic, and that the hook captures exactly the head outputs."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import small_spec
from leaner.conditioning import capture_attention, conditioning_rows, kappa, layer_kappas, summarize
from leaner.models import build_model


def _with_singular_values(sv: list[float], rows: int, cols: int, gen: torch.Generator) -> torch.Tensor:
    u, _ = torch.linalg.qr(torch.randn(rows, rows, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(cols, cols, generator=gen, dtype=torch.float64))
    s = torch.zeros(rows, cols, dtype=torch.float64)
    s[range(len(sv)), range(len(sv))] = torch.tensor(sv, dtype=torch.float64)
    return u @ s @ v.T


@pytest.mark.parametrize("rows,cols", [(5, 12), (12, 5), (6, 6)])
def test_kappa_of_matrices_with_known_singular_values(rows, cols):
    gen = torch.Generator().manual_seed(0)
    n = min(rows, cols)
    cases = [[1.0] * n, list(torch.logspace(3, 0, n).tolist()), [7.0] + [0.5] * (n - 1)]
    mats = torch.stack([_with_singular_values(sv, rows, cols, gen) for sv in cases])
    got = kappa(mats.to(torch.float32))  # float32 input is promoted: the SVD is float64
    want = torch.tensor([max(sv) / min(sv) for sv in cases], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=0)


def test_kappa_is_nan_for_non_finite_input_and_summary_skips_it():
    good = torch.eye(4, dtype=torch.float64) * torch.tensor([1.0, 2.0, 3.0, 4.0])
    bad = good.clone()
    bad[0, 0] = math.nan
    k = kappa(torch.stack([good, bad]))
    assert k[0].item() == pytest.approx(4.0)
    assert math.isnan(k[1].item())
    stats = summarize(torch.tensor([2.0, 8.0, math.nan]))
    assert stats["kappa_mean"] == pytest.approx(5.0)
    assert stats["kappa_gmean"] == pytest.approx(4.0)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("heads,width,head_dim", [(1, 16, 16), (4, 16, 4), (4, 16, 8)])
def test_hook_captures_the_manual_per_head_attention(fused, heads, width, head_dim):
    """The pre-hook on attn.proj sees [softmax(Q_i K_i^T / sqrt(d)) V_i]_i, computed here by hand."""
    torch.manual_seed(0)
    spec = small_spec(depth=2, heads=heads, width=width, head_dim=head_dim)["model"]
    model = build_model(spec).eval()
    for blk in model.blocks:
        blk.attn.fused_attn = fused
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad(), capture_attention(model) as captured:
        model(x)
        # recompute layer by layer from the block inputs
        h = model.patch_embed(x)
        h = model._pos_embed(h)
        h = model.norm_pre(h)
        for layer, blk in enumerate(model.blocks):
            z = blk.norm1(h)
            b, n, _ = z.shape
            qkv = blk.attn.qkv(z).reshape(b, n, 3, heads, head_dim)
            outs = []
            for i in range(heads):
                q, k, v = qkv[:, :, 0, i], qkv[:, :, 1, i], qkv[:, :, 2, i]
                a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(head_dim), dim=-1)
                outs.append(a @ v)
            manual = torch.cat(outs, dim=-1)
            got = captured[layer]["heads_concat"][0]
            assert got.shape == (3, n, heads * head_dim)
            torch.testing.assert_close(got, manual, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(captured[layer]["attn_proj_out"][0], blk.attn.proj(manual),
                                       rtol=1e-5, atol=1e-6)
            h = blk(h)
    # hooks are removed afterwards
    assert all(not blk.attn.proj._forward_pre_hooks for blk in model.blocks)


def test_more_heads_lower_kappa_at_init():
    """The paper's direction on a timm ViT at init: 16 heads condition better than 1."""
    x = torch.randn(64, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    medians = {}
    for heads in (1, 16):
        torch.manual_seed(0)
        model = build_model(small_spec(heads=heads, width=64, head_dim=64 // heads)["model"])
        medians[heads] = layer_kappas(model, x)[0]["heads_concat"].median().item()
    assert medians[16] < medians[1] / 10


def test_conditioning_rows_cover_every_layer_matrix_and_checkpoint(tmp_path, digits_manifest):
    from leaner.train import save_weights

    spec = small_spec(depth=2)
    torch.manual_seed(0)
    model = build_model(spec["model"])
    path = tmp_path / "w.safetensors"
    save_weights(model, path, spec)
    rows = conditioning_rows(spec, {"init": (0, str(path)), "final": (10, str(path))}, str(digits_manifest))
    assert len(rows) == 2 * 2 * 2
    assert {(r["checkpoint"], r["layer"], r["matrix"]) for r in rows} == {
        (c, l, m) for c in ("init", "final") for l in (1, 2) for m in ("heads_concat", "attn_proj_out")}
    for r in rows:
        assert r["tokens"] == 17 and r["samples"] == 32
        assert r["kappa_median"] >= 1.0 and r["kappa_p90"] >= r["kappa_median"] * 0.999
