"""Condition numbers: the kappa arithmetic, and that the hook captures exactly the head outputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from leaner.measure.conditioning import (
    capture_attention,
    conditioning_rows,
    kappa,
    layer_kappas,
    singular_kappa,
    summarize,
)
from leaner.measure.jacobian import block_kappa, exact_singular_values, lanczos_extremes
from leaner.models import build_model

from conftest import small_spec
from reference_kappa import agrees, reference_kappas

pytestmark = pytest.mark.fast


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
    from leaner.training.weights import save_weights

    spec = small_spec(depth=2)
    torch.manual_seed(0)
    model = build_model(spec["model"])
    path = tmp_path / "w.safetensors"
    save_weights(model, path, spec)
    rows = conditioning_rows(spec, {"init": (0, str(path)), "final": (10, str(path))}, str(digits_manifest))
    assert len(rows) == 2 * 2 * 3
    assert {(r["checkpoint"], r["layer"], r["matrix"]) for r in rows} == {
        (c, layer, m) for c in ("init", "final") for layer in (1, 2)
        for m in ("heads_concat", "attn_proj_out", "jacobian")}
    for r in rows:
        jac = r["matrix"] == "jacobian"
        assert r["tokens"] == 17 and r["samples"] == (spec["conditioning"]["jacobian_samples"] if jac else 32)
        assert r["cols"] == (17 * 16 if jac else 16) and r["method"] == ("exact" if jac else "svd")
        assert r["kappa_median"] >= 1.0 and r["kappa_p90"] >= r["kappa_median"]
        assert 0.0 <= r["singular_fraction"] <= 1.0
        # the heads' structure beside Gaussian heads of the same shape, on the head outputs only
        assert ("head_isotropy" in r) == (r["matrix"] == "heads_concat")
    concat = [r for r in rows if r["matrix"] == "heads_concat"]
    heads, d = spec["model"]["heads"], spec["model"]["head_dim"]
    for r in concat:
        assert 1 / min(17, d) <= r["head_isotropy"] <= 1.0 and 0.0 <= r["head_alignment"] <= 1.0
        assert r["gauss_kappa"] == pytest.approx(_lower_median(
            [np.linalg.cond(g) for g in torch.randn(256, 17, heads * d, generator=torch.Generator().manual_seed(0),
                                                     dtype=torch.float64).numpy()]), rel=1e-9)
        root_n, root_d = 17 ** 0.5, (heads * d) ** 0.5
        assert r["theorem_kappa"] == pytest.approx((root_n + root_d) / abs(root_n - root_d))


def test_head_structure_tells_rank_one_aligned_heads_from_independent_isotropic_ones():
    """Theorem 3.2's assumptions, measured: independent Gaussian heads are far from rank one and
    their dominant token directions nearly orthogonal; heads that output one row on every token (a
    uniform softmax) are rank one (isotropy 1 / min(N, d)) and aligned (1), and an orthonormal head
    is isotropic (1)."""
    from leaner.measure.heads import gaussian_heads, head_structure

    gen = torch.Generator().manual_seed(0)
    gauss = torch.randn(64, 17, 4 * 16, generator=gen, dtype=torch.float64)
    iso, align = head_structure(gauss, 16)
    assert (iso > 0.15).all() and (iso < 0.6).all() and align.median() < 0.4
    uniform = torch.randn(64, 1, 64, generator=gen, dtype=torch.float64).expand(64, 17, 64)
    iso, align = head_structure(uniform, 16)
    torch.testing.assert_close(iso, torch.full((64,), 1 / 16, dtype=torch.float64))
    torch.testing.assert_close(align, torch.ones(64, dtype=torch.float64))
    q = torch.linalg.qr(torch.randn(17, 16, generator=gen, dtype=torch.float64)).Q[None]
    assert head_structure(q, 16)[0].item() == pytest.approx(1.0) and torch.isnan(head_structure(q, 16)[1]).all()
    ref = gaussian_heads(17, 4, 16)
    assert ref == gaussian_heads(17, 4, 16) and ref["gauss_kappa"] < ref["theorem_kappa"] * 1.5


# ----------------------------------------------------------------------------- float64 and singular blocks

def _single_head_vit(bias_scale: float):
    """1 layer, 1 head of head dim = width 16 <= N = 17 tokens: at timm's init V = LN(x) W_v^T with
    zero bias has rank <= 15 (LayerNorm's rows have zero mean), so A is exactly singular; a value
    bias of size `bias_scale` lifts it, kappa growing like 1 / bias_scale^2."""
    spec = small_spec(heads=1, width=16, head_dim=16)
    torch.manual_seed(0)
    model = build_model(spec["model"])
    with torch.no_grad():
        model.blocks[0].attn.qkv.bias[32:] = bias_scale * torch.randn(16, generator=torch.Generator().manual_seed(1))
    return spec, model


def _lower_median(values) -> float:
    return float(np.sort(np.asarray(values))[(len(values) - 1) // 2])


@pytest.mark.parametrize("bias_scale", [1e-3, 1e-2, 1.0])
def test_the_stage_agrees_with_an_independent_float64_recomputation(bias_scale, tmp_path, digits_manifest):
    """From the saved weights, through the conditioning stage: per sample and in the median, kappa
    within 1e-6 where it is <= 1e8 and within 1e-3 up to 1e12 (the models reach 1e9-1e10)."""
    from leaner.tasks.trainers import make_task
    from leaner.training.weights import save_weights

    spec, model = _single_head_vit(bias_scale)
    path = tmp_path / "w.safetensors"
    save_weights(model, path, spec)
    rows = conditioning_rows(spec, {"final": (1, str(path))}, str(digits_manifest))
    probe = make_task(spec, str(digits_manifest), torch.device("cpu")).probe_inputs(32)
    ref = reference_kappas(load_and_build(spec, path), probe)[0]
    if bias_scale == 1e-3:
        assert _lower_median(ref) > 1e8  # the regime a float32 forward pass gets wrong
    row = next(r for r in rows if r["matrix"] == "heads_concat")
    limit = singular_kappa(17, 16)
    assert agrees(row["kappa_median"], _lower_median(ref), limit), (row["kappa_median"], _lower_median(ref))
    ours = layer_kappas(load_and_build(spec, path), probe)[0]["heads_concat"].numpy()
    assert all(agrees(o, r, limit) for o, r in zip(ours, ref)), list(zip(ours, ref))[:5]


def load_and_build(spec, path):
    from leaner.training.weights import load_weights

    model = build_model(spec["model"])
    load_weights(model, path)
    return model


def test_a_single_full_width_head_is_singular_at_init(tmp_path, digits_manifest):
    """The construction of the issue: float64 says ~1e17, so the stage records +inf and a
    singular fraction of 1, never a magnitude; the summary counts it."""
    from leaner.training.weights import save_weights

    spec, model = _single_head_vit(0.0)
    path = tmp_path / "init.safetensors"
    save_weights(model, path, spec)
    row = next(r for r in conditioning_rows(spec, {"init": (0, str(path))}, str(digits_manifest))
               if r["matrix"] == "heads_concat")
    assert row["singular_fraction"] == 1.0
    assert row["kappa_median"] == math.inf and row["kappa_gmean"] == math.inf


def test_summary_treats_singular_samples_as_ranks():
    s = summarize(torch.tensor([2.0, 8.0, math.inf, math.nan]))
    assert s["singular_fraction"] == pytest.approx(1 / 3)
    assert s["kappa_median"] == 8.0 and s["kappa_p90"] == math.inf
    assert s["kappa_mean"] == math.inf and s["kappa_gmean"] == math.inf
    s = summarize(torch.tensor([math.inf, math.inf]))
    assert s["kappa_median"] == math.inf and s["singular_fraction"] == 1.0
    assert summarize(torch.tensor([2.0, 8.0]))["singular_fraction"] == 0.0


def test_singular_threshold_follows_the_shape():
    assert singular_kappa(17, 64) == pytest.approx(1 / (2.220446049250313e-16 * 64))
    near = torch.diag(torch.tensor([1.0, 1e-16], dtype=torch.float64))  # sigma_min below eps * 2
    assert kappa(near).item() == math.inf
    assert kappa(torch.diag(torch.tensor([1.0, 1e-12], dtype=torch.float64))).item() == pytest.approx(1e12)


# ----------------------------------------------------------------------------- the Jacobian

def test_jacobian_kappa_of_a_linear_map_with_known_singular_values():
    """f(X) = X M^T has Jacobian I (x) M: kappa(J) = kappa(M), exactly and by Lanczos."""
    gen = torch.Generator().manual_seed(0)
    m = _with_singular_values(torch.logspace(0, -4, 6, dtype=torch.float64).tolist(), 6, 6, gen)
    x = torch.randn(3, 6, dtype=torch.float64, generator=gen)
    def f(z):
        return z @ m.T
    exact = block_kappa(f, x)
    lanczos = block_kappa(f, x, exact_max=0, steps=18)
    assert exact["method"] == "exact" and lanczos["method"] == "lanczos"
    assert exact["kappa"] == pytest.approx(1e4, rel=1e-9), exact
    assert lanczos["kappa"] == pytest.approx(1e4, rel=1e-6) and lanczos["converged"]


def _attention_block(heads=2, width=16, tokens=8, seed=0):
    from leaner.models.vit import attention_with_head_dim

    torch.manual_seed(seed)
    attn = attention_with_head_dim(width // heads)(width, num_heads=heads, qkv_bias=True).double().eval()
    x = torch.randn(tokens, width, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return attn, x


def test_lanczos_estimate_against_the_exact_jacobian_of_an_attention_block():
    """Exhausting the Krylov space (N*D steps) gives the exact kappa; after fewer steps sigma_max
    has converged and the estimate is a lower bound of kappa, as interlacing promises, and a
    sigma_min called converged is within its residual."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    attn, x = _attention_block()
    def f(z):
        return attn(z[None])[0]
    with sdpa_kernel(SDPBackend.MATH):
        exact = block_kappa(f, x)
        full = block_kappa(f, x, exact_max=0, steps=x.numel())
        short = block_kappa(f, x, exact_max=0, steps=24)
        sv = exact_singular_values(f, x)
        est = lanczos_extremes(f, x, 24)
    assert exact["kappa"] == pytest.approx(float(sv[0] / sv[-1]), rel=1e-12)
    assert full["kappa"] == pytest.approx(exact["kappa"], rel=1e-6) and full["converged"]
    assert short["sigma_max"] == pytest.approx(exact["sigma_max"], rel=1e-6)
    assert short["kappa"] <= exact["kappa"] * (1 + 1e-9)
    assert est["residual_max"] <= 1e-6 * est["sigma_max"]
    gap = min(abs(est["sigma_min"] - s) for s in sv.tolist())
    assert gap <= est["residual_min"] * (1 + 1e-6) + 1e-12  # a singular value lies within the residual


def test_jacobian_of_a_padded_sequence_is_the_real_tokens_block(tmp_path):
    """Masked padding keys: the Jacobian over the first n tokens equals the (n*D) x (n*D) block of
    the full Jacobian of the padded input."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from leaner.measure.conditioning import jacobian_kappas

    attn, x = _attention_block(tokens=8)
    n = 5
    mask = torch.zeros(1, 1, 1, 8, dtype=torch.bool)
    mask[..., :n] = True
    with sdpa_kernel(SDPBackend.MATH):
        got = jacobian_kappas(attn, x[None], {"attn_mask": mask}, torch.tensor([n]), 1, 10_000, 8)[0]
        full = torch.func.jacrev(lambda z: attn(z[None], attn_mask=mask)[0])(x).detach().reshape(8 * 16, 8 * 16)
    sv = torch.linalg.svdvals(full[: n * 16, : n * 16])
    assert got["tokens"] == n and got["cols"] == n * 16
    assert got["kappa"] == pytest.approx(float(sv[0] / sv[-1]), rel=1e-9)


def test_the_probe_in_chunks_sized_from_a_memory_limit():
    """P2 at toy size, 40 probe inputs in chunks of 3 (the first holding the Jacobian's 2 inputs):
    every kappa, the Jacobian's included, is the one-chunk run's, bit for bit here (in general a
    batch's size can move a float64 forward pass's last bits, so chunks stay 64 wherever that
    fits). At figN's largest shape (4,096 heads a layer, N 256) one input needs ~6.4 GB, so 16 GB
    measures 2 at a time where 64 at once would need ~412 GB; ViT-B fits 64 in 16 GB."""
    from leaner.measure.conditioning import _layer_kappas, float64_probe
    from leaner.models.memory import probe_bytes, probe_chunk, probe_shape

    m = {"arch": "nearest_point_encoder", "depth": 2, "heads": 4, "modules": 8, "dim": 8, "tokens": 16,
         "posn": "none", "d_model": 16, "head_dim": 4, "ff": 16, "posn_dim": 64}
    torch.manual_seed(0)
    model, x = build_model(m), torch.randn(40, 16, 8)
    jac = {"samples": 2, "exact_max": 10_000, "lanczos_steps": 8}
    tokens, heads, cols = probe_shape(m)
    chunk = probe_chunk(heads, tokens, cols, 2, 3.5 * probe_bytes(heads, tokens, cols, 2))
    sizes: list[int] = []
    with float64_probe(model, x) as probe:
        whole = _layer_kappas(model, probe, 64, None, jac)
        hook = model.register_forward_hook(lambda mod, args, out: sizes.append(len(args[0])))
        parts = _layer_kappas(model, probe, chunk, None, jac)
        hook.remove()
    assert (tokens, heads, cols, chunk) == (16, 32, 128, 3) and sizes == [3] * 13 + [1]
    for layer in whole:
        for name in whole[layer]:
            assert torch.equal(whole[layer][name]["kappas"], parts[layer][name]["kappas"]), (layer, name)
    assert probe_bytes(4096, 256, 4096, 2) == pytest.approx(6.44e9, rel=0.01)
    assert probe_chunk(4096, 256, 4096, 2, 16e9) == 2 and probe_chunk(4096, 256, 4096, 2, 1e9) == 1
    assert probe_chunk(12, 197, 768, 12, None) == 64 and probe_chunk(12, 197, 768, 12, 16e9) == 64
