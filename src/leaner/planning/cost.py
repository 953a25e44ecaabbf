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
# images/s one Pillow loader worker gives at 224 px from JPEGs of ImageNet's sizes (decode: pil, timm's
# DeiT transform): 327 from 256-px JPEGs (results.md row 1b, 2 workers) x 0.75, the rate of ImageNet-sized
# ones (~400 x 350 px, ~110 KiB) to 256-px ones measured side by side (row 20: median of 10 alternating
# pairs, 95% CI 0.73-0.81). Measure your own machine's with `benchmarks/run.py --loader-rate` (ImageNet's
# sizes) and pass it as `leaner cost --loader-rate`.
LOADER_RATE = 245.0
# ViT-B/16, batch 256, bf16, fused AdamW, measured on one H200: 3387 images/s compiled, 2685 eager
VIT_MFU = {True: 0.36, False: 0.28}
# P2 (nearest_fig1, batch 256, d 64, N 16) through `leaner train` on one H200: 169 steps/s at 1 layer
# (L1-H1-W1-r64), 65 at 3 (L3-H4-W8-r16): a step is P2_STEP_S[0] + P2_STEP_S[1] per layer, launch-bound.
P2_STEP_S = (1 / 169 - (1 / 65 - 1 / 169) / 2, (1 / 65 - 1 / 169) / 2)
# k processes of 2 threads on one GPU, each at this fraction of one alone (134, 111-115, 95-103 steps/s);
# past 8 the GPU's aggregate is taken as flat.
P2_SHARING = {1: 1.0, 4: 0.84, 8: 0.74}
# recipe.cuda_graph: the whole step replayed as one graph, measured on an H200 (torch 2.11) at
# L1-H1-W1: 1,267 against 214 steps/s eager through `leaner train` (results.md 8c, row 6b). Taken
# for every depth and for jobs sharing a GPU (2 processes measured 2,606 against 435 aggregate:
# 6.0 x): an assumption beyond L1, until a deeper model is measured.
P2_GRAPH_SPEEDUP = 1267 / 214
# Many heads of rank 1-8 over W modules are bound by their attention scores (W x heads x N^2 per layer and
# sample), neither by launches nor by FLOPs. Seconds per score, forward and backward, bare loop on one H100
# (fp32, batch 256; tests/test_cost.py lists these runs): the math form stores them (N < 64), 80.5 ms a step of
# L5-H64-W64-r1 N16; the fused kernel (head dim padded) does not, 221 ms a step of L2-H64-W64-r1 N64.
# models/lowrank.py's kernel (many heads of rank <= 8 a program, no padding): exact on the CPU, never yet timed
# on a GPU, so None, and no job is priced by it; `make gpu-check`'s p2kernel section measures it, and with its
# figure here and models/nearest.py's LOWRANK_ON_CUDA set, CUDA takes it and the plan prices by it.
P2_SCORE_S = {"math": 80.51e-3 / (5 * 64 * 64 * 16 ** 2 * 256), "fused": 221.47e-3 / (2 * 64 * 64 * 64 ** 2 * 256),
              "lowrank": None}


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
    scores = P2_SCORE_S[kernel] * batch * model.depth * model.attention_heads * model.tokens**2
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


def loader_feed(plan: Plan, spec: RunSpec, gpus: int, rate: float) -> tuple[float, int] | None:
    """(images/s the Pillow loader gives one GPU's process, its workers) for an image job whose
    dataset decodes with Pillow (decode: pil): recipe.num_workers (auto: the study's threads
    shared by its processes, less one each) x `rate` a worker (0 workers: the process itself);
    None for other jobs (decode: device is not priced: its rate on a GPU is not yet measured, which
    gpu-check's vitdevice section does)."""
    from ..data.splits import worker_count

    dataset = plan.datasets.get(spec.dataset) or {}
    image_files = isinstance(spec.model, ViTConfig) and dataset.get("decode") == "pil"
    if not image_files:
        return None
    threads = plan.studies[spec.study].resources["threads"]
    workers = worker_count(spec.recipe.num_workers, cores=threads, local_world=gpus)
    return max(workers, 1) * rate, workers


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
                       gpu_hours=wall / k / 3600)
        else:
            gpu_s, how = steps * compute_s, f"FLOPs ({source})"
            fed = loader_feed(plan, spec, gpus, loader_rate)
            if fed is not None:
                row.update(images_per_s_needed=batch / compute_s, images_per_s_fed=fed[0], loader_workers=fed[1])
                if fed[0] < batch / compute_s:  # the loader, not the GPU, sets the pace
                    gpu_s, how = steps * batch / fed[0], f"loader (decode: pil, {fed[1]} workers a GPU)"
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
