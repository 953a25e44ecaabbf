"""`leaner cost`'s table: every study's jobs priced (cost.py), as the terminal shows it and as CSV."""

from __future__ import annotations

from pathlib import Path

from ..models.memory import ALLOCATOR_SLACK, CUDA_CONTEXT_GB, DDP_BUCKET_BYTES, STATE_BYTES
from .cards import Card
from .cost import (
    DEVICE_INPUT_RATE,
    DEVICE_INPUT_SOURCE,
    LOADER_RATE,
    LOADER_RATE_SOURCE,
    P2_GRAPH_SOURCE,
    P2_GRAPH_SPEEDUP,
    P2_SCORE_SOURCE,
    P2_STEP_S,
    StudyCost,
    score_seconds,
    sharing,
)
from .time_limit import START_MINUTES


def hours_text(value: float | None) -> str:
    """Hours as the plan's tables show them: 1,234.5, 0.42, or ? where unknown."""
    if value is None:
        return "?"
    return f"{value:,.1f}" if value >= 1 else f"{value:.2f}"


def format_cost(costs: list[StudyCost], gpu: Card, source: str) -> str:
    """The printed plan: a table of the studies and their total, then how each was priced."""
    import textwrap

    header = ["study", "variants", "jobs", "GPUs/job", "jobs/GPU", "prec", "train FLOP", "GPU-hours", "h/job",
              "largest job (memory per GPU)", "GB", "fits", "tries", "cond GB", "cond h"]
    rows = []
    for c in costs:
        big = c.largest()
        k = big["jobs_per_gpu"]
        flops, walls = c.total("train_flops"), [r["wall_hours"] for r in c.rows]
        rows.append([c.name, str(len({r["job"].split("/")[0] for r in c.rows})), str(len(c.rows)), str(big["gpus"]),
                     str(k), "/".join(sorted({r["precision"] for r in c.rows})),
                     "?" if flops is None else f"{flops:.3g}", hours_text(c.total("gpu_hours")),
                     "?" if None in walls else hours_text(max(walls)), big["job"],
                     f"{big['memory_gb']:.1f}" if k == 1 else f"{k} x {big['memory_gb']:.1f}",
                     "yes" if k * big["memory_gb"] <= gpu.memory_gb else "NO", _tries(c), *_conditioning_cells(c)])
    hours, flops = [c.total("gpu_hours") for c in costs], [c.total("train_flops") for c in costs]
    cond = [r.get("cond_hours", 0.0) for c in costs for r in c.rows]
    rows.append(["total", str(sum(int(r[1]) for r in rows)), str(sum(int(r[2]) for r in rows)), "", "", "",
                 "?" if None in flops else f"{sum(flops):.3g}", hours_text(None if None in hours else sum(hours)),
                 "", "", "", "", "", "", hours_text(sum(cond))])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = {1, 2, 3, 4, 6, 7, 8, 10, 12, 13, 14}

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [f"Cost of {source} on {gpu.name}: {gpu.memory_gb:g} GB; dense peak TFLOP/s {gpu.bf16_tflops:g} bf16, "
             f"{gpu.tf32_tflops:g} tf32, {gpu.fp32_tflops:g} fp32 (no TF32)", "", line(header),
             *(line(r) for r in rows), "",
             "h/job: the longest job's wall time; GPU-hours of k jobs sharing a GPU are split among them.",
             f"tries: the most attempts a job needs within its study's runtime ({START_MINUTES:g} min of start-up "
             "each; `leaner cost --check cluster` names the jobs).",
             "cond GB, cond h: the largest conditioning job's GPU memory (float64, the probe in chunks that fit the "
             "card) and the study's conditioning GPU-hours.",
             "How each study is priced:"]
    width = max(len(c.name) for c in costs)
    for c in costs:
        lines += textwrap.wrap(_priced_note(c), 116, initial_indent=f"  {c.name.ljust(width)}  ",
                               subsequent_indent=" " * (width + 4))
    missing = sorted({f"{c.name} {r['job']}" for c in costs for r in c.rows if r["steps"] is None})
    for m in missing:
        lines.append(f"training-set size unknown, GPU-hours left out: {m} (prepare its dataset first: "
                     "snakemake results/data/<dataset>/manifest.json)")
    lines += [f"Memory of a job, per GPU: fp32 weights, gradients and AdamW state ({STATE_BYTES} B per parameter, "
              f"+{DDP_BUCKET_BYTES} with DDP),",
              "  the tensors autograd saves for backward (bf16 where autocast makes them so, attention as CUDA runs "
              "it) x the per-GPU batch,",
              f"  the backward's largest working set, +{ALLOCATOR_SLACK:.0%} allocator slack, {CUDA_CONTEXT_GB:g} GB "
              "CUDA context; jobs sharing a GPU add up."]
    return "\n".join(lines)


def _tries(c: StudyCost) -> str:
    if any(r["cannot_finish"] for r in c.rows):
        return "NEVER"
    tries = [r["attempts"] for r in c.rows]
    return "?" if None in tries else str(max(tries))


def _conditioning_cells(c: StudyCost) -> list[str]:
    rows = [r for r in c.rows if "cond_memory_gb" in r]
    return [f"{max(r['cond_memory_gb'] for r in rows):.1f}", hours_text(sum(r["cond_hours"] for r in rows))]


def _priced_note(c: StudyCost) -> str:
    notes = []
    if c.baseline:
        base = next(r for r in c.rows if r["job"] == c.baseline)
        total = c.total("train_flops")
        if total and base["train_flops"]:
            notes.append(f"{total / base['train_flops']:.1f} x the FLOPs of its baseline {c.baseline}.")
    n = len(c.rows)
    for how in sorted({r["priced_by"] for r in c.rows if r["priced_by"]}):
        m = sum(r["priced_by"] == how for r in c.rows)
        share = f"{m} of {n} jobs: " if m < n else ""
        k = c.rows[0]["jobs_per_gpu"]
        if how.startswith("launches"):
            graph = (f", replayed as one CUDA graph at 1/{P2_GRAPH_SPEEDUP:.1f} of that ({P2_GRAPH_SOURCE})"
                     if how.endswith("(CUDA graph)") else "")
            notes.append(f"{share}launch-bound, a step {P2_STEP_S[0] * 1e3:.1f} ms + {P2_STEP_S[1] * 1e3:.1f} ms per "
                         f"layer (measured on an H200: 169 steps/s at 1 layer, 65 at 3), each of {k} jobs on a GPU "
                         f"at {sharing(k):.2f} of that (8 jobs: 95-103 against 134 steps/s alone){graph}.")
        elif how.startswith("loader"):
            rows = [r for r in c.rows if r["priced_by"] == how]
            need, fed = max(r["images_per_s_needed"] for r in rows), rows[0]["images_per_s_fed"]
            workers = rows[0]["loader_workers"]
            if rows[0]["decode"] == "device":
                notes.append(f"{share}input-bound: the step asks up to {need:,.0f} images/s a GPU, decode: device "
                             f"gives {fed:,.0f} ({DEVICE_INPUT_SOURCE}; read ahead of the step, so the slower of "
                             "the two sets the pace).")
            else:
                rate = fed / max(workers, 1)
                source = LOADER_RATE_SOURCE if rate == LOADER_RATE else "--loader-rate"
                notes.append(f"{share}loader-bound: the step asks up to {need:,.0f} images/s a GPU, decode: pil "
                             f"gives {fed:,.0f} ({workers} workers x {rate:.0f} images/s: {source}); decode: "
                             f"device gives {DEVICE_INPUT_RATE:,.0f} ({DEVICE_INPUT_SOURCE}).")
        elif how.startswith("attention scores"):
            kernel = how.split("(")[1][:-1]
            rows = [r for r in c.rows if r["priced_by"] == how]
            per = sorted({score_seconds(kernel, r["tokens"]) * 1e12 for r in rows})
            shown = f"{per[0]:.1f}" if len(per) == 1 else f"{per[0]:.1f}-{per[-1]:.1f}"
            notes.append(f"{share}attention-bound, {shown} ps per score of the {kernel} form (W x heads x N^2 per "
                         f"layer and sample; {P2_SCORE_SOURCE[kernel]}), {k} jobs in turn.")
        else:
            mfu = sorted({r["mfu"] for r in c.rows if r["priced_by"] == how})
            notes.append(f"{share}FLOPs at {'/'.join(f'{m:.0%}' for m in mfu)} MFU, {how[len('FLOPs ('):-1]}.")
    return " ".join(notes)


def write_cost_csv(path: str | Path, costs: list[StudyCost]) -> None:
    import pandas as pd

    from ..io import write_csv

    write_csv(path, pd.DataFrame([r for c in costs for r in c.rows]))


# ---------------------------------------------------------------- the check before a run
