"""Conditioning of the Jacobian of an attention block, the measurement in P1's revised abstract
("multiple heads improve the conditioning of the Jacobian of the attention block").

For one input sequence X in R^{N x D}, the attention block is the map f: X -> attn(X) in R^{N x D}
(the module the conditioning stage hooks: timm's `Attention` with its output projection, P2's
averaged attention). Its Jacobian J = df/dX is an (N*D) x (N*D) matrix, and kappa(J) =
sigma_max / sigma_min.

- `exact`: J from `torch.func.jacrev`, singular values from a float64 SVD. Cheap while N*D is small
  (N*D = 1088 for the default ViT: 0.2 s per matrix on one core; 3072: 11 s).
- `lanczos`: matrix-free, for paper scale (ViT-B: N*D = 197*768 = 151k). Golub-Kahan-Lanczos
  bidiagonalisation of J itself (not of J^T J, which would square kappa), driven by one JVP and
  one VJP per step, with full reorthogonalisation. After k steps U^T J V = B (k x k, bidiagonal);
  the singular values of B interlace J's, so the estimate of sigma_max is a lower bound and that of
  sigma_min an upper bound: the estimated kappa never exceeds the true one. Each estimate comes
  with its residual ||J^T u - theta v|| = beta_k |p_k| (from the recurrence, no extra product);
  an extreme value counts as converged when its residual is below `tol` times its own estimate.
  sigma_max converges in a few steps, sigma_min slowly: the residuals say how far to trust it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..models.memory import JACREV_CHUNK

EXACT_MAX = 1200  # largest N*D whose Jacobian is formed and decomposed exactly (0.2 s per SVD at 1088)
LANCZOS_STEPS = 64
TOL = 1e-2  # converged: each extreme's residual below 1% of its own estimate



@torch.no_grad()  # the transforms differentiate f; the outer no_grad only drops the weights' graph
def exact_singular_values(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """All singular values of df/dx at x (x and f(x) of any shape, flattened), descending. The
    Jacobian is formed JACREV_CHUNK rows at a time: vmapping all N*D backward passes at once holds
    N*D copies of every intermediate (4096 heads' scores in float64: ~9 GB each at N*D = 1024)."""
    jac = torch.func.jacrev(f, chunk_size=JACREV_CHUNK)(x).detach()
    return torch.linalg.svdvals(jac.reshape(-1, x.numel()).to(torch.float64))


@torch.no_grad()
def lanczos_extremes(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, steps: int = LANCZOS_STEPS,
                     seed: int = 0) -> dict:
    """Estimates of sigma_max and sigma_min of df/dx at x after `steps` Golub-Kahan-Lanczos steps
    (fewer when the Krylov space is exhausted), with their residuals and the steps taken."""
    y, vjp = torch.func.vjp(f, x)

    def jvp(v):
        return torch.func.jvp(f, (x,), (v,))[1]

    n, m = x.numel(), y.numel()
    steps = max(1, min(steps, n, m))
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(n, generator=gen, dtype=torch.float64).to(x.device, x.dtype)
    vs, us, alphas, betas = [v / v.norm()], [], [], []
    beta = 0.0
    for _ in range(steps):
        u = jvp(vs[-1].view_as(x)).reshape(-1)
        if us:
            u = u - beta * us[-1]
        u = _orthogonalise(u, us)
        alpha = float(u.norm())
        if alpha == 0.0:
            break
        us.append(u / alpha)
        alphas.append(alpha)
        w = vjp(us[-1].view_as(y))[0].reshape(-1) - alpha * vs[-1]
        w = _orthogonalise(w, vs)
        beta = float(w.norm())
        betas.append(beta)
        if beta <= 1e-14 * max(alphas):
            break
        vs.append(w / beta)
    k = len(alphas)
    bidiag = torch.diag(torch.tensor(alphas, dtype=torch.float64))
    if k > 1:
        bidiag += torch.diag(torch.tensor(betas[:k - 1], dtype=torch.float64), 1)
    left, theta, _ = torch.linalg.svd(bidiag)
    residual = abs(betas[k - 1]) * left[k - 1].abs()  # ||J^T u_i - theta_i v_i|| for each Ritz pair
    exhausted = k == min(n, m) or betas[k - 1] <= 1e-14 * max(alphas)
    if exhausted:
        residual = torch.zeros_like(residual)
    return {"sigma_max": float(theta[0]), "sigma_min": float(theta[-1]), "residual_max": float(residual[0]),
            "residual_min": float(residual[-1]), "steps": k}


def _orthogonalise(w: torch.Tensor, basis: list[torch.Tensor]) -> torch.Tensor:
    """Full reorthogonalisation against the basis, twice (classical Gram-Schmidt is unstable once)."""
    if not basis:
        return w
    q = torch.stack(basis, 1)
    for _ in range(2):
        w = w - q @ (q.T @ w)
    return w


def block_kappa(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, exact_max: int = EXACT_MAX,
                steps: int = LANCZOS_STEPS, tol: float = TOL) -> dict:
    """kappa of the Jacobian of f at x: exactly when x has at most `exact_max` entries, else the
    Lanczos estimate. Returns sigma_max, sigma_min, kappa, method and (Lanczos) the relative
    residual of sigma_min and whether both extremes converged."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # torch.func differentiates f itself (no graph through the weights); attention through the
    # math kernel, the one with forward-mode derivatives and batching rules
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        return _block_kappa(f, x, exact_max, steps, tol)


def _block_kappa(f, x, exact_max, steps, tol) -> dict:
    if x.numel() <= exact_max:
        sv = exact_singular_values(f, x)
        return {"sigma_max": float(sv[0]), "sigma_min": float(sv[-1]), "kappa": _ratio(sv[0], sv[-1]),
                "method": "exact", "rel_residual": 0.0, "converged": True, "lanczos_steps": 0}
    est = lanczos_extremes(f, x, steps)
    rel = max(_ratio(est["residual_max"], est["sigma_max"]), _ratio(est["residual_min"], est["sigma_min"]))
    return {"sigma_max": est["sigma_max"], "sigma_min": est["sigma_min"],
            "kappa": _ratio(est["sigma_max"], est["sigma_min"]), "method": "lanczos", "rel_residual": rel,
            "converged": rel <= tol, "lanczos_steps": est["steps"]}


def _ratio(hi, lo) -> float:
    hi, lo = float(hi), float(lo)
    return hi / lo if lo > 0 else (0.0 if hi == 0 else math.inf)
