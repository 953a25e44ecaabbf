"""Job memory from the model's size (its count: tests/test_params.py): it follows the model, a
larger study value wins, and a real conditioning run stays within its estimate."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from leaner.models.memory import CUDA_HOST_MB, MIB, conditioning_mem_mb, training_mem_mb
from leaner.models.params import model_params
from leaner.workflow.plan import load_plan

from conftest import REPO, small_spec

pytestmark = pytest.mark.fast


def test_estimates_follow_the_model_and_a_larger_study_value_wins():
    plan = load_plan(REPO / "configs" / "paper.yaml")
    vit = plan.studies["vit_imagenet"]
    widest = vit.variants["L12-H32-D2048-hd64-mlp8192-s0"].model
    base = vit.variants["L12-H12-D768-hd64-mlp3072-s0"].model
    params = model_params(widest)
    assert params == 608_332_776
    # loading it beside a fresh model is ~5 GB alone; the float64 probe needs more: above the profile's 4 GB
    cond = vit.variants["L12-H32-D2048-hd64-mlp8192-s0"].conditioning
    assert conditioning_mem_mb(widest, cond, on_cpu=False) >= 16 * params / MIB > 9000
    assert conditioning_mem_mb(base, cond) < conditioning_mem_mb(widest, cond)
    # on the CPU the probe's chunk, on a GPU CUDA's own host memory instead
    assert conditioning_mem_mb(widest, cond) - conditioning_mem_mb(widest, cond, on_cpu=False) > -CUDA_HOST_MB
    assert training_mem_mb(widest, 8, vit.resources["mem_mb"]) == vit.resources["mem_mb"] == 256000  # study's wins
    assert training_mem_mb(widest, 1, 1000) >= 16 * params / MIB  # weights, gradients, AdamW's two moments
    assert training_mem_mb(widest, 2, 1000) > training_mem_mb(widest, 1, 1000)
    assert training_mem_mb(small_spec()["model"], 1, 2000) == 2000  # a small model keeps the study's value


def _python(code: str, env: dict) -> str:
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_a_real_conditioning_run_stays_within_its_estimate(tmp_path, digits_manifest):
    """Peak memory of the conditioning stage on a 76M-parameter ViT (init + final weights, float64
    probe), in a process of its own, against conditioning_mem_mb."""
    spec = small_spec(depth=6, heads=8, width=1024, head_dim=128, mlp_hidden=4096)
    spec["conditioning"] = {"samples": 16, "jacobian_samples": 0}
    code = f"""
import json, resource, sys
from leaner.measure.conditioning import conditioning_rows
from leaner.models import build_model
from leaner.training.weights import save_weights
spec = json.loads({json.dumps(spec)!r})
paths = {{name: "{tmp_path}/" + name + ".safetensors" for name in ("init", "final")}}
for path in paths.values():
    save_weights(build_model(spec["model"]), path, spec)
conditioning_rows(spec, {{"init": (0, paths["init"]), "final": (1, paths["final"])}}, "{digits_manifest}", "cpu")
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**20)
"""
    peak_mb = float(_python(code, {**os.environ, "PYTHONPATH": str(REPO / "src")}).split()[-1])
    # the probe aside (on_cpu=False), and the allowance for CUDA's host memory (a CPU process here)
    estimate = conditioning_mem_mb(spec["model"], spec["conditioning"], on_cpu=False) - CUDA_HOST_MB
    assert model_params(spec["model"]) > 75_000_000
    assert peak_mb < estimate, (peak_mb, estimate)
    assert estimate < 2 * peak_mb  # and not far above it


@pytest.mark.parametrize("depth", [1, 3])
def test_a_model_built_on_the_meta_device_at_any_depth(depth):
    """Every builder runs under torch.device('meta') (the sequence models' drop-path rates were
    computed from a tensor on the default device)."""
    vit = small_spec()["model"]
    model = {**{k: vit[k] for k in ("heads", "width", "head_dim", "mlp_hidden", "qkv_bias")}, "arch": "causal_lm",
             "vocab_size": 257, "max_len": 16, "depth": depth, "drop_path_rate": 0.1}
    import torch

    from leaner.models import build_model, param_counts

    with torch.device("meta"):
        assert model_params(model) == param_counts(build_model(model))["total"] > 0


def test_a_cpu_conditioning_job_asks_room_for_its_probe_and_its_jacobian():
    """P2's figN L2-H64-W64 at N 256 has 2.7M parameters but 4,096 heads a layer: one probe input
    takes ~6.5 GB in float64 and the Jacobian's Lanczos products twice its score tensors. On the
    CPU its job asks for both (the rehearsal measured a 13.2 GB peak); on a GPU the probe is the
    card's, and the host memory the model's."""
    from leaner.models.memory import cpu_chunk, jacobian_bytes, probe_bytes, probe_shape

    plan = load_plan(REPO / "configs" / "paper.yaml")
    v = plan.variant("nearest_figN", "L2-H64-W64-r1-d64-N256-none-s0")
    tokens, heads, cols = probe_shape(v.model)
    assert (tokens, heads, cols) == (256, 4096, 4096)
    one = probe_bytes(heads, tokens, cols, 2)
    assert 6.4e9 < one < 6.6e9 and cpu_chunk(v.model, 256) == 1
    assert jacobian_bytes(v.model, v.conditioning) > one  # jacobian_samples 1, by Lanczos
    assert jacobian_bytes(v.model, {**v.conditioning, "jacobian_samples": 0}) == 0
    assert conditioning_mem_mb(v.model, v.conditioning) * MIB > jacobian_bytes(v.model, v.conditioning) > 12e9
    # on a GPU the host holds the model and what CUDA itself takes (the 1,075 MB asked before left CUDA out)
    assert CUDA_HOST_MB < conditioning_mem_mb(v.model, v.conditioning, on_cpu=False) < CUDA_HOST_MB + 1200
    small = plan.variant("nearest_fig1", "L1-H1-W1-r64-d64-N16-none-s0").model  # the whole probe batch fits
    assert cpu_chunk(small, 256) == 64 and cpu_chunk(small, 20) == 20
