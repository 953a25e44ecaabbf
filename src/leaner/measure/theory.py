"""Theorem 3.2 of P1, checked by Monte Carlo.

For an N x D matrix with i.i.d. Gaussian entries and D > N, sigma_max ~ sqrt(D) + sqrt(N) and
sigma_min ~ sqrt(D) - sqrt(N), so kappa ~ (sqrt(D) + sqrt(N)) / (sqrt(D) - sqrt(N)). With the head
dim d fixed and D = h*d, kappa falls toward 1 as h grows; with D fixed, the number of heads does
not enter at all (the flat control).
"""

from __future__ import annotations

import math

import numpy as np


def kappa_formula(n: int, d_total: int) -> float:
    """The asymptotic edge ratio (sqrt(D)+sqrt(N))/(sqrt(D)-sqrt(N)) (roles swapped when N > D;
    infinite at D == N)."""
    big, small = max(n, d_total), min(n, d_total)
    if big == small:
        return math.inf
    return (math.sqrt(big) + math.sqrt(small)) / (math.sqrt(big) - math.sqrt(small))


def edge_ratio(blocks):
    """sigma_max / sigma_min of each matrix of a (..., N, C) float64 tensor (Gaussian blocks are
    never singular: no threshold, unlike the measured kappa)."""
    import torch

    sv = torch.linalg.svdvals(blocks)
    return sv[..., 0] / sv[..., -1]


def gaussian_kappas(n: int, heads: int, head_dim: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """kappa of `draws` matrices A = [A_1 ... A_h], A_i an N x head_dim Gaussian block."""
    import torch

    return edge_ratio(torch.from_numpy(rng.standard_normal((draws, n, heads * head_dim)))).numpy()


def monte_carlo(tokens: list[int], head_dims: list[int], widths: list[int], heads: list[int],
                draws: int, seed: int) -> list[dict]:
    """Rows for both sweeps: fixed_head_dim (D = h*d grows) and fixed_width (D fixed, d = D/h)."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in tokens:
        for d in head_dims:
            for h in heads:
                rows.append(_row("fixed_head_dim", n, h, d, draws, rng))
        for width in widths:
            for h in heads:
                if width % h == 0:
                    rows.append(_row("fixed_width", n, h, width // h, draws, rng))
    return rows


def _row(protocol: str, n: int, h: int, d: int, draws: int, rng) -> dict:
    k = gaussian_kappas(n, h, d, draws, rng)
    return {"protocol": protocol, "tokens": n, "heads": h, "head_dim": d, "width": h * d, "draws": draws,
            "kappa_mean": float(np.mean(k)), "kappa_median": float(np.median(k)), "kappa_std": float(np.std(k)),
            "kappa_formula": kappa_formula(n, h * d)}


def write_theory(settings: dict, out_csv: str) -> None:
    import pandas as pd

    from ..io import write_csv

    rows = monte_carlo(settings["tokens"], settings["head_dim"], settings["width"], settings["heads"],
                       settings["draws"], settings["seed"])
    write_csv(out_csv, pd.DataFrame(rows))
