"""Condition numbers of attention, as P1's Theorem 3.2 defines them, and of its Jacobian.

kappa(A) = sigma_max / sigma_min of A = [A_1 ... A_h] in R^{N x h*d}, the concatenated head outputs
softmax(Q_i K_i^T / sqrt(d)) V_i *before* the output projection, per layer and per input
(sigma_min is the min(N, h*d)-th singular value). timm's Attention feeds exactly that tensor into
`attn.proj`, so a forward pre-hook there captures it without a second attention implementation; a
forward hook on the same module gives the block's attention output after the projection, recorded
alongside. The third measurement is kappa of the Jacobian of the attention block's output with
respect to its input (`jacobian.py`), on the first few probe inputs.

Everything is float64: the probe casts the saved weights and the inputs to float64 and runs
attention through PyTorch's reference (math) kernel, so a kappa of 1e10 is a measurement and not
float32 rounding (a float32 forward pass cannot resolve kappa above about 1e6).

A matrix whose sigma_min cannot be told from zero is *singular* and its kappa is +inf (see
`singular_kappa`); summaries keep it as +inf (a rank, not a magnitude) and count it in
`singular_fraction`.
"""

from __future__ import annotations

import functools
import math
import os
from contextlib import contextmanager

import torch

from ..models.memory import MEMORY_SHARE, PROBE_BATCH, model_chunk
from ..runspec import RunSpec
from .heads import head_structure, structure_row

MATRICES = ("heads_concat", "attn_proj_out", "jacobian")
EPS64 = float(torch.finfo(torch.float64).eps)
def singular_kappa(rows: int, cols: int) -> float:
    """The kappa above which an N x C float64 matrix is recorded as singular: 1 / (eps * max(N, C)).

    Why: LAPACK's SVD is backward stable, i.e. it returns the exact singular values of A + E with
    ||E||_2 <= p(N, C) * eps * ||A||_2, p a modest function of the dimensions (max(N, C) is the
    usual first-order size), and by Weyl's inequality every computed sigma_i is within ||E||_2 of
    the true one. A computed sigma_min below eps * max(N, C) * sigma_max is therefore within
    rounding of zero: the matrix is indistinguishable from a singular one, and the ratio is noise.
    Forming A in float64 adds errors of the same order (each entry is a sum over at most max(N, C)
    products). For the default ViT (N = 17, C = 64) the threshold is 7.0e13; for ViT-B (197 x 768)
    5.9e12; below it float64 resolves kappa (to about kappa * eps * max(N, C) relative)."""
    return 1.0 / (EPS64 * max(rows, cols))


def kappa(mats: torch.Tensor) -> torch.Tensor:
    """sigma_max / sigma_min over the last two dims, in float64; +inf for a singular matrix
    (`singular_kappa`), NaN for a non-finite one.

    A matrix and its transpose have the same singular values; LAPACK is handed the tall one. For a
    wide row-major (N, C) matrix that is the transposed view, which is already column-major: no
    copy, and 1.5-2x faster on ViT's shapes (N 17-197 tokens, C 64-768; benchmarks/run.py row 2b)."""
    mats = mats.detach().to(torch.float64)
    finite = torch.isfinite(mats).flatten(-2).all(-1)
    if not finite.all():
        mats = torch.where(finite[..., None, None], mats, torch.zeros_like(mats))
    sv = torch.linalg.svdvals(mats.mT if mats.shape[-2] < mats.shape[-1] else mats)
    return _kappa_from(sv[..., 0], sv[..., -1], finite, singular_kappa(*mats.shape[-2:]))


def _kappa_from(sigma_max: torch.Tensor, sigma_min: torch.Tensor, finite: torch.Tensor, limit: float) -> torch.Tensor:
    singular = sigma_min <= sigma_max / limit  # also a zero matrix
    out = torch.where(singular, torch.full_like(sigma_max, math.inf), sigma_max / sigma_min.clamp_min(1e-300))
    return torch.where(finite, out, torch.full_like(out, math.nan))


def summarize(k: torch.Tensor) -> dict[str, float]:
    """Over samples: mean, median, 90th percentile and geometric mean (kappa is heavy-tailed), and
    the fraction of singular samples. Singular samples count as +inf, so they push the order
    statistics up as ranks do: the median is +inf when at least half are singular, the mean and
    the geometric mean as soon as one is. The median is the lower median and the 90th percentile
    the next order statistic above its position (no interpolation with +inf). NaN (a non-finite
    matrix) is left out."""
    k = k[~torch.isnan(k)].to(torch.float64).cpu()
    if k.numel() == 0:
        return {"kappa_mean": math.nan, "kappa_median": math.nan, "kappa_p90": math.nan, "kappa_gmean": math.nan,
                "singular_fraction": math.nan}
    singular = torch.isinf(k)
    return {"kappa_mean": k.mean().item(), "kappa_median": k.median().item(),
            "kappa_p90": torch.quantile(k, 0.9, interpolation="higher").item(),
            "kappa_gmean": math.inf if singular.any() else k.log().mean().exp().item(),
            "singular_fraction": singular.double().mean().item()}


@contextmanager
def capture_attention(model, inputs: bool = False):
    """Within the block, `captured[layer][matrix]` collects the tensors of every forward pass:
    'heads_concat' (B, N, h*d) entering attn.proj, 'attn_proj_out' (B, N, D) leaving it, and with
    `inputs` also 'input': (x, keyword arguments) each attention module was called with."""
    from ..models import attention_modules

    captured: dict[int, dict[str, list]] = {}
    handles = []
    for layer, attn in attention_modules(model):
        slot = captured.setdefault(layer, {"heads_concat": [], "attn_proj_out": []})
        handles.append(attn.proj.register_forward_pre_hook(
            lambda mod, args, slot=slot: slot["heads_concat"].append(args[0].detach())))
        handles.append(attn.proj.register_forward_hook(
            lambda mod, args, output, slot=slot: slot["attn_proj_out"].append(output.detach())))
        if inputs:
            slot["input"] = []
            handles.append(attn.register_forward_pre_hook(
                lambda mod, args, kwargs, slot=slot: slot["input"].append((args[0].detach(), dict(kwargs))),
                with_kwargs=True))
    try:
        yield captured
    finally:
        for h in handles:
            h.remove()


def _by_length(fn, mats: torch.Tensor, lengths: torch.Tensor | None):
    """fn over each (N, C) matrix's first lengths[i] rows (all of them without lengths), grouped by
    length: its one tensor, or tuple of tensors, per sample."""
    if lengths is None:
        return fn(mats)
    parts = [(idx, fn(mats[idx.to(mats.device), :n])) for n in lengths.unique().tolist()
             for idx in [(lengths == n).nonzero().flatten()]]
    single = isinstance(parts[0][1], torch.Tensor)
    outs = [torch.empty(len(mats), dtype=torch.float64) for _ in range(1 if single else len(parts[0][1]))]
    for idx, res in parts:
        for out, r in zip(outs, [res] if single else res):
            out[idx] = r.cpu()
    return outs[0] if single else tuple(outs)


def kappa_of_rows(mats: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """kappa of each (N, C) matrix, over its first lengths[i] rows only when lengths are given
    (padded sequences: padding positions are not tokens of the input)."""
    return _by_length(kappa, mats, lengths)


@contextmanager
def float64_probe(model, inputs: torch.Tensor):
    """The model and (float) inputs in float64, attention through the reference math kernel (the
    fused kernels have no float64 path on every device and no forward-mode derivative)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model.to(torch.float64).eval()
    with sdpa_kernel(SDPBackend.MATH):
        yield inputs.to(torch.float64) if inputs.is_floating_point() else inputs


def jacobian_kappas(attn, x: torch.Tensor, kwargs: dict, lengths: torch.Tensor | None, count: int,
                    exact_max: int, steps: int) -> list[dict]:
    """kappa of the Jacobian of one attention module at each of the first `count` sequences of its
    input batch x (B, N, D), over the real tokens of padded sequences (their padding is masked as
    keys, so the real tokens' outputs do not depend on it). Exact for all of them when the largest
    Jacobian has at most `exact_max` rows, else the Lanczos estimate for all (one method per row)."""
    from .jacobian import block_kappa

    count = min(count, len(x))
    sizes = [x.shape[1] if lengths is None else int(lengths[i]) for i in range(count)]
    exact = max(sizes, default=0) * x.shape[-1] <= exact_max
    out = []
    for i, n in enumerate(sizes):
        kw = {k: v[i:i + 1, ..., :n] if torch.is_tensor(v) else v for k, v in kwargs.items()}
        res = block_kappa(lambda z, kw=kw: attn(z[None], **kw)[0], x[i, :n], math.inf if exact else 0, steps)
        limit = singular_kappa(n * x.shape[-1], n * x.shape[-1])
        sigmas = torch.tensor([res["sigma_max"], res["sigma_min"]], dtype=torch.float64)
        res["kappa"] = float(_kappa_from(sigmas[0], sigmas[1], torch.tensor(True), limit))
        res["tokens"], res["cols"] = n, n * x.shape[-1]
        out.append(res)
    return out


def layer_kappas(model, inputs: torch.Tensor, batch_size: int = PROBE_BATCH,
                 lengths: torch.Tensor | None = None) -> dict[int, dict[str, torch.Tensor]]:
    """Per-sample kappa of the head-output concat and the block output, every layer, float64:
    {layer: {matrix: tensor (samples,)}}; `batch_size` inputs at a time (see `probe_chunk`)."""
    with float64_probe(model, inputs) as probe:
        rows = _layer_kappas(model, probe, batch_size, lengths, {})
    return {layer: {name: r["kappas"] for name, r in mats.items()} for layer, mats in rows.items()}


@torch.no_grad()
def _layer_kappas(model, inputs: torch.Tensor, batch_size: int, lengths: torch.Tensor | None,
                  jacobian: dict) -> dict[int, dict[str, dict]]:
    """{layer: {matrix: {"kappas": per-sample tensor, "shape": (tokens, cols), and for the
    Jacobian "method", "rel_residual" (largest), "converged_fraction"}}}, `batch_size` inputs at
    a time; the first chunk holds at least the Jacobian's inputs. `jacobian`: samples (0: none),
    exact_max, lanczos_steps."""
    from ..models import attention_modules

    modules = dict(attention_modules(model))
    out: dict[int, dict[str, dict]] = {}
    i, size = 0, max(batch_size, jacobian.get("samples", 0))
    while i < len(inputs):
        part = None if lengths is None else lengths[i:i + size]
        want_jac = i == 0 and jacobian.get("samples", 0) > 0
        with capture_attention(model, inputs=want_jac) as captured:
            model(inputs[i:i + size])
        for layer, mats in captured.items():
            for name in ("heads_concat", "attn_proj_out"):
                shape = tuple(mats[name][0].shape[-2:])
                slot = out.setdefault(layer, {}).setdefault(name, {"kappas": [], "shape": shape})
                slot["kappas"].append(kappa_of_rows(torch.cat(mats[name]), part).cpu())
            head_dim = getattr(modules[layer], "head_dim", None)
            if head_dim and mats["heads_concat"][0].shape[-1] % head_dim == 0:
                slot = out[layer]["heads_concat"]
                slot["head_dim"] = head_dim
                iso, align = _by_length(functools.partial(head_structure, head_dim=head_dim),
                                        torch.cat(mats["heads_concat"]), part)
                slot.setdefault("isotropy", []).append(iso.cpu())
                slot.setdefault("alignment", []).append(align.cpu())
            if want_jac:
                x, kwargs = mats["input"][0]
                res = jacobian_kappas(modules[layer], x, kwargs, part, jacobian["samples"],
                                      jacobian["exact_max"], jacobian["lanczos_steps"])
                methods = {r["method"] for r in res}
                out[layer]["jacobian"] = {
                    "kappas": [torch.tensor([r["kappa"] for r in res], dtype=torch.float64)],
                    "shape": (max(r["tokens"] for r in res), max(r["cols"] for r in res)),
                    "method": methods.pop() if len(methods) == 1 else "mixed",
                    "rel_residual": max(r["rel_residual"] for r in res),
                    "converged_fraction": sum(r["converged"] for r in res) / len(res)}
        i, size = i + size, batch_size
    for mats in out.values():
        for slot in mats.values():
            for key in ("kappas", "isotropy", "alignment"):
                if key in slot:
                    slot[key] = torch.cat(slot[key])
    return out



def probe_limit(device: torch.device, memory_mb: int | None, params: int) -> float | None:
    """The bytes the probe's chunks may take: MEMORY_SHARE of the GPU's free memory, or on the CPU
    of the job's memory (`memory_mb`, its resources.mem_mb) less the float64 model; None (chunks of
    PROBE_BATCH) without either."""
    if device.type == "cuda":
        return MEMORY_SHARE * torch.cuda.mem_get_info(device)[0]
    if memory_mb is None:
        return None
    return max(MEMORY_SHARE * memory_mb * 2**20 - 8.0 * params, 0.0)


def conditioning_rows(spec: dict | RunSpec, checkpoints: dict[str, tuple[int, str]], data_path: str,
                      device: str | None = None, gpu_share: int | None = None,
                      memory_mb: int | None = None) -> list[dict]:
    """Tidy rows (checkpoint, step, layer, matrix, shape, kappa stats, singular fraction, method,
    the numerics they were computed under) for each named checkpoint {name: (step, safetensors
    path)}, over the fixed evaluation batch of the study (the Jacobian over its first
    `conditioning.jacobian_samples` inputs), in chunks that fit the job's memory (`probe_limit`)."""
    from ..compute.devices import pick_device
    from ..compute.numerics import in_effect
    from ..models import build_model
    from ..tasks.trainers import make_task
    from ..training.weights import load_weights

    dev = pick_device(device, gpu_share)
    computed = in_effect(str(dev), "fp64")["label"]  # what these kappas were computed under
    spec = RunSpec.of(spec)
    task = make_task(spec, data_path, dev)
    cond = spec.conditioning
    n = cond["samples"]
    inputs = task.probe_inputs(n).to(dev)
    lengths = task.probe_lengths(n) if hasattr(task, "probe_lengths") else None
    jacobian = {"samples": cond.get("jacobian_samples", 0), "exact_max": cond.get("jacobian_exact_max", 0),
                "lanczos_steps": cond.get("lanczos_steps", 1)}
    m = spec.model
    rows, gaussians = [], {}
    for name, (step, path) in checkpoints.items():
        model = build_model(m)
        load_weights(model, path)
        model.to(dev)
        chunk = model_chunk(m, probe_limit(dev, memory_mb, sum(p.numel() for p in model.parameters())))
        with float64_probe(model, inputs) as probe:
            measured = _layer_kappas(model, probe, chunk, lengths, jacobian)
        for layer, mats in measured.items():
            for matrix, slot in mats.items():
                tokens, cols = slot["shape"]
                rows.append({"checkpoint": name, "step": step, "layer": layer + 1, "matrix": matrix,
                             "heads": m.attention_heads, "head_dim": m.head_dim,
                             "width": m.residual_width, "cols": cols, "tokens": tokens,
                             "samples": int(slot["kappas"].numel()), **summarize(slot["kappas"]),
                             "method": slot.get("method", "svd"), "rel_residual": slot.get("rel_residual", 0.0),
                             "converged_fraction": slot.get("converged_fraction", 1.0), "numerics": computed,
                             **structure_row(slot, tokens, cols, gaussians)})
    return rows


def write_conditioning(metrics_path: str, init_path: str, final_path: str, data_path: str, out_csv: str,
                       device: str | None = None, threads: int | None = None, gpu_share: int | None = None,
                       memory_mb: int | None = None) -> None:
    """The conditioning stage of one variant: kappa at init, at each step whose weights training
    kept (conditioning.steps; listed in metrics.json with their sha256) and after training; within
    `memory_mb` on the CPU (the job's resources.mem_mb)."""
    import pandas as pd

    from ..io import read_json, verify_sha256, write_csv

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
    rows = conditioning_rows(metrics["spec"], checkpoints, data_path, device, gpu_share, memory_mb)
    frame = pd.DataFrame(rows)
    frame.insert(0, "variant", metrics["variant"])
    frame.insert(0, "study", metrics["study"])
    frame["status"] = metrics["status"]
    write_csv(out_csv, frame)
