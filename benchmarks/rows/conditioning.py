"""Row 2 of benchmarks/run.py: the conditioning stage of row 1's trained variant against its training
time; leaner's batched float64 SVD against a per-sample loop, over tokens and width."""

from __future__ import annotations

import statistics
import time

import torch

from .common import median_spread, table

# ----------------------------------------------------------------------------- 2. conditioning

def bench_conditioning(manifest: str, repeats: int, trained: dict, quick: bool) -> str:
    from leaner.measure.conditioning import kappa, write_conditioning

    out = trained["out"]
    cond = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        write_conditioning(str(out / "metrics.json"), str(out / "init.safetensors"), str(out / "model.safetensors"),
                           manifest, str(out / "conditioning.csv"))
        cond.append(time.perf_counter() - t0)
    frac = [c / trained["train_s"] for c in cond]
    text = table("2a. Conditioning stage of the trained variant of row 1",
                 ["measure", "median (min-max)"],
                 [["conditioning s (256 probe images, init + final; the Jacobian on 4)", median_spread(cond)],
                  ["training s", f"{trained['train_s']:.4g}"],
                  ["fraction of training (target <= 5%)", median_spread([100 * f for f in frac]) + " %"]])
    rows = []
    sizes = [(17, 64), (65, 128)] if quick else [(17, 64), (65, 256), (197, 256), (197, 768), (577, 768), (256, 64)]
    batch = 16 if quick else 64
    for tokens, cols in sizes:
        mats = torch.randn(batch, tokens, cols, dtype=torch.float64)
        batched, loop = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            kappa(mats)
            batched.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for m in mats:
                s = torch.linalg.svdvals(m)
                _ = s[0] / s[-1]
            loop.append(time.perf_counter() - t0)
        rows.append([tokens, cols, median_spread([1e3 * b / batch for b in batched]),
                     median_spread([1e3 * t / batch for t in loop]),
                     f"{statistics.median(loop) / statistics.median(batched):.2f}x"])
    text += "\n" + table(f"2b. kappa: leaner's batched float64 SVD against a naive per-sample loop ({batch} matrices)",
                         ["tokens N", "width h*d", "batched ms/matrix", "loop ms/matrix", "speed-up"], rows)
    text += ("\nThe naive loop calls svdvals on each (N, C) matrix as captured. "
             "leaner.measure.conditioning.kappa batches "
             "them and hands LAPACK the tall orientation (the transposed view of a wide matrix is already "
             "column-major: no copy); on CPU, batching alone saves little, since LAPACK still runs one matrix at "
             "a time. The SVD of an N x C matrix costs O(N C min(N, C)): linear in the larger side, quadratic in "
             "the smaller; ViT-B/16 (N 197, C 768) is the paper-scale point.\n")
    return text
