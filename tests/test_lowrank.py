"""P2's many low-rank heads by the project's Triton kernel (models/lowrank.py) and by FlexAttention:
the same function as the math form, forward and backward, on the CPU (the kernel under Triton's
interpreter, which must be switched on before the kernel's module is imported: in a process of its
own). On a GPU: tests/test_gpu.py; their speed: `make gpu-check`, section p2kernel."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO

pytestmark = pytest.mark.slow

pytest.importorskip("triton")

EXACT = r"""
import json, sys
import torch
from leaner.models import nearest
from leaner.models.nearest import AveragedMultiheadAttention, attend

torch.manual_seed(0)
done = []
# the attention alone: ranks 1, 2, 8 at N 4-256 (odd lengths: the masked tails), a head count that
# leaves the last program's heads part-empty, and many heads of one program (N 4: 256 heads a program)
cases = [(r, n, 3) for r in (1, 2, 8) for n in (4, 17, 64, 256)] + [(1, 4, 300), (2, 16, 70)]
for r, n, heads in cases:
    q, k, v = (torch.randn(2, heads, n, r, requires_grad=True) for _ in range(3))
    g = torch.randn(2, heads, n, r)
    got = [attend(q, k, v, "lowrank", r)]
    want = [attend(q, k, v, "math", r)]
    got += torch.autograd.grad(got[0], (q, k, v), g)
    want += torch.autograd.grad(want[0], (q, k, v), g)
    for a, b, what in zip(got, want, ("out", "dq", "dk", "dv")):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-6, msg=lambda m: f"r{r} N{n} H{heads} {what}: {m}")
    done.append(f"r{r}-N{n}-H{heads}")
# the other tile sizes gpu-check times (fewer and more heads a program)
from leaner.models.lowrank import lowrank_attention
for tile in (1024, 8192):
    q, k, v = (torch.randn(2, 70, 17, 2, requires_grad=True) for _ in range(3))
    got, want = lowrank_attention(q, k, v, tile), attend(q, k, v, "math", 2)
    g = torch.randn_like(got)
    for a, b in zip([got, *torch.autograd.grad(got, (q, k, v), g)], [want, *torch.autograd.grad(want, (q, k, v), g)]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-6)
    done.append(f"tile-{tile}")
# the widened layer (W modules of H heads of rank 8 / H), its output and every parameter's gradient
for heads, modules in ((8, 1), (8, 64), (4, 64), (1, 64), (1, 1)):
    torch.manual_seed(1)
    layer = AveragedMultiheadAttention(8, heads, modules)
    x = torch.randn(3, 5, 8)
    grads = {}
    for kernel in ("lowrank", "math"):
        nearest.attention = lambda q, k, v, kernel=kernel: attend(q, k, v, kernel, q.shape[-1])
        layer.zero_grad()
        out = layer(x)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        grads[kernel] = [out.detach()] + [p.grad.clone() for p in layer.parameters()]
    for a, b in zip(*grads.values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-6, msg=lambda m: f"H{heads} W{modules}: {m}")
    done.append(f"layer-H{heads}-W{modules}")
print(json.dumps(done))
"""


def test_the_lowrank_kernel_is_the_math_form_forward_and_backward():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-c", EXACT], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(done) == 14 + 2 + 5 and "r8-N256-H3" in done and "tile-8192" in done and "layer-H8-W64" in done


def test_the_lowrank_kernel_refuses_what_it_does_not_compute():
    from leaner.models.lowrank import lowrank_attention

    q = torch.zeros(1, 2, 4, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"fp32 heads \(got torch.float64; allowed: torch.float32\)"):
        lowrank_attention(q, q, q)


@pytest.mark.parametrize("r,n", [(1, 4), (2, 17), (8, 64)])
def test_flex_attention_forward_is_the_math_form(r, n):
    """FlexAttention, head dim zero-padded to 16 as its GPU kernels take it: its forward on the CPU
    (torch has no backward for it there; tests/test_gpu.py checks both on a GPU)."""
    from leaner.models.nearest import attend

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 5, n, r) for _ in range(3))
    torch.testing.assert_close(attend(q, k, v, "flex", 16), attend(q, k, v, "math", r), rtol=1e-5, atol=2e-6)


def test_cuda_takes_the_lowrank_kernel_where_a_gpu_measured_it_faster(monkeypatch):
    """A GPU run measured the low-rank kernel faster than today's forms at rank 1 (figN, fig1) and
    not at rank 8: CUDA takes it for fp32 heads of rank <= 2 only, and the plan prices those by
    its measured seconds per score (by the sequence's length); wider or 16-bit heads, the CPU,
    and CUDA with it switched off take today's forms."""
    from leaner.models import nearest
    from leaner.planning.cost import P2_SCORE_S, score_seconds

    assert nearest.LOWRANK_ON_CUDA and nearest.LOWRANK_CUDA_RANK == 2 and P2_SCORE_S["lowrank"]
    assert score_seconds("lowrank", 256) == pytest.approx(1.9e-12) and score_seconds("lowrank", 16) == \
        pytest.approx(13.4e-12)
    assert 1.9e-12 < score_seconds("lowrank", 64) < 13.4e-12 and score_seconds("lowrank", 1024) == \
        pytest.approx(1.9e-12)
    assert nearest.attention_kernel(256, 1, torch.float32, "cuda") == ("lowrank", 1)
    assert nearest.attention_kernel(16, 2, torch.float32, "cuda") == ("lowrank", 2)
    assert nearest.attention_kernel(16, 8, torch.float32, "cuda") == ("math", 8)  # no gain measured at rank 8
    assert nearest.attention_kernel(256, 8, torch.float32, "cuda") == ("fused", 8)
    assert nearest.attention_kernel(256, 16, torch.float32, "cuda") == ("fused", 16)
    assert nearest.attention_kernel(256, 2, torch.bfloat16, "cuda") == ("fused", 8)
    assert nearest.attention_kernel(256, 1, torch.float32, "cpu") == ("fused", 1)
    monkeypatch.setattr(nearest, "LOWRANK_ON_CUDA", False)
    assert {nearest.attention_kernel(n, r, torch.float32, "cuda")[0] for n in (16, 256) for r in (1, 8)} == \
        {"math", "fused"}
    monkeypatch.setattr(nearest, "LOWRANK_ON_CUDA", True)
    # what the plan's memory model (footprint.py, fake CUDA tensors) sees of it: a fused call's memory
    from leaner.models.footprint import footprint
    from leaner.workflow.plan import load_plan

    model = load_plan(REPO / "configs" / "paper.yaml").variant("nearest_figN", "L2-H64-W64-r1-d64-N256-none-s0").model
    def memory():
        return {k: v for k, v in dataclasses.asdict(footprint(model, "fp32", flops=False)).items() if k != "flops"}

    on = memory()
    monkeypatch.setattr(nearest, "LOWRANK_ON_CUDA", False)
    fused = memory()  # the fused form pads rank 1 to 4: four times the q, k, v and output it keeps
    assert 0 < on["saved"] < fused["saved"]


def test_the_p2kernel_verdict_can_fail():
    """gpu-check's p2kernel passes only when today's form and the low-rank kernel were timed at every
    shape and are exact; FlexAttention failing is reported, not failed."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from sections.p2kernel import p2kernel_verdict

    ok = {"ps_per_score": 1.0, "rel_error": 1e-7}
    row = {"today": ok, "lowrank": ok, "flex": {"error": "NotImplementedError"}}
    assert p2kernel_verdict([row, row]) == "pass"
    assert p2kernel_verdict([]) == "fail"
    assert p2kernel_verdict([row, {**row, "lowrank": {**ok, "rel_error": 1e-3}}]) == "fail"
    assert p2kernel_verdict([row, {**row, "lowrank": {"error": "OutOfResources"}}]) == "fail"
    assert p2kernel_verdict([{**row, "today": {"error": "OutOfMemoryError"}}]) == "fail"


@pytest.mark.parametrize("rank,tokens", [(1, 256), (1, 16), (8, 256)])
def test_the_kernels_compile_for_hopper_without_spilling(rank, tokens):
    """Each kernel at its default blocks compiles for sm_90 here, with no GPU (triton's PTX, its
    bundled ptxas): nothing only the interpreter accepts, no register spills, and at rank 1 the
    forward and dq kernels reduce within a thread (no warp shuffles) at one exponential a score.
    benchmarks/run.py --kernel-sass prints the whole table (results.md row 20b)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from rows.kernel_sass import KERNELS, nvidia_bin, sass_stats

    if not nvidia_bin("ptxas").is_file():
        pytest.skip("this triton ships no ptxas")
    for kernel in KERNELS:
        st = sass_stats(kernel, rank, tokens)
        assert st["spill_bytes"] == 0, st
        if rank == 1 and kernel != "_backward_dkdv":
            assert st["ops"].get("SHFL", 0) == 0 and st["ops"]["MUFU"] <= 20, st

