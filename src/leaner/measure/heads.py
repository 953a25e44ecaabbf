"""What Theorem 3.2 assumes of the heads, measured: each head's isotropy and the heads' alignment
over the tokens, on the real head outputs and on Gaussian heads of the same shape (the theorem's),
with the closed form's kappa. The conditioning stage writes them beside each layer's kappa
(docs/kappa.md)."""

from __future__ import annotations

import math

import torch

from .theory import edge_ratio, kappa_formula


def head_structure(mats: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What Theorem 3.2 assumes of the heads, measured on each (N, h*d) matrix of head outputs:
    `isotropy`, the heads' mean stable rank ||A_i||_F^2 / ||A_i||_2^2 over min(N, d) (1: every
    direction alike; 1 / min(N, d): the head is rank one), and `alignment`, the mean over pairs of
    heads of |u_i . u_j|, u_i the top left singular vector of A_i (its dominant direction over the
    tokens: near 0 for independent Gaussian heads, 1 where every head's output lies along one
    token direction, as when a near-uniform softmax makes each head output its values' mean on
    every token). NaN alignment with one head."""
    mats = mats.detach().to(torch.float64)
    b, n, cols = mats.shape
    heads = cols // head_dim
    blocks = mats.reshape(b, n, heads, head_dim).permute(0, 2, 1, 3)  # (B, h, N, d)
    u, sv, _ = torch.linalg.svd(blocks, full_matrices=False)
    stable = sv.square().sum(-1) / sv[..., 0].square().clamp_min(1e-300)
    isotropy = (stable / min(n, head_dim)).mean(-1)
    if heads < 2:
        return isotropy, torch.full_like(isotropy, math.nan)
    top = u[..., 0]  # (B, h, N)
    gram = (top @ top.mT).abs()
    alignment = (gram.sum((-2, -1)) - gram.diagonal(dim1=-2, dim2=-1).sum(-1)) / (heads * (heads - 1))
    return isotropy, alignment


GAUSSIAN_DRAWS, GAUSSIAN_SEED = 256, 0  # the Gaussian heads each measured shape is held against


def gaussian_heads(tokens: int, heads: int, head_dim: int) -> dict[str, float]:
    """Theorem 3.2's heads for one measured shape: kappa, isotropy and alignment (medians over
    GAUSSIAN_DRAWS independent N x (h*d) standard Gaussian blocks from a fixed seed), and the
    closed form's kappa for the same (N, D = h*d) (theory.kappa_formula). LAPACK is handed the tall
    orientation, as conditioning.kappa hands it the measured matrices."""
    gen = torch.Generator().manual_seed(GAUSSIAN_SEED)
    blocks = torch.randn(GAUSSIAN_DRAWS, tokens, heads * head_dim, generator=gen, dtype=torch.float64)
    isotropy, alignment = head_structure(blocks, head_dim)
    tall = blocks.mT if tokens < heads * head_dim else blocks
    return {"gauss_kappa": edge_ratio(tall).median().item(), "gauss_isotropy": isotropy.median().item(),
            "gauss_alignment": alignment.median().item(), "theorem_kappa": kappa_formula(tokens, heads * head_dim)}


def structure_row(slot: dict, tokens: int, cols: int, gaussians: dict) -> dict:
    """A heads_concat row's head structure (medians over samples) beside Gaussian heads of its
    shape (computed once per shape, `gaussians` the cache); nothing for the other matrices."""
    if "isotropy" not in slot:
        return {}
    d = slot["head_dim"]
    key = (tokens, cols // d, d)
    if key not in gaussians:
        gaussians[key] = gaussian_heads(*key)
    finite = [t[torch.isfinite(t)] for t in (slot["isotropy"], slot["alignment"])]
    return {"head_isotropy": finite[0].median().item() if finite[0].numel() else math.nan,
            "head_alignment": finite[1].median().item() if finite[1].numel() else math.nan, **gaussians[key]}
