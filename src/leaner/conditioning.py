"""Condition numbers of attention, as P1's Theorem 3.2 defines them.

kappa(A) = sigma_max / sigma_min of A = [A_1 ... A_h] in R^{N x h*d}, the concatenated head outputs
softmax(Q_i K_i^T / sqrt(d)) V_i *before* the output projection, per layer and per input, from a
float64 SVD (sigma_min is the min(N, h*d)-th singular value). timm's Attention feeds exactly that
tensor into `attn.proj`, so a forward pre-hook there captures it without a second attention
implementation; a forward hook on the same module gives the block's attention output after the
projection, recorded alongside.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager

import torch

MATRICES = ("heads_concat", "attn_proj_out")


def kappa(mats: torch.Tensor) -> torch.Tensor:
    """sigma_max / sigma_min over the last two dims, in float64; NaN for a non-finite matrix.

    A matrix and its transpose have the same singular values; LAPACK is handed the tall one. For a
    wide row-major (N, C) matrix that is the transposed view, which is already column-major: no
    copy, and 1.5-2x faster on ViT's shapes (N 17-197 tokens, C 64-768; benchmarks/run.py row 2b)."""
    mats = mats.detach().to(torch.float64)
    finite = torch.isfinite(mats).flatten(-2).all(-1)
    if not finite.all():
        mats = torch.where(finite[..., None, None], mats, torch.zeros_like(mats))
    sv = torch.linalg.svdvals(mats.mT if mats.shape[-2] < mats.shape[-1] else mats)
    out = sv[..., 0] / sv[..., -1]
    return torch.where(finite, out, torch.full_like(out, math.nan))


def summarize(k: torch.Tensor) -> dict[str, float]:
    """Mean, median, 90th percentile and geometric mean (kappa is heavy-tailed) over samples."""
    k = k[~torch.isnan(k)].to(torch.float64)
    if k.numel() == 0:
        return {"kappa_mean": math.nan, "kappa_median": math.nan, "kappa_p90": math.nan, "kappa_gmean": math.nan}
    return {"kappa_mean": k.mean().item(), "kappa_median": k.median().item(),
            "kappa_p90": torch.quantile(k, 0.9).item(), "kappa_gmean": k.log().mean().exp().item()}


@contextmanager
def capture_attention(model):
    """Within the block, `captured[layer][matrix]` collects the tensors of every forward pass:
    'heads_concat' (B, N, h*d) entering attn.proj, 'attn_proj_out' (B, N, D) leaving it."""
    from .models import attention_modules

    captured: dict[int, dict[str, list[torch.Tensor]]] = {}
    handles = []
    for layer, attn in attention_modules(model):
        slot = captured.setdefault(layer, {m: [] for m in MATRICES})
        handles.append(attn.proj.register_forward_pre_hook(
            lambda mod, args, slot=slot: slot["heads_concat"].append(args[0].detach())))
        handles.append(attn.proj.register_forward_hook(
            lambda mod, args, output, slot=slot: slot["attn_proj_out"].append(output.detach())))
    try:
        yield captured
    finally:
        for h in handles:
            h.remove()


def kappa_of_rows(mats: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """kappa of each (N, C) matrix, over its first lengths[i] rows only when lengths are given
    (padded sequences: padding positions are not tokens of the input)."""
    if lengths is None:
        return kappa(mats)
    out = torch.empty(len(mats), dtype=torch.float64)
    for n in lengths.unique().tolist():
        idx = (lengths == n).nonzero().flatten()
        out[idx] = kappa(mats[idx.to(mats.device), :n]).cpu()
    return out


@torch.no_grad()
def layer_kappas(model, inputs: torch.Tensor, batch_size: int = 64,
                 lengths: torch.Tensor | None = None) -> dict[int, dict[str, torch.Tensor]]:
    """Per-sample kappa for every layer and matrix: {layer: {matrix: tensor (samples,)}}."""
    return {layer: {name: ks for name, (ks, _) in mats.items()}
            for layer, mats in _layer_kappas_and_shapes(model, inputs, batch_size, lengths).items()}


def _layer_kappas_and_shapes(model, inputs: torch.Tensor, batch_size: int = 64, lengths: torch.Tensor | None = None):
    model.eval()
    out: dict[int, dict[str, list]] = {}
    for i in range(0, len(inputs), batch_size):
        with capture_attention(model) as captured:
            model(inputs[i:i + batch_size])
        part = None if lengths is None else lengths[i:i + batch_size]
        for layer, mats in captured.items():
            for name, tensors in mats.items():
                slot = out.setdefault(layer, {}).setdefault(name, [[], tuple(tensors[0].shape[-2:])])
                slot[0].append(kappa_of_rows(torch.cat(tensors), part).cpu())
    return {layer: {name: (torch.cat(ks), shape) for name, (ks, shape) in mats.items()} for layer, mats in out.items()}


def conditioning_rows(spec: dict, checkpoints: dict[str, tuple[int, str]], data_path: str,
                      device: str | None = None, gpu_share: int | None = None) -> list[dict]:
    """Tidy rows (checkpoint, step, layer, matrix, shape, kappa stats) for each named checkpoint
    {name: (step, safetensors path)}, over the fixed evaluation batch of the study."""
    from .models import build_model
    from .tasks import make_task
    from .devices import pick_device
    from .train import load_weights

    dev = pick_device(device, gpu_share)
    task = make_task(spec, data_path, dev)
    n = spec["conditioning"]["samples"]
    inputs = task.probe_inputs(n).to(dev)
    lengths = task.probe_lengths(n) if hasattr(task, "probe_lengths") else None
    m = spec["model"]
    rows = []
    for name, (step, path) in checkpoints.items():
        model = build_model(m)
        load_weights(model, path)
        model.to(dev)
        with torch.no_grad():
            for layer, mats in _layer_kappas_and_shapes(model, inputs, lengths=lengths).items():
                for matrix, (ks, (tokens, cols)) in mats.items():
                    rows.append({"checkpoint": name, "step": step, "layer": layer + 1, "matrix": matrix,
                                 "heads": m["heads"] * m.get("modules", 1), "head_dim": m["head_dim"],
                                 "width": m.get("width", m.get("d_model")), "cols": cols, "tokens": tokens,
                                 "samples": int(ks.numel()), **summarize(ks)})
    return rows


def write_conditioning(metrics_path: str, init_path: str, final_path: str, data_path: str, out_csv: str,
                       device: str | None = None, threads: int | None = None, gpu_share: int | None = None) -> None:
    """The conditioning stage of one variant: kappa at init, at each step whose weights training
    kept (conditioning.steps; listed in metrics.json with their sha256) and after training."""
    import pandas as pd

    from .io import read_json, verify_sha256, write_csv

    if threads:
        torch.set_num_threads(threads)
    metrics = read_json(metrics_path)
    for path in (init_path, final_path):
        recorded = (metrics.get("sha256") or {}).get(os.path.basename(path))
        if recorded:
            verify_sha256(path, recorded, metrics_path)
    checkpoints = {"init": (0, init_path)}
    for kept in metrics.get("checkpoints") or []:
        path = os.path.join(os.path.dirname(metrics_path), kept["file"])
        verify_sha256(path, kept["sha256"], metrics_path)
        checkpoints[kept["name"]] = (kept["step"], path)
    checkpoints["final"] = (metrics["steps"], final_path)
    rows = conditioning_rows(metrics["spec"], checkpoints, data_path, device, gpu_share)
    frame = pd.DataFrame(rows)
    frame.insert(0, "variant", metrics["variant"])
    frame.insert(0, "study", metrics["study"])
    frame["status"] = metrics["status"]
    write_csv(out_csv, frame)
