"""softmax(q k^T / sqrt(r)) v for many heads of small rank r (P2's widened layers), one Triton program
over a tile of several heads.

Why a kernel of its own: at head rank 1-8 a score costs r multiply-adds and one exponential, but the
generic kernels pad the head dim to their matrix unit's width (4-16) and give every (batch, head) pair
its own tiny tile; at figN's L2-H64-W64 N256 that is 1M pairs of 256 x 256 scores of rank 1. Here a
program takes G heads x BLOCK_M queries and walks the keys in blocks of BLOCK_N with the online
softmax (FlashAttention's recurrence): the scores are built column by column as r outer products, so
nothing is padded, and the N x N scores are never stored. The backward recomputes the scores from
the saved log-sum-exp, in two kernels without atomics (dq over the keys; dk and dv over the queries),
so a step's gradients are the same bits on every run of the same inputs.

Exactness is checked against the math form on the CPU under Triton's interpreter (TRITON_INTERPRET=1,
set before this module is imported: tests/test_lowrank.py), and on a GPU by tests/test_gpu.py; its
speed by `make gpu-check` (section p2kernel). Imported only where the form is chosen: it needs triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# scores a program holds at once (G x BLOCK_M x BLOCK_N), at rank <= 2: chosen by measurement (figN H64 N256
# rank 1 on one H200, gpu-check p2kernel 2026-12-04: 1.9 ps a score at 2,048 against 4.0 at 4,096)
TILE = 2048
WIDE_TILE = 1024  # at rank 3-8: the r columns' loads and accumulators spill registers past this (sm_90)
WALK = 16  # the block of the axis a kernel walks and reduces over: small, so that each thread holds whole rows


def blocks(tokens: int, walk_queries: bool = False, tile: int = TILE) -> tuple[int, int, int]:
    """(G heads, BLOCK_M queries, BLOCK_N keys) of one program for sequences of `tokens` points,
    about `tile` scores in all. The axis the kernel walks (keys in the forward and dq, queries in
    dk/dv: `walk_queries`) comes in blocks of WALK: its reductions stay within a thread (no warp
    shuffles; the compiled SASS for sm_90 has none at rank 1). The other axis takes up to 64."""
    n = triton.next_power_of_2(tokens)
    walk, held = min(n, WALK), min(n, 64)
    block_m, block_n = (walk, held) if walk_queries else (held, walk)
    return max(1, tile // (block_m * block_n)), block_m, block_n


@triton.jit
def _held(heads, n, R: tl.constexpr, G: tl.constexpr, BLOCK: tl.constexpr):
    """The rows a program holds: its G heads (and which exist), its BLOCK positions of axis 1 of the
    grid (and which exist), each head's offset and the positions' offsets into the (heads, N, r) inputs."""
    h = tl.program_id(0) * G + tl.arange(0, G)
    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    h_ok = h < heads
    ok = h_ok[:, None] & (i < n)[None, :]
    base = h.to(tl.int64) * n * R
    return h, i, h_ok, ok, base, base[:, None] + i[None, :] * R


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, heads, n, scale,
             R: tl.constexpr, RP: tl.constexpr, G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    h, m, h_ok, row_ok, base, q_rows = _held(heads, n, R, G, BLOCK_M)
    cols = tl.arange(0, RP)
    q = tl.load(q_ptr + q_rows[:, :, None] + cols[None, None, :],  # in log2 units: scaled by log2(e)
                mask=row_ok[:, :, None] & (cols < R)[None, None, :], other=0.0) * (scale * 1.4426950408889634)
    m_i = tl.full((G, BLOCK_M), float("-inf"), tl.float32)
    l_i = tl.zeros((G, BLOCK_M), tl.float32)
    acc = tl.zeros((G, BLOCK_M, RP), tl.float32)
    for start in range(0, n, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        key_ok = h_ok[:, None] & (j < n)[None, :]
        k_rows = base[:, None] + j[None, :] * R
        s = tl.zeros((G, BLOCK_M, BLOCK_N), tl.float32)
        for c in tl.static_range(R):  # r outer products: the head dim unrolled, nothing padded
            q_c = tl.sum(tl.where(cols == c, q, 0.0), axis=2)  # held with the accumulator: no layout change
            s += q_c[:, :, None] * tl.load(k_ptr + k_rows + c, mask=key_ok, other=0.0)[:, None, :]
        s = tl.where(key_ok[:, None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=2))
        m_new = tl.where(m_new == float("-inf"), 0.0, m_new)  # a head past the end: every key masked
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, :, None])
        l_i = l_i * alpha + tl.sum(p, axis=2)
        acc = acc * alpha[:, :, None]
        for c in tl.static_range(R):
            v_c = tl.load(v_ptr + k_rows + c, mask=key_ok, other=0.0)
            acc += tl.where(cols == c, tl.sum(p * v_c[:, None, :], axis=2)[:, :, None], 0.0)
        m_i = m_new
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    tl.store(o_ptr + q_rows[:, :, None] + cols[None, None, :], acc / l_safe[:, :, None],
             mask=row_ok[:, :, None] & (cols < R)[None, None, :])
    tl.store(lse_ptr + h.to(tl.int64)[:, None] * n + m[None, :], m_i + tl.log2(l_safe), mask=row_ok)


@triton.jit
def _recompute(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, q_rows, k_rows, stat, row_ok, key_ok, qscale,
               R: tl.constexpr, G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A tile's probabilities p (queries x keys) and dS = p (dP - delta), from the saved log-sum-exp."""
    s = tl.zeros((G, BLOCK_M, BLOCK_N), tl.float32)
    dp = tl.zeros((G, BLOCK_M, BLOCK_N), tl.float32)
    for c in tl.static_range(R):
        s += (tl.load(q_ptr + q_rows + c, mask=row_ok, other=0.0) * qscale)[:, :, None] * \
            tl.load(k_ptr + k_rows + c, mask=key_ok, other=0.0)[:, None, :]
        dp += tl.load(do_ptr + q_rows + c, mask=row_ok, other=0.0)[:, :, None] * \
            tl.load(v_ptr + k_rows + c, mask=key_ok, other=0.0)[:, None, :]
    lse = tl.load(lse_ptr + stat, mask=row_ok, other=0.0)
    delta = tl.load(delta_ptr + stat, mask=row_ok, other=0.0)
    p = tl.where(row_ok[:, :, None] & key_ok[:, None, :], tl.exp2(s - lse[:, :, None]), 0.0)
    return p, p * (dp - delta[:, :, None])


@triton.jit
def _backward_dq(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, heads, n, scale,
                 R: tl.constexpr, RP: tl.constexpr, G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    h, m, h_ok, row_ok, base, q_rows = _held(heads, n, R, G, BLOCK_M)
    cols = tl.arange(0, RP)
    stat = h.to(tl.int64)[:, None] * n + m[None, :]
    dq = tl.zeros((G, BLOCK_M, RP), tl.float32)
    for start in range(0, n, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        key_ok = h_ok[:, None] & (j < n)[None, :]
        k_rows = base[:, None] + j[None, :] * R
        p, ds = _recompute(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, q_rows, k_rows, stat, row_ok, key_ok,
                           scale * 1.4426950408889634, R, G, BLOCK_M, BLOCK_N)
        for c in tl.static_range(R):
            k_c = tl.load(k_ptr + k_rows + c, mask=key_ok, other=0.0)
            dq += tl.where(cols == c, tl.sum(ds * k_c[:, None, :], axis=2)[:, :, None], 0.0)
    tl.store(dq_ptr + q_rows[:, :, None] + cols[None, None, :], dq * scale,
             mask=row_ok[:, :, None] & (cols < R)[None, None, :])


@triton.jit
def _backward_dkdv(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, heads, n, scale,
                   R: tl.constexpr, RP: tl.constexpr, G: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    h, j, h_ok, key_ok, base, k_rows = _held(heads, n, R, G, BLOCK_N)
    cols = tl.arange(0, RP)
    dk = tl.zeros((G, BLOCK_N, RP), tl.float32)
    dv = tl.zeros((G, BLOCK_N, RP), tl.float32)
    for start in range(0, n, BLOCK_M):
        m = start + tl.arange(0, BLOCK_M)
        row_ok = h_ok[:, None] & (m < n)[None, :]
        q_rows = base[:, None] + m[None, :] * R
        stat = h.to(tl.int64)[:, None] * n + m[None, :]
        p, ds = _recompute(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, q_rows, k_rows, stat, row_ok, key_ok,
                           scale * 1.4426950408889634, R, G, BLOCK_M, BLOCK_N)
        for c in tl.static_range(R):
            do_c = tl.load(do_ptr + q_rows + c, mask=row_ok, other=0.0)
            q_c = tl.load(q_ptr + q_rows + c, mask=row_ok, other=0.0)
            dv += tl.where(cols == c, tl.sum(p * do_c[:, :, None], axis=1)[:, :, None], 0.0)
            dk += tl.where(cols == c, tl.sum(ds * q_c[:, :, None], axis=1)[:, :, None], 0.0)
    tile = key_ok[:, :, None] & (cols < R)[None, None, :]
    tl.store(dk_ptr + k_rows[:, :, None] + cols[None, None, :], dk * scale, mask=tile)
    tl.store(dv_ptr + k_rows[:, :, None] + cols[None, None, :], dv, mask=tile)


def _launch(kernel, walk_queries: bool, heads: int, n: int, r: int, tile: int, *tensors) -> None:
    g, block_m, block_n = blocks(n, walk_queries, tile)
    held = block_n if walk_queries else block_m  # the axis the grid splits
    grid = (triton.cdiv(heads, g), triton.cdiv(n, held))
    kernel[grid](*tensors, heads, n, r ** -0.5, R=r, RP=triton.next_power_of_2(r), G=g,
                 BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps(tile))


class LowRankAttention(torch.autograd.Function):
    """softmax(q k^T / sqrt(r)) v over (heads, N, r) fp32 tensors."""

    @staticmethod
    def forward(ctx, q, k, v, tile):
        heads, n, r = q.shape
        o = torch.empty_like(q)
        lse = torch.empty(heads, n, device=q.device, dtype=torch.float32)
        _launch(_forward, False, heads, n, r, tile, q, k, v, o, lse)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.tile = tile
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        heads, n, r = q.shape
        do = do.contiguous()
        delta = (do * o).sum(-1)  # rowsum(dP * P) = rowsum(dO * O)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        _launch(_backward_dq, False, heads, n, r, ctx.tile, q, k, v, do, lse, delta, dq)
        _launch(_backward_dkdv, True, heads, n, r, ctx.tile, q, k, v, do, lse, delta, dk, dv)
        return dq, dk, dv, None


def warps(tile: int) -> int:
    """Warps a program runs for a tile of `tile` scores: ~16-32 scores a thread."""
    return 8 if tile >= 4096 else 4


def default_tile(rank: int) -> int:
    """Scores a program holds: TILE at rank <= 2, WIDE_TILE above (benchmarks/rows/kernel_sass.py)."""
    return TILE if rank <= 2 else WIDE_TILE


def lowrank_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tile: int | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(r)) v for (B, heads, N, r) fp32 inputs. Any rank is computed; the head dim
    is unrolled, so past a few columns (nearest.LOWRANK_MAX_RANK) the fused kernels' matrix units win."""
    b, heads, n, r = q.shape
    if not q.dtype == k.dtype == v.dtype == torch.float32:
        raise ValueError(f"low-rank attention takes fp32 heads (got {q.dtype}; allowed: torch.float32)")
    flat = [t.reshape(b * heads, n, r).contiguous() for t in (q, k, v)]
    return LowRankAttention.apply(*flat, tile or default_tile(r)).view(b, heads, n, r)
