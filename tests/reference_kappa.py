"""An independent float64 recomputation of the head-output concat, as a reviewer would write it:
the input of each attention module is taken from a float64 forward pass, then
A = [softmax(Q_i K_i^T / sqrt(d)) V_i]_i is rebuilt in NumPy from the module's qkv weights and its
singular values come from NumPy's SVD. Nothing here goes through the conditioning stage's hook,
PyTorch's attention kernels or its SVD."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def _softmax(s: np.ndarray) -> np.ndarray:
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


def _heads_concat(attn, x: np.ndarray, valid: np.ndarray | None, causal: bool = False) -> np.ndarray:
    """x: (B, N, D) float64 input of the module -> (B, N, C) head outputs before the projection."""
    if hasattr(attn, "qkv"):  # timm Attention
        w, b = attn.qkv.weight.detach().double().numpy(), attn.qkv.bias
        b = np.zeros(w.shape[0]) if b is None else b.detach().double().numpy()
        blocks = [(w, b, attn.num_heads, attn.head_dim)]
    else:  # P2's averaged attention: W modules, each with its own in-projection
        ws, bs = attn.in_proj_weight.detach().double().numpy(), attn.in_proj_bias.detach().double().numpy()
        blocks = [(ws[j], bs[j], attn.heads, attn.head_dim) for j in range(attn.modules_)]
    outs = []
    for w, b, heads, d in blocks:
        qkv = x @ w.T + b
        q, k, v = np.split(qkv, 3, axis=-1)
        for i in range(heads):
            sl = slice(i * d, (i + 1) * d)
            scores = q[..., sl] @ k[..., sl].transpose(0, 2, 1) / np.sqrt(d)
            if valid is not None:
                scores = np.where(valid[:, None, :], scores, -np.inf)
            if causal:
                scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)
            outs.append(_softmax(scores) @ v[..., sl])
    return np.concatenate(outs, axis=-1)


def reference_kappas(model, inputs: torch.Tensor, lengths: torch.Tensor | None = None,
                     pad_id: int | None = None) -> dict[int, np.ndarray]:
    """{layer (0-based): per-sample kappa (sigma_1 / sigma_min over the real rows)}."""
    from leaner.models import attention_modules

    model = model.double().eval()
    seen: dict[int, np.ndarray] = {}

    def keep(i):
        def hook(module, args):
            seen[i] = args[0].detach().numpy()
        return hook

    handles = [attn.register_forward_pre_hook(keep(i)) for i, attn in attention_modules(model)]
    x = inputs.double() if inputs.is_floating_point() else inputs
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    valid = None if pad_id is None else (inputs != pad_id).numpy()
    out = {}
    for i, attn in attention_modules(model):
        a = _heads_concat(attn, seen[i], valid, causal=getattr(model, "causal", False))
        ks = []
        for s in range(len(a)):
            rows = a[s] if lengths is None else a[s, :int(lengths[s])]
            sv = np.linalg.svd(rows, compute_uv=False)
            ks.append(sv[0] / sv[-1] if sv[-1] > 0 else np.inf)
        out[i] = np.asarray(ks)
    return out


def agrees(ours: float, reference: float, singular_at: float) -> bool:
    """The acceptance rule: within 1e-6 relative where kappa <= 1e8, 1e-3 up to 1e12; above the
    singular threshold ours must say singular (+inf); in between, the same order of magnitude."""
    if reference >= singular_at:
        return ours == np.inf
    rel = abs(ours - reference) / reference
    if reference <= 1e8:
        return rel <= 1e-6
    if reference <= 1e12:
        return rel <= 1e-3
    return ours == np.inf or abs(np.log10(ours / reference)) < 1


def check_study_outputs(results: Path, pattern: str = "*/*/metrics.json") -> int:
    """Every variant under `results` whose metrics.json matches `pattern`: the stage's
    heads_concat median at init and after training, every layer, against `reference_kappas` on
    the same probe batch (asserted with `agrees`). Returns how many medians were compared."""
    import pandas as pd

    from leaner.io import read_json
    from leaner.measure.conditioning import singular_kappa
    from leaner.models import build_model
    from leaner.tasks.trainers import make_task
    from leaner.training.weights import load_weights

    checked = 0
    for metrics_path in sorted(results.glob(pattern)):
        spec, folder = read_json(metrics_path)["spec"], metrics_path.parent
        cond = pd.read_csv(folder / "conditioning.csv")
        task = make_task(spec, str(results / "data" / spec["dataset"] / "manifest.json"), torch.device("cpu"))
        n = spec["conditioning"]["samples"]
        probe = task.probe_inputs(n)
        lengths = task.probe_lengths(n) if hasattr(task, "probe_lengths") else None
        pad = 0 if spec["model"].get("arch") == "sequence_classifier" else None
        for ckpt, name in (("init", "init.safetensors"), ("final", "model.safetensors")):
            model = build_model(spec["model"])
            load_weights(model, folder / name)
            for layer, ks in reference_kappas(model, probe, lengths, pad).items():
                row = cond[(cond["checkpoint"] == ckpt) & (cond["layer"] == layer + 1)
                           & (cond["matrix"] == "heads_concat")].iloc[0]
                median = float(np.sort(ks)[(len(ks) - 1) // 2])
                limit = singular_kappa(int(row["tokens"]), int(row["cols"]))
                assert agrees(float(row["kappa_median"]), median, limit), \
                    (folder.name, ckpt, layer, row["kappa_median"], median)
                checked += 1
    return checked
