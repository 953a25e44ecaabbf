"""Row 7 of benchmarks/run.py: the paper-scale studies of configs/paper.yaml priced by `leaner cost` on
an H100."""

from __future__ import annotations

import time

from .common import REPO, table

# ----------------------------------------------------------------------------- 7. paper-scale projection

def bench_projection() -> str:
    """Each paper-scale study of configs/paper.yaml priced by `leaner cost` on an H100 (leaner/planning/cost.py):
    training FLOPs from the built models, so variants weigh by their work instead of counting as
    equal; GPU-hours at the measured or stated MFU, P2 at its measured step rates; and the largest
    job's memory against the card."""
    from leaner.planning.cards import CARDS
    from leaner.planning.cost import plan_cost
    from leaner.planning.cost_report import hours_text
    from leaner.workflow.plan import load_plan

    gpu = CARDS["h100"]
    t0 = time.perf_counter()
    costs = plan_cost(load_plan(REPO / "configs" / "paper.yaml"), gpu)
    seconds = time.perf_counter() - t0
    rows = []
    for c in costs:
        base = next((r for r in c.rows if r["job"] == c.baseline), None)
        flops, hours, big = c.total("train_flops"), c.total("gpu_hours"), c.largest()
        k = big["jobs_per_gpu"]
        rows.append([c.name, len({r["job"].split("/")[0] for r in c.rows}), len(c.rows), f"{flops:.3g}",
                     f"{flops / base['train_flops']:.1f}" if base else "-", hours_text(hours), hours_text(hours / 8),
                     f"{big['job']}: {'' if k == 1 else f'{k} x '}{big['memory_gb']:.1f}",
                     "yes" if k * big["memory_gb"] <= gpu.memory_gb else "no",
                     ", ".join(sorted({r["priced_by"].split(" (")[0] for r in c.rows}))])
    hours = sum(c.total("gpu_hours") for c in costs)
    rows.append(["total", sum(r[1] for r in rows), sum(r[2] for r in rows),
                 f"{sum(c.total('train_flops') for c in costs):.3g}", "", hours_text(hours), hours_text(hours / 8),
                 "", "", ""])
    text = table("7. Paper-scale studies: `leaner cost configs/paper.yaml` on an H100", [
        "study", "variants", "jobs", "training FLOP", "x its baseline", "GPU-hours", "8-GPU node (h)",
        "largest job: GB per GPU", "fits 80 GB", "priced by"], rows)
    return text + (f"\nPlanned in {seconds:.0f} s. FLOPs counted from each built model (x its baseline: the study's "
                   "FLOPs over its baseline variant's); GPU-hours at 36% MFU for the ViTs (measured, ViT-B/16 "
                   "compiled on an H200), 30% for the other P1 models (assumed), P2 by its measured step rates "
                   "(launch-bound, else attention- or FLOP-bound; k jobs sharing a GPU split its hours). 8-GPU node: "
                   "GPU-hours / 8, perfectly packed. `leaner cost` prints how each study is priced.\n")
