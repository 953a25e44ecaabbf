"""gpu-check's p2kernel section: P2's many low-rank heads by each attention form, side by side in one
run: seconds per score (forward and backward) at figN's and fig1's shapes for today's form (what
`attention_kernel` takes: the fused kernel, head dim padded, or the math form), the project's low-rank
Triton kernel (models/lowrank.py) and torch's FlexAttention (compiled), against the card's
exponential limit; and each form's output and gradients against the math form's at a small batch.
At the first shape the kernel is also timed at other tile sizes (TILES), for its default.

`leaner cost` prices P2 by today's form until this section has measured the low-rank kernel faster
(planning/cost.py: P2_SCORE_S)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .common import DEVICE, ON_CPU

# (label, heads = W x H, tokens, rank, batch of one attention call): figN's W64 at its head ranks and
# N (H64 N256 at its micro-batch of 64), fig1's largest
SHAPES = [("figN L2-H64-W64 N256 r1", 4096, 256, 1, 64),
          ("figN L2-H64-W64 N64 r1", 4096, 64, 1, 256),
          ("figN L2-H8-W64 N256 r8", 512, 256, 8, 256),
          ("fig1 L5-H64-W64 N16 r1", 4096, 16, 1, 256),
          ("r2 H32-W64 N64", 2048, 64, 2, 256)]
EXP_PER_SM_CLOCK = 16  # fp32 exponentials (MUFU.EX2) an SM issues a clock (Hopper, Ampere)
FORMS = ("today", "lowrank", "flex")
TILES = (1024, 2048, 8192)  # the low-rank kernel's other tile sizes (scores a program), timed at the first shape
FLEX_UNTIL_S = 40  # FlexAttention compiles at every shape: none started past this many seconds of the section
EXACT_RTOL = 1e-4  # fp32, against the math form's output and gradients (relative to their largest entry)


def exp_rate(torch) -> tuple[float, str]:
    """(fp32 exponentials a second the card issues, how it was found): SMs x 16 a clock x its clock."""
    props = torch.cuda.get_device_properties(0)
    khz = getattr(props, "clock_rate", 0)
    hz, how = (khz * 1e3, "the card's clock") if khz else (1.98e9, "an assumed 1.98 GHz clock")
    return props.multi_processor_count * EXP_PER_SM_CLOCK * hz, f"{props.multi_processor_count} SMs x 16 x {how}"


def _form(name: str, n: int, r: int, torch):
    from leaner.models.nearest import attend, attention_kernel

    if name == "today":
        kernel, width = attention_kernel(n, r, torch.float32, "cuda" if not ON_CPU else "cpu")
        return kernel, lambda q, k, v: attend(q, k, v, kernel, width)
    if name == "flex":
        return "flex", lambda q, k, v: attend(q, k, v, "flex", max(16, r))
    return "lowrank", lambda q, k, v: attend(q, k, v, "lowrank", r)


def _timed(fn, q, k, v, g, backward: bool, torch, reps: int = 3) -> float:
    def once():
        out = fn(q, k, v)
        if backward:
            torch.autograd.grad(out, (q, k, v), g)

    once()  # compile, tune, allocate
    if not ON_CPU:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        once()
    if not ON_CPU:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def _error(fn, heads: int, n: int, r: int, backward: bool, torch) -> float:
    """The largest difference from the math form, relative to the math form's largest entry, of the
    output and (with `backward`) the three gradients, at a batch of 2."""
    from leaner.models.nearest import attend

    gen = torch.Generator(device=DEVICE).manual_seed(0)
    q, k, v = (torch.randn(2, min(heads, 64), n, r, device=DEVICE, generator=gen, requires_grad=backward)
               for _ in range(3))
    g = torch.randn(q.shape, device=DEVICE, generator=gen)
    outs = [fn(q, k, v), attend(q, k, v, "math", r)]
    if backward:
        outs = [[o, *torch.autograd.grad(o, (q, k, v), g)] for o in outs]
    else:
        outs = [[o] for o in outs]
    return max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(*([t.detach() for t in o] for o in outs)))


def section_p2kernel(work: Path) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    if ON_CPU:  # the rehearsal: the Triton kernel under its interpreter, FlexAttention forward only
        os.environ["TRITON_INTERPRET"] = "1"
    limit, how = (None, "no card (--cpu)") if ON_CPU else exp_rate(torch)
    rows, start = [], time.monotonic()
    for label, heads, n, r, batch in SHAPES:  # first today's form and the kernel at every shape, printed as measured
        if ON_CPU:
            heads, n, batch = min(heads, 8), min(n, 16), 1
        # the floor: three exponentials a score (the forward's, and one in each backward kernel's recompute)
        floor = None if ON_CPU else round(3 / limit * 1e12, 3)
        row = {"shape": label, "heads": heads, "tokens": n, "rank": r, "batch": batch, "scores": batch * heads * n * n,
               "exp_limit_ps": floor}
        for name in ("today", "lowrank"):
            row[name] = _measure(name, row, torch)
        if not rows and "ps_per_score" in row["lowrank"]:  # the first shape: the kernel's tile, for its default
            row["lowrank_tiles"] = _tiles(heads, n, r, batch, row["scores"], torch)
        print(json.dumps(row), flush=True)
        rows.append(row)
    for row in rows:  # then FlexAttention, which compiles at every shape, while the section has time
        late = time.monotonic() - start > FLEX_UNTIL_S
        row["flex"] = ({"kernel": "flex", "error": f"not run: {FLEX_UNTIL_S} s of the section gone (its compiles)"}
                       if late else _measure("flex", row, torch))
        print(json.dumps({"shape": row["shape"], "flex": row["flex"]}), flush=True)
    summary = "; ".join(f"{r['shape']}: " + ", ".join(
        f"{f} {r[f]['ps_per_score']} ps" if "ps_per_score" in r[f] else f"{f} failed" for f in FORMS)
        + f" (exp limit {r['exp_limit_ps']} ps)" for r in rows)
    return {"status": p2kernel_verdict(rows), "summary": summary, "rows": rows, "exp_rate": how}


def _measure(name: str, row: dict, torch) -> dict:
    """One form at one shape: seconds a score (ps), forward and backward (FlexAttention on the CPU:
    forward only), and its largest difference from the math form; a failure is its row, not the end."""
    heads, n, r, batch = row["heads"], row["tokens"], row["rank"], row["batch"]
    backward = not (name == "flex" and ON_CPU)  # torch has no FlexAttention backward on the CPU
    try:
        kernel, fn = _form(name, n, r, torch)
        q, k, v = (torch.randn(batch, heads, n, r, device=DEVICE, requires_grad=backward) for _ in range(3))
        seconds = _timed(fn, q, k, v, torch.randn_like(q), backward, torch)
        del q, k, v
        out = {"kernel": kernel, "ps_per_score": round(seconds / row["scores"] * 1e12, 3), "backward": backward,
               "rel_error": _error(fn, heads, n, r, backward, torch)}
    except Exception as exc:
        out = {"kernel": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    if not ON_CPU:
        torch.cuda.empty_cache()
    return out


def _tiles(heads: int, n: int, r: int, batch: int, scores: int, torch) -> dict:
    """Seconds per score (ps) of the low-rank kernel at each of TILES, forward and backward."""
    from leaner.models.lowrank import lowrank_attention

    out = {}
    for tile in TILES:
        q, k, v = (torch.randn(batch, heads, n, r, device=DEVICE, requires_grad=True) for _ in range(3))
        try:
            seconds = _timed(lambda a, b, c, t=tile: lowrank_attention(a, b, c, t), q, k, v, torch.randn_like(q), True,
                             torch)
            out[tile] = round(seconds / scores * 1e12, 3)
        except Exception as exc:  # a tile too large for the card's registers or shared memory
            out[tile] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    return out


def p2kernel_verdict(rows: list[dict]) -> str:
    """pass: at every shape today's form and the low-rank kernel were timed, and the low-rank kernel's
    output and gradients are within EXACT_RTOL of the math form's (FlexAttention is reported, not
    required: it is torch's, and its failure at a rank is a finding, not a fault of the check)."""
    def exact(cell):
        return "ps_per_score" in cell and cell["rel_error"] <= EXACT_RTOL

    return "pass" if rows and all(exact(r["today"]) and exact(r["lowrank"]) for r in rows) else "fail"
