"""The bill before the run: every job of a config priced in GPU-hours on a chosen card, and its GPU
memory set against the card's.

The grids vary depth, heads, width and MLP width, so variants differ several-fold in work, and
P2's head ranks down to 1 make attention, not the weights, decide whether a job fits. So each job
is priced from its built model (footprint.py: FLOPs and activation bytes per sample), never by
counting variants as equal:

- GPU-hours = training FLOPs (per sample x batch x steps) / (the card's dense peak at the run's
  precision x MFU). MFU: measured where it was (ViT-B/16 on an H200), else DEFAULT_MFU, or --mfu.
  `resources.gpu: g` runs a variant on g GPUs (wall = GPU-hours / g, linear scaling assumed).
- P2's steps are launch-bound, and FLOPs say little about them: a step takes the measured time of
  P2_STEP_S per layer (H200, `leaner train`), and k jobs sharing a GPU each run at the measured
  P2_SHARING fraction of that; unless its attention scores (W x heads x N^2 per layer and sample,
  at the measured P2_SCORE_S each, by the kernel CUDA takes) or its FLOPs (at DEFAULT_MFU of the
  card's peak) take longer, and then k jobs take k times as long. A shared GPU's hour is split
  among its k jobs. Measured on an H100 or H200 and taken as the same on every card.
- Memory of a job, per GPU: models/memory.py, the one model of a job's memory (the onstart check
  and the rehearsal read it too); k jobs sharing a GPU add up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..data import train_rows
from ..data.kinds import dataset_kind
from ..models.config import NearestConfig, ViTConfig
from ..runspec import RunSpec
from ..tasks import task_of
from ..workflow.plan import Plan, Study
from .cards import Card
from .time_limit import SIGNAL_LEAD_S, STOP_GRACE_S, attempts_needed

DEFAULT_MFU = 0.30  # assumed where nothing was measured
# Where the measured figures below come from: `make gpu-check` on one H200 (16 cores; torch 2.11.0+cu130
# there, not the lock's 2.14.1) at d987d13 on 2026-12-04 (benchmarks/results.md 8c and 33, gpu-notes), and
# the earlier runs each names. Each is taken as the same on an H100 SXM (the same SMs and clocks; less and
# slower memory, which none of these steps is bound by).
GPU_CHECK = "H200, torch 2.11, gpu-check 2026-12-04"
# images/s one Pillow loader worker gives at 224 px from JPEGs of ImageNet's sizes (decode: pil, timm's
# DeiT transform) on that H200's host: ~100, fitted to its vit section (673 images/s through `leaner train`
# with 15 workers at 8-step epochs) and a longer run (1,033 at 24-step epochs), both before the loader read
# across epochs; the section's own "loader alone" (16,432) timed only batches built before its clock
# started. A 2-core development VM's measures 245 (results.md row 20): measure your own machine's with
# `benchmarks/run.py --loader-rate` and pass it as `leaner cost --loader-rate`.
LOADER_RATE = 100.0
LOADER_RATE_SOURCE = f"~100 images/s a worker, fitted to the {GPU_CHECK} vit section"
# decode: device's input path alone (read, nvJPEG, crop, RandAugment, normalise, erase) for one GPU:
# 1,534 images/s at batch 128 (vitdevice section, before it read ahead of the step). With the read-ahead
# (compute/side_stream.py) the step no longer waits for it, so a job runs at the slower of the two.
DEVICE_INPUT_RATE = 1534.0
DEVICE_INPUT_SOURCE = f"1,534 images/s a GPU, decode and augmentation alone, {GPU_CHECK}"
# ViT-B/16, bf16, fused AdamW: 3,387 images/s compiled at batch 256 and 2,685 eager (one H200, 2026-11-26),
# 3,404 compiled at batch 128 (the vit section's step alone, 2026-12-04): 36% and 28% of the bf16 peak.
VIT_MFU = {True: 0.36, False: 0.28}
# P2 (nearest_fig1, batch 256, d 64, N 16) through `leaner train` on one H200: 169 steps/s at 1 layer
# (L1-H1-W1-r64), 65 at 3 (L3-H4-W8-r16): a step is P2_STEP_S[0] + P2_STEP_S[1] per layer, launch-bound.
P2_STEP_S = (1 / 169 - (1 / 65 - 1 / 169) / 2, (1 / 65 - 1 / 169) / 2)
# k processes of 2 threads on one GPU, each at this fraction of one alone (134, 111-115, 95-103 steps/s);
# past 8 the GPU's aggregate is taken as flat.
P2_SHARING = {1: 1.0, 4: 0.84, 8: 0.74}
# recipe.cuda_graph: the whole step replayed as one graph. gpu-check's p2train section (fig1 L1-H4-W8
# through `leaner train`, H200, 2026-12-04): 728.8 against 207.9 steps/s eager, 3.51 x; an earlier run at
# L1-H1-W1 gave 5.9 x (1,267 against 214, results.md 8c). Priced at the wider model's, the smaller gain.
P2_GRAPH_SPEEDUP = 728.8 / 207.9
P2_GRAPH_SOURCE = f"3.5 x, fig1 L1-H4-W8, {GPU_CHECK}"
# Many heads of rank 1-8 over W modules are bound by their attention scores (W x heads x N^2 per layer and
# sample), neither by launches nor by FLOPs. Seconds per score, forward and backward: the math form stores
# them (N < 64), 80.5 ms a step of L5-H64-W64-r1 N16; the fused kernel (head dim padded) does not, 221 ms a
# step of L2-H64-W64-r1 N64 (bare loop on one H100, fp32, batch 256; tests/test_cost.py lists these runs).
# models/lowrank.py's kernel (many heads of rank 1-2 a program, no padding; CUDA takes it there:
# models/nearest.py), by the sequence's length: 1.9 ps at figN's H64 N256 rank 1 (its tile of 2,048 scores;
# 4.0 at 4,096, 22.2 for the fused form on the same card), 13.4 ps at fig1's H64 N16 (46.7 fused); between
# them log-linear in N (p2kernel section, H200, 2026-12-04).
P2_SCORE_S = {"math": 80.51e-3 / (5 * 64 * 64 * 16 ** 2 * 256), "fused": 221.47e-3 / (2 * 64 * 64 * 64 ** 2 * 256),
              "lowrank": {16: 13.4e-12, 256: 1.9e-12}}
P2_SCORE_SOURCE = {"math": "measured on an H100", "fused": "measured on an H100",
                   "lowrank": f"measured at N 16 and 256, {GPU_CHECK}"}


def score_seconds(kernel: str, tokens: int) -> float:
    """Seconds per attention score (forward and backward) of `kernel` at sequences of `tokens` points."""
    figure = P2_SCORE_S[kernel]
    if not isinstance(figure, dict):
        return figure
    (n0, s0), (n1, s1) = sorted(figure.items())
    t = min(max((math.log(tokens) - math.log(n0)) / (math.log(n1) - math.log(n0)), 0.0), 1.0)
    return math.exp(math.log(s0) + t * (math.log(s1) - math.log(s0)))


def parse_mfu(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise ValueError(f"--mfu {text}: not a fraction of the peak (allowed: a number in (0, 1], e.g. 0.3)")
    return value


def precision_of(spec: RunSpec) -> str:
    """The run's precision: the recipe's `precision` (its task's default, else the schema's)."""
    return spec.recipe.precision


def arithmetic_of(spec: RunSpec) -> str:
    """Which peak the run's matrix products reach: bf16, tf32 (fp32 with the recipe's `tf32`) or fp32."""
    recipe = spec.recipe
    return "tf32" if recipe.precision == "fp32" and recipe.tf32 else recipe.precision


@dataclass(frozen=True)
class Job:
    """One training job of the DAG: a variant's training, or its fine-tuning on one GLUE task."""

    study: str
    name: str  # the variant id, with /glue/<task> for a fine-tuning
    spec: RunSpec


def jobs(study: Study) -> list[Job]:
    out = []
    for vid, v in study.variants.items():
        out.append(Job(study.name, vid, RunSpec.of(v.spec())))
        for task in (study.finetune or {}).get("tasks", []):
            out.append(Job(study.name, f"{vid}/glue/{task}", RunSpec.of(study.finetune_spec(vid, task))))
    return out


def _read_manifest(root: Path, dataset: str) -> dict | None:
    from ..io import read_json

    path = root / "results" / "data" / dataset / "manifest.json"
    return read_json(path) if path.is_file() else None


def training_rows(plan: Plan, spec: RunSpec, root: Path) -> int | None:
    """Training examples of the job's dataset: its prepared manifest, else what its kind knows."""
    name = spec.dataset
    return train_rows(plan.datasets[name], _read_manifest(root, name), spec)


def training_steps(plan: Plan, spec: RunSpec, root: Path) -> int | None:
    """Optimiser steps of the job (None: its training-set size is unknown)."""
    recipe = spec.recipe
    if dataset_kind(plan.datasets[spec.dataset]["kind"]).streamed:
        per_epoch = recipe.steps_per_epoch
    else:
        rows = training_rows(plan, spec, root)
        if rows is None:
            return None
        per_epoch = math.ceil(rows / recipe.batch_size)
    return min(recipe.epochs * per_epoch, recipe.max_steps or math.inf)


def sharing(k: int) -> float:
    """Each of k P2 jobs on one GPU runs at this fraction of its speed alone (P2_SHARING)."""
    points = sorted(P2_SHARING.items())
    if k >= points[-1][0]:
        return points[-1][1] * points[-1][0] / k
    for (k0, s0), (k1, s1) in zip(points, points[1:]):
        if k0 <= k <= k1:
            return s0 + (s1 - s0) * (k - k0) / (k1 - k0)
    return 1.0


def p2_step_seconds(model: NearestConfig, batch: int, compute_s: float, k: int,
                    graphed: bool = False) -> tuple[float, str]:
    """(seconds of one step of each of k P2 jobs sharing a GPU, what bounds it): launches (each job's
    own, slowed by sharing; P2_GRAPH_SPEEDUP fewer with recipe.cuda_graph), else attention scores
    or FLOPs (`compute_s`, the GPU to one job), shared."""
    import torch

    from ..models.nearest import attention_kernel

    launch = (P2_STEP_S[0] + P2_STEP_S[1] * model.depth) / sharing(k) / (P2_GRAPH_SPEEDUP if graphed else 1)
    kernel, _ = attention_kernel(model.tokens, model.head_dim, torch.float32, "cuda")
    scores = score_seconds(kernel, model.tokens) * batch * model.depth * model.attention_heads * model.tokens**2
    return max((launch, "launches (CUDA graph)" if graphed else "launches"),
               (k * scores, f"attention scores ({kernel})"), (k * compute_s, "FLOPs"))


def pricing_mfu(spec: RunSpec, override: float | None) -> tuple[float, str]:
    """(the MFU a job is priced at, where that figure comes from)."""
    if override:
        return override, "--mfu"
    if isinstance(spec.model, ViTConfig):
        compiled = bool(spec.recipe.compile)
        return VIT_MFU[compiled], f"measured: ViT-B/16, H200, {'torch.compile' if compiled else 'eager'}"
    return DEFAULT_MFU, "assumed"


def loader_feed(plan: Plan, spec: RunSpec, gpus: int, rate: float) -> tuple[float, int, str] | None:
    """(images/s the input path gives one GPU's process, its loader workers, how) for a job on image
    files (ViT or a timm backbone on an image dataset): decode: pil, recipe.num_workers (auto: the
    study's threads shared by its processes, less one each) x `rate` a worker (0 workers: the
    process itself); decode: device, DEVICE_INPUT_RATE (the read-ahead overlaps it with the step).
    None for other jobs (data in memory, text, P2's points)."""
    from ..data.splits import worker_count
    from ..models.config import TimmConfig

    dataset = plan.datasets.get(spec.dataset) or {}
    decode = dataset.get("decode")
    if not isinstance(spec.model, ViTConfig | TimmConfig) or decode not in ("pil", "device"):
        return None
    threads = plan.studies[spec.study].resources["threads"]
    workers = worker_count(spec.recipe.num_workers, cores=threads, local_world=gpus)
    if decode == "device":
        return DEVICE_INPUT_RATE, workers, "decode: device"
    return max(workers, 1) * rate, workers, "decode: pil"


def price(job: Job, plan: Plan, gpu: Card, mfu: float | None, root: Path, loader_rate: float = LOADER_RATE,
          grace_s: float | None = None, lead_s: float | None = None) -> dict:
    """One job's row of the plan: its FLOPs, GPU-hours, wall time, step time and memory per GPU; an
    image job at the slower of its step and its loader (`loader_feed`); the attempts it needs
    (`attempts_needed`, with the stop signal `lead_s` before each time limit and `grace_s` from it
    to the SIGKILL: by default what profiles/slurm asks)."""
    grace_s = STOP_GRACE_S if grace_s is None else grace_s
    lead_s = SIGNAL_LEAD_S if lead_s is None else lead_s
    from ..models.footprint import footprint
    from ..models.memory import training_gpu_bytes

    spec, resources = job.spec, plan.studies[job.study].resources
    gpus = max(1, resources["gpu"])
    k = resources["jobs_per_gpu"] if gpus == 1 else 1
    precision, arithmetic = precision_of(spec), arithmetic_of(spec)
    fp = footprint(spec.model, precision)
    steps = training_steps(plan, spec, root)
    recipe = spec.recipe
    batch = recipe.batch_size
    rate, source = pricing_mfu(spec, mfu)
    row = {"study": job.study, "job": job.name, "params": fp.params, "precision": arithmetic, "batch_size": batch,
           "gpus": gpus, "jobs_per_gpu": k, "steps": steps, "flops_per_sample": fp.flops,
           "train_flops": None if steps is None else fp.flops * batch * steps, "priced_by": "", "mfu": rate,
           "gpu_hours": None, "wall_hours": None,
           "memory_gb": training_gpu_bytes(fp, recipe, gpus) / 1e9, "card_memory_gb": gpu.memory_gb}
    if steps is not None:
        compute_s = fp.flops * batch / (gpu.peak_flops(arithmetic) * rate)  # one step, the GPU to itself
        if task_of(spec.task).launch_bound:
            step_s, how = p2_step_seconds(spec.model, batch, compute_s, k, recipe.cuda_graph)
            wall = steps * step_s
            row.update(priced_by=how if how != "FLOPs" else f"FLOPs ({source})", wall_hours=wall / 3600,
                       gpu_hours=wall / k / 3600, tokens=spec.model.tokens)
        else:
            gpu_s, how = steps * compute_s, f"FLOPs ({source})"
            fed = loader_feed(plan, spec, gpus, loader_rate)
            if fed is not None:
                row.update(images_per_s_needed=batch / compute_s, images_per_s_fed=fed[0], loader_workers=fed[1],
                           decode=fed[2][len("decode: "):])
                if fed[0] < batch / compute_s:  # the input path, not the GPU, sets the pace
                    gpu_s, how = steps * batch / fed[0], f"loader ({fed[2]}, {fed[1]} workers a GPU)"
            row.update(priced_by=how, gpu_hours=gpu_s / 3600, wall_hours=gpu_s * k / gpus / 3600)
    row["fits"] = k * row["memory_gb"] <= gpu.memory_gb
    if "/glue/" not in job.name:  # a fine-tuning has no conditioning job
        row["cond_memory_gb"], row["cond_hours"] = conditioning_price(spec, fp, gpu)
    runtime = plan.studies[job.study].resources["runtime"]
    row["step_s"] = None if row["wall_hours"] is None else row["wall_hours"] * 3600 / max(steps, 1)
    row["attempts"], row["cannot_finish"] = attempts_needed(row["wall_hours"], runtime, fp.params,
                                                            recipe.checkpoint_minutes, row["step_s"] or 0.0,
                                                            grace_s, lead_s)
    return row


def conditioning_price(spec: RunSpec, fp, gpu: Card) -> tuple[float, float]:
    """(GB, GPU-hours) of the variant's conditioning job on `gpu`: its memory
    (models/memory.py conditioning_gpu_bytes); its time, the longer of its float64 FLOPs at
    DEFAULT_MFU of the card's fp64 peak and its memory traffic (each input's probe bytes written
    and read once) at the card's bandwidth: each kept checkpoint (init, conditioning.steps,
    final) runs the forward pass of every probe input (a third of training's FLOPs), and the
    Jacobian's inputs add, per layer, an exact SVD of the (N*D)^2 Jacobian (~9 (N*D)^3) or
    lanczos_steps products with it (~4 forward passes of a block each)."""
    from ..models.memory import conditioning_gpu_bytes, probe_bytes, probe_shape

    model, cond = spec.model, spec.conditioning
    tokens, heads, cols = probe_shape(model)
    layers, samples = model.depth, cond["samples"]
    per = probe_bytes(heads, tokens, cols, layers)
    memory = conditioning_gpu_bytes(model, cond, fp.params, gpu.memory_gb)
    forward = fp.flops / 3 if math.isfinite(fp.flops) else math.nan
    checkpoints = 2 + len(cond.get("steps") or [])
    flops = checkpoints * samples * forward
    jac = min(cond.get("jacobian_samples", 0), samples)
    if jac:
        n = tokens * model.residual_width
        one = 9.0 * n**3 if n <= cond.get("jacobian_exact_max", 0) else \
            cond.get("lanczos_steps", 1) * 4 * forward / layers
        flops += checkpoints * jac * layers * one
    traffic = checkpoints * samples * 2 * per / (gpu.memory_tbps * 1e12)
    seconds = max(flops / (gpu.peak_flops("fp64") * DEFAULT_MFU), traffic)
    return memory / 1e9, seconds / 3600


@dataclass
class StudyCost:
    name: str
    rows: list[dict]
    resources: dict
    baseline: str | None  # the variant of the study's baseline, where it has one

    def total(self, key: str) -> float | None:
        values = [r[key] for r in self.rows]
        return None if any(v is None for v in values) else float(sum(values))

    def largest(self) -> dict:
        return max(self.rows, key=lambda r: r["memory_gb"])


def _baseline_variant(study: Study) -> str | None:
    b = study.baseline
    for vid, v in study.variants.items():
        if b and all(getattr(v.model, k) == val for k, val in b.items() if hasattr(v.model, k)):
            return vid
    return None


def plan_cost(plan: Plan, gpu: Card, mfu: float | None = None, root: str | Path = ".",
              loader_rate: float = LOADER_RATE) -> list[StudyCost]:
    """Every job of the plan priced on `gpu`, grouped by study."""
    return [StudyCost(name, [price(j, plan, gpu, mfu, Path(root), loader_rate) for j in jobs(study)],
                      study.resources, _baseline_variant(study)) for name, study in plan.studies.items()]
