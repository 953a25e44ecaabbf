"""Row 20b of benchmarks/run.py (`--kernel-sass`): the low-rank attention kernels (models/lowrank.py)
compiled for a GPU on a machine without one, and what their machine code says.

Triton compiles a kernel to PTX and ptxas (shipped in triton's wheel) to a cubin for any target, with
no GPU present: the registers each thread uses and the bytes it spills, and the SASS instructions
cuobjdump lists, by kind. From them a static estimate: SASS instructions a thread issues for each
score (the whole kernel's instructions, each counted once per walked block, over the scores a
program holds per block: the loop's, plus the prologue's and epilogue's, which overstate it a little
at N 256 and more at N 16), and the seconds a score would take on an H100 at its issue rate (132 SMs
x 4 schedulers x 32 lanes x 1.98 GHz, every lane busy, latency hidden, which understates it). An
estimate of the instruction stream, not a measurement: gpu-check's p2kernel section times the
kernels on a card."""

from __future__ import annotations

import collections
import re
import subprocess
import tempfile
from pathlib import Path

H100_LANE_ISSUE_PER_S = 132 * 4 * 32 * 1.98e9
KERNELS = {"_forward": ("q_ptr", "k_ptr", "v_ptr", "o_ptr", "lse_ptr"),
           "_backward_dq": ("q_ptr", "k_ptr", "v_ptr", "do_ptr", "lse_ptr", "delta_ptr", "dq_ptr"),
           "_backward_dkdv": ("q_ptr", "k_ptr", "v_ptr", "do_ptr", "lse_ptr", "delta_ptr", "dk_ptr", "dv_ptr")}


def nvidia_bin(tool: str) -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / tool


def sass_stats(kernel: str, rank: int, tokens: int, tile: int | None = None, arch: int = 90) -> dict:
    """One kernel of models/lowrank.py at (rank, tokens) and its default blocks, compiled for sm_<arch>:
    registers, spill bytes, SASS instructions by kind, and the static thread-instructions per score."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from leaner.models import lowrank

    tile = tile or lowrank.default_tile(rank)
    g, block_m, block_n = lowrank.blocks(tokens, kernel == "_backward_dkdv", tile)
    warps = lowrank.warps(tile)
    const = {"R": rank, "RP": triton.next_power_of_2(rank), "G": g, "BLOCK_M": block_m, "BLOCK_N": block_n}
    signature = {**{p: "*fp32" for p in KERNELS[kernel]}, "heads": "i32", "n": "i32", "scale": "fp32",
                 **{k: "constexpr" for k in const}}
    names = list(signature)
    source = ASTSource(fn=getattr(lowrank, kernel), signature=signature,
                       constexprs={(names.index(k),): v for k, v in const.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        ptx.write_text(compiled.asm["ptx"])
        sm = f"sm_{arch}a" if arch == 90 else f"sm_{arch}"
        info = subprocess.run([str(nvidia_bin("ptxas")), f"-arch={sm}", "-v", str(ptx), "-o", str(cubin)],
                              capture_output=True, text=True, check=True).stderr
        sass = subprocess.run([str(nvidia_bin("cuobjdump")), "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    found = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z0-9_]+)", sass, re.M)
    ops = collections.Counter(op for op in found if op != "NOP")
    per_score = sum(ops.values()) * 32 * warps / (g * block_m * block_n)
    return {"kernel": kernel, "rank": rank, "tokens": tokens, "tile": tile, "blocks": (g, block_m, block_n),
            "warps": warps, "registers": int(re.search(r"Used (\d+) registers", info).group(1)),
            "spill_bytes": int(re.search(r"(\d+) bytes spill stores", info).group(1)), "ops": dict(ops),
            "thread_instr_per_score": per_score}


def bench_kernel_sass(shapes=((1, 256), (1, 16), (2, 64), (8, 256))) -> str:
    """Row 20b: each kernel at figN's and fig1's ranks and lengths, compiled for sm_90."""
    from .common import table

    rows, totals = [], {}
    for rank, tokens in shapes:
        for kernel in KERNELS:
            st = sass_stats(kernel, rank, tokens)
            totals[(rank, tokens)] = totals.get((rank, tokens), 0.0) + st["thread_instr_per_score"]
            rows.append([f"r{rank} N{tokens}", kernel.strip("_"), "x".join(map(str, st["blocks"])), st["warps"],
                         st["registers"], st["spill_bytes"], st["ops"].get("SHFL", 0), st["ops"].get("MUFU", 0),
                         f"{st['thread_instr_per_score']:.1f}"])
        total = totals[(rank, tokens)]
        rows.append([f"r{rank} N{tokens}", "**forward and backward**", "", "", "", "", "", "",
                     f"{total:.1f} = {total / H100_LANE_ISSUE_PER_S * 1e12:.2f} ps a score at the H100's issue rate"])
    return table("20b. The low-rank kernels compiled for sm_90 without a GPU: registers, spills, SASS",
                 ["shape", "kernel", "G x M x N", "warps", "registers", "spill bytes", "SHFL", "MUFU",
                  "thread-instructions a score"], rows) + (
        "\nStatic: from the cubin triton and ptxas make for sm_90 on the CPU. The estimate counts every "
        "instruction of a kernel once per walked block (prologue and epilogue too) at full issue rate with "
        "latency hidden: an estimate of the instruction stream, not a time (today's fused form measured 25.8 "
        "ps a score on an H100, the exponential floor ~0.7 ps). gpu-check's p2kernel section measures the "
        "kernels.\n")
