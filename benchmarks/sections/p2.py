"""gpu-check's p2 and precision sections: P2's attention at the paper's largest shapes (kernel, peak
memory, step time), and a P2 fig1 variant trained in fp32 and in bf16; the rules each passes by."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .common import DEVICE, ON_CPU, REPO, card_gib, peak_gib

BF16_MSE_RATIO = 1.5  # declared before any GPU run: bf16's final eval MSE at most this times fp32's

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

    from leaner.data.nearest_point import PointStream
    from leaner.models.nearest import NearestPointEncoder, attention_kernel

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(DEVICE)
    rows = []
    for label, depth, heads, modules, dim, tokens, batch in P2_SHAPES:
        r, batch = dim // heads, 2 if ON_CPU else batch
        kernel, width = attention_kernel(tokens, r, torch.float32, DEVICE)
        q = torch.zeros(2, modules * heads, tokens, width, device=dev, requires_grad=True)
        chosen = SDPBackend(torch._fused_sdp_choice(q, q, q, scale=r ** -0.5)).name if kernel == "fused" else "MATH"
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


def precision_verdict(rows: list[dict], bf16_as: tuple = ("bf16", True)) -> str:
    """pass: each run recorded the precision it was asked for (`bf16_as`: what a bf16 run records),
    both ended finite, and bf16's eval MSE is at most BF16_MSE_RATIO x fp32's."""
    import math

    ok = bool(rows) and all(
        r["fp32"]["recorded"] == ["fp32", False] and r["bf16"]["recorded"] == list(bf16_as)
        and math.isfinite(r["fp32"]["final_eval_mse"]) and math.isfinite(r["bf16"]["final_eval_mse"])
        and r["bf16"]["final_eval_mse"] <= BF16_MSE_RATIO * r["fp32"]["final_eval_mse"] for r in rows)
    return "pass" if ok else "fail"


def section_precision(work: Path, steps: int = 3000) -> dict:
    steps = 200 if ON_CPU else steps
    from leaner.data import prepare
    from leaner.training.train import train
    from leaner.workflow.plan import load_plan

    plan = load_plan(REPO / "configs" / "paper.yaml")
    study = plan.studies["nearest_fig1"]
    manifest = work / "np" / "manifest.json"
    prepare(study.dataset, plan.datasets[study.dataset], str(manifest))
    rows = []
    for prefix in ("L1-H1-W1-", "L1-H4-W8-"):
        spec = next(v for vid, v in study.variants.items() if vid.startswith(prefix)).spec()
        row = {"variant": spec["variant"], "steps": steps}
        for precision, tf32 in (("fp32", False), ("bf16", True)):
            run = {**spec, "recipe": {**spec["recipe"], "max_steps": steps, "precision": precision, "tf32": tf32}}
            m = train(run, str(manifest), work / f"{spec['variant']}-{precision}", device=DEVICE, progress=False)
            row[precision] = {"best_train_mse": m["best"]["train_loss"], "final_eval_mse": m["final"]["eval_mse"],
                              "steps_per_s": round(m["throughput_samples_per_s"] / spec["recipe"]["batch_size"], 1),
                              "recorded": [m["precision"], m["tf32"]]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    summary = "; ".join(f"{r['variant']}: eval MSE fp32 {r['fp32']['final_eval_mse']:.4g} ({r['fp32']['steps_per_s']}"
                        f" steps/s), bf16 {r['bf16']['final_eval_mse']:.4g} ({r['bf16']['steps_per_s']} steps/s)"
                        for r in rows)
    # --cpu: training on the CPU runs and records fp32 where bf16 is asked (leaner.compute.devices)
    return {"status": precision_verdict(rows, ("fp32", False) if ON_CPU else ("bf16", True)), "summary": summary,
            "rows": rows}
