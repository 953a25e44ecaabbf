"""gpu-check's p2 section: P2's attention at the paper's largest shapes (kernel, peak memory, step
time) and the rule it passes by. (P2 trained through `leaner train`: sections/p2train.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .common import DEVICE, ON_CPU, card_gib, peak_gib

# (label, depth, heads, modules, dim, tokens, batch of one forward): configs/paper.yaml's largest P2
# shapes at the batch each step runs at (figN's H64 N 256: 256 in 4 micro-batches)
P2_SHAPES = [("fig1 L5-H64-W64 N16", 5, 64, 64, 64, 16, 256),
             ("figN L2-H1-W64 N256", 2, 1, 64, 64, 256, 256),
             ("figN L2-H8-W64 N64", 2, 8, 64, 64, 64, 256),
             ("figN L2-H8-W64 N256", 2, 8, 64, 64, 256, 256),
             ("figN L2-H64-W64 N64", 2, 64, 64, 64, 64, 256),
             ("figN L2-H64-W64 N256", 2, 64, 64, 64, 256, 64)]


def section_p2(work: Path) -> dict:
    import torch
    from torch.nn.attention import SDPBackend

    from leaner.data.point_stream import PointStream
    from leaner.models.nearest import NearestPointEncoder, attention_kernel

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(DEVICE)
    rows = []
    for label, depth, heads, modules, dim, tokens, batch in P2_SHAPES:
        r, batch = dim // heads, 2 if ON_CPU else batch
        kernel, width = attention_kernel(tokens, r, torch.float32, DEVICE)
        q = torch.zeros(2, modules * heads, tokens, width, device=dev, requires_grad=True)
        chosen = SDPBackend(torch._fused_sdp_choice(q, q, q, scale=r ** -0.5)).name if kernel == "fused" else \
            kernel.upper()
        row = {"shape": label, "head_dim": r, "form": kernel, "kernel": chosen, "batch": batch}
        torch.manual_seed(0)
        model = NearestPointEncoder(dim, tokens, depth, heads, modules, 2048).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        x, y = PointStream(dim, tokens, batch, 0, device=dev).batch(0)
        try:
            for _ in range(2):  # warm-up (the optimiser's state)
                _p2_step(model, opt, x, y)
            with peak_gib() as peak:  # synchronised at both ends
                t0 = time.perf_counter()
                for _ in range(5):
                    _p2_step(model, opt, x, y)
            row.update(ms_per_step=round((time.perf_counter() - t0) / 5 * 1e3, 1), peak_gib=round(peak["gib"], 2))
        except torch.OutOfMemoryError:
            row.update(ms_per_step=None, peak_gib=f"over {card_gib():.0f}")
        del model, opt
        if not ON_CPU:
            torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
        rows.append(row)
    by = {r["shape"]: r["peak_gib"] for r in rows}
    growth = [(a, b) for a, b in (("figN L2-H8-W64 N64", "figN L2-H8-W64 N256"),
                                  ("figN L2-H64-W64 N64", "figN L2-H64-W64 N256"))
              if isinstance(by.get(a), float) and isinstance(by.get(b), float) and by[a] > 0]
    ratios = {f"{a.split(' N')[0]} N64->N256": round(by[b] / by[a], 2) for a, b in growth}
    # --cpu: the RSS does not resolve the growth of a 2-sample step (the allocator reuses its pages)
    status = p2_verdict(rows, ratios, need_growth=not ON_CPU)
    summary = "; ".join(f"{r['shape']}: {r['kernel'].lower()}, {r['peak_gib']} GiB, {r['ms_per_step']} ms"
                        for r in rows) + f"; memory growth {ratios}"
    return {"status": status, "summary": summary, "rows": rows, "growth": ratios}


def _p2_step(model, opt, x, y) -> None:
    from leaner.tasks.nearest import nearest_point_mse

    opt.zero_grad(set_to_none=True)
    nearest_point_mse(model(x), y).backward()
    opt.step()


def p2_verdict(rows: list[dict], ratios: dict, need_growth: bool = True) -> str:
    """pass: every shape fit (a measured peak), the fused forms took a fused kernel, and both N 64 ->
    256 memory ratios were measured and are linear (4x; quadratic would be 16x)."""
    fused_ok = all(r["kernel"] != "MATH" for r in rows if r["form"] == "fused")
    fits = bool(rows) and all(isinstance(r["peak_gib"], float) for r in rows)
    linear = all(v < 8 for v in ratios.values()) and (len(ratios) == 2 or not need_growth)
    return "pass" if fused_ok and fits and linear else "fail"
