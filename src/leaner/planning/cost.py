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
- Memory of a job, per GPU: fp32 weights, gradients and AdamW state (16 B per parameter, +4 for
  DDP's gradient buckets), the activations of its per-GPU batch (footprint.py), +ALLOCATOR_SLACK
  and CUDA_CONTEXT_GB; evaluation's forward (no graph, its own batch) where that is larger. k jobs
  sharing a GPU add up.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..data import train_rows
from ..data.kinds import dataset_kind
from ..schema import Recipe
from ..tasks import task_of
from ..workflow.plan import Plan, Study


@dataclass(frozen=True)
class Card:
    name: str  # as a sentence names it: "an H100 SXM"
    memory_gb: float
    bf16_tflops: float  # dense peaks: bf16 tensor cores,
    tf32_tflops: float  # fp32 matrix products in TF32,
    fp32_tflops: float  # fp32 without TF32
    fp64_tflops: float = math.nan  # fp64 matrix products (DGEMM on the FP64 tensor cores): conditioning
    memory_tbps: float = math.nan  # memory bandwidth, TB/s: conditioning's float64 scores are bound by it

    def peak_flops(self, arithmetic: str) -> float:
        return 1e12 * {"bf16": self.bf16_tflops, "tf32": self.tf32_tflops, "fp32": self.fp32_tflops,
                       "fp64": self.fp64_tflops}[arithmetic]


CARDS = {"h100": Card("an H100 SXM", 80, 989, 494.5, 67, 67, 3.35),
         "h200": Card("an H200", 141, 989, 494.5, 67, 67, 4.8),
         "a100": Card("an A100 80GB", 80, 312, 156, 19.5, 19.5, 2.0)}

DEFAULT_MFU = 0.30  # assumed where nothing was measured
# images/s one Pillow loader worker gives at 224 px from ~256 px JPEGs (decode: pil, timm's DeiT
# transform): results.md row 1b, 2 workers (327; one worker 381). Measure your own machine's with
# `benchmarks/run.py --loader-rate` and pass it as `leaner cost --loader-rate`.
LOADER_RATE = 327.0
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
P2_SCORE_S = {"math": 80.51e-3 / (5 * 64 * 64 * 16 ** 2 * 256), "fused": 221.47e-3 / (2 * 64 * 64 * 64 ** 2 * 256)}
DDP_BUCKET_BYTES = 4  # per parameter: DDP keeps its gradient buckets beside the gradients
STATE_BYTES = 16  # per parameter: fp32 weights, gradients, AdamW's two moments
ALLOCATOR_SLACK = 0.10  # of the activations: the caching allocator's fragmentation
CUDA_CONTEXT_GB = 1.0  # per process: the CUDA context, cuBLAS and cuDNN workspaces



def card(name: str) -> Card:
    if name not in CARDS:
        raise ValueError(f"--gpu {name}: unknown card (allowed: {', '.join(CARDS)})")
    return CARDS[name]


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


def precision_of(spec: dict) -> str:
    """The run's precision: the recipe's `precision` (its task's default, else the schema's)."""
    return Recipe.of(spec["recipe"]).precision


def arithmetic_of(spec: dict) -> str:
    """Which peak the run's matrix products reach: bf16, tf32 (fp32 with the recipe's `tf32`) or fp32."""
    precision = precision_of(spec)
    if precision == "fp32" and Recipe.of(spec["recipe"]).tf32:
        return "tf32"
    return precision


@dataclass(frozen=True)
class Job:
    """One training job of the DAG: a variant's training, or its fine-tuning on one GLUE task."""

    study: str
    name: str  # the variant id, with /glue/<task> for a fine-tuning
    spec: dict


def jobs(study: Study) -> list[Job]:
    out = []
    for vid, v in study.variants.items():
        out.append(Job(study.name, vid, v.spec()))
        for task in (study.finetune or {}).get("tasks", []):
            out.append(Job(study.name, f"{vid}/glue/{task}", study.finetune_spec(vid, task)))
    return out


def _read_manifest(root: Path, dataset: str) -> dict | None:
    from ..io import read_json

    path = root / "results" / "data" / dataset / "manifest.json"
    return read_json(path) if path.is_file() else None


def training_rows(plan: Plan, spec: dict, root: Path) -> int | None:
    """Training examples of the job's dataset: its prepared manifest, else what its kind knows."""
    name = spec["dataset"]
    return train_rows(plan.datasets[name], _read_manifest(root, name), spec)


def training_steps(plan: Plan, spec: dict, root: Path) -> int | None:
    """Optimiser steps of the job (None: its training-set size is unknown)."""
    recipe = Recipe.of(spec["recipe"])
    if dataset_kind(plan.datasets[spec["dataset"]]["kind"]).streamed:
        per_epoch = recipe.steps_per_epoch
    else:
        rows = training_rows(plan, spec, root)
        if rows is None:
            return None
        per_epoch = math.ceil(rows / recipe.batch_size)
    return min(recipe.epochs * per_epoch, recipe.max_steps or math.inf)


def _sharing(k: int) -> float:
    """Each of k P2 jobs on one GPU runs at this fraction of its speed alone (P2_SHARING)."""
    points = sorted(P2_SHARING.items())
    if k >= points[-1][0]:
        return points[-1][1] * points[-1][0] / k
    for (k0, s0), (k1, s1) in zip(points, points[1:]):
        if k0 <= k <= k1:
            return s0 + (s1 - s0) * (k - k0) / (k1 - k0)
    return 1.0


def p2_step_seconds(model: dict, batch: int, compute_s: float, k: int,
                    graphed: bool = False) -> tuple[float, str]:
    """(seconds of one step of each of k P2 jobs sharing a GPU, what bounds it): launches (each job's
    own, slowed by sharing; P2_GRAPH_SPEEDUP fewer with recipe.cuda_graph), else attention scores
    or FLOPs (`compute_s`, the GPU to one job), shared."""
    import torch

    from ..models.nearest import attention_kernel

    launch = (P2_STEP_S[0] + P2_STEP_S[1] * model["depth"]) / _sharing(k) / (P2_GRAPH_SPEEDUP if graphed else 1)
    kernel, _ = attention_kernel(model["tokens"], model["head_dim"], torch.float32, "cuda")
    scores = P2_SCORE_S[kernel] * batch * model["depth"] * model["modules"] * model["heads"] * model["tokens"] ** 2
    return max((launch, "launches (CUDA graph)" if graphed else "launches"),
               (k * scores, f"attention scores ({kernel})"), (k * compute_s, "FLOPs"))


def _mfu(spec: dict, override: float | None) -> tuple[float, str]:
    if override:
        return override, "--mfu"
    if spec["model"]["arch"] == "vit":
        compiled = bool(Recipe.of(spec["recipe"]).compile)
        return VIT_MFU[compiled], f"measured: ViT-B/16, H200, {'torch.compile' if compiled else 'eager'}"
    return DEFAULT_MFU, "assumed"


def job_memory_bytes(fp, spec: dict, gpus: int) -> float:
    """GPU memory of one process of the job (its per-GPU batch), per the module docstring."""
    recipe = Recipe.of(spec["recipe"])
    state = fp.params * (STATE_BYTES + (DDP_BUCKET_BYTES if gpus > 1 else 0))
    train = fp.activation_bytes(math.ceil(recipe.batch_size / gpus / recipe.accumulate))
    evaluate = 2 * fp.largest * recipe.eval_batch_size
    return state + (1 + ALLOCATOR_SLACK) * max(train, evaluate) + CUDA_CONTEXT_GB * 1e9


def loader_feed(plan: Plan, spec: dict, gpus: int, rate: float) -> tuple[float, int] | None:
    """(images/s the Pillow loader gives one GPU's process, its workers) for an image job whose
    dataset decodes with Pillow (decode: pil): recipe.num_workers (auto: the study's threads
    shared by its processes, less one each) x `rate` a worker (0 workers: the process itself);
    None for other jobs (decode: device is not priced: its rate on a GPU is not measured)."""
    from ..data.splits import worker_count

    dataset = plan.datasets.get(spec["dataset"]) or {}
    if spec["model"].get("arch") != "vit" or dataset.get("decode") != "pil":  # image files, decoded by Pillow
        return None
    threads = plan.studies[spec["study"]].resources["threads"]
    workers = worker_count(Recipe.of(spec["recipe"]).num_workers, cores=threads, local_world=gpus)
    return max(workers, 1) * rate, workers


def price(job: Job, plan: Plan, gpu: Card, mfu: float | None, root: Path, loader_rate: float = LOADER_RATE) -> dict:
    """One job's row of the plan: its FLOPs, GPU-hours, wall time and memory per GPU; an image job
    at the slower of its step and its loader (`loader_feed`)."""
    from ..models.footprint import footprint

    spec, resources = job.spec, plan.studies[job.study].resources
    gpus = max(1, resources["gpu"])
    k = resources["jobs_per_gpu"] if gpus == 1 else 1
    precision, arithmetic = precision_of(spec), arithmetic_of(spec)
    fp = footprint(spec["model"], precision)
    steps = training_steps(plan, spec, root)
    recipe = Recipe.of(spec["recipe"])
    batch = recipe.batch_size
    rate, source = _mfu(spec, mfu)
    row = {"study": job.study, "job": job.name, "params": fp.params, "precision": arithmetic, "batch_size": batch,
           "gpus": gpus, "jobs_per_gpu": k, "steps": steps, "flops_per_sample": fp.flops,
           "train_flops": None if steps is None else fp.flops * batch * steps, "priced_by": "", "mfu": rate,
           "gpu_hours": None, "wall_hours": None,
           "memory_gb": job_memory_bytes(fp, spec, gpus) / 1e9, "card_memory_gb": gpu.memory_gb}
    if steps is not None:
        compute_s = fp.flops * batch / (gpu.peak_flops(arithmetic) * rate)  # one step, the GPU to itself
        if task_of(spec["task"]).launch_bound:
            step_s, how = p2_step_seconds(spec["model"], batch, compute_s, k, recipe.cuda_graph)
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
    row["attempts"], row["cannot_finish"] = attempts_needed(row["wall_hours"], runtime, fp.params,
                                                            recipe.checkpoint_minutes)
    return row


def conditioning_price(spec: dict, fp, gpu: Card) -> tuple[float, float]:
    """(GB, GPU-hours) of the variant's conditioning job on `gpu`: the float64 model, and the probe
    in the chunks that fit MEMORY_SHARE of the card (memory.probe_chunk; more than the card
    where one input alone does not fit) or the Jacobian's products where they take more
    (memory.jacobian_bytes), plus the CUDA context; its time, the longer of its
    float64 FLOPs at DEFAULT_MFU of the card's fp64 peak and its memory traffic (each input's
    probe bytes written and read once) at the card's bandwidth: each kept checkpoint (init,
    conditioning.steps, final) runs the forward pass of every probe input (a third of training's
    FLOPs), and the Jacobian's inputs add, per layer, an exact SVD of the (N*D)^2 Jacobian
    (~9 (N*D)^3) or lanczos_steps products with it (~4 forward passes of a block each)."""
    from ..models.memory import MEMORY_SHARE, jacobian_bytes, probe_bytes, probe_chunk, probe_shape

    model, cond = spec["model"], spec["conditioning"]
    tokens, heads, cols = probe_shape(model)
    layers, samples = model["depth"], cond["samples"]
    per = probe_bytes(heads, tokens, cols, layers)
    chunk = min(samples, probe_chunk(heads, tokens, cols, layers, MEMORY_SHARE * gpu.memory_gb * 1e9))
    memory = 8.0 * fp.params + max(chunk * per, jacobian_bytes(model, cond)) + CUDA_CONTEXT_GB * 1e9
    forward = fp.flops / 3 if math.isfinite(fp.flops) else math.nan
    checkpoints = 2 + len(cond.get("steps") or [])
    flops = checkpoints * samples * forward
    jac = min(cond.get("jacobian_samples", 0), samples)
    if jac:
        n = tokens * model.get("width", model.get("d_model", cols))
        one = 9.0 * n**3 if n <= cond.get("jacobian_exact_max", 0) else \
            cond.get("lanczos_steps", 1) * 4 * forward / layers
        flops += checkpoints * jac * layers * one
    traffic = checkpoints * samples * 2 * per / (gpu.memory_tbps * 1e12)
    seconds = max(flops / (gpu.peak_flops("fp64") * DEFAULT_MFU), traffic)
    return memory / 1e9, seconds / 3600


# ---------------------------------------------------------------- a job's life against its time limit

START_MINUTES = 5.0  # an attempt's start-up before its first step (imports, data, model, compile), assumed
KILL_GRACE_S = 30.0  # from a scheduler's SIGTERM to its SIGKILL: Slurm's KillWait default


def attempts_needed(wall_hours: float | None, runtime: float, params: int,
                    checkpoint: float | str | None) -> tuple[int | None, str | None]:
    """(how many runs of at most `runtime` minutes a job of `wall_hours` needs, or None; why it
    cannot finish, or None). Each attempt pays START_MINUTES; at its time limit it saves its state
    on SIGTERM (stopping.py) if the write fits in KILL_GRACE_S, else only what its last periodic
    checkpoint (recipe.checkpoint_minutes) saved survives: up to that interval is lost."""
    from ..training.resume import checkpoint_minutes, write_seconds

    if wall_hours is None:
        return None, None
    work = wall_hours * 60
    if work + START_MINUTES <= runtime:
        return 1, None
    gain = runtime - START_MINUTES  # minutes of training an attempt keeps
    if write_seconds(params) > KILL_GRACE_S:
        minutes = checkpoint_minutes(checkpoint, params)
        gain -= minutes if minutes else gain
    if gain <= 0:
        return None, (f"an attempt of {runtime} min keeps no progress (start-up ~{START_MINUTES:g} min; its "
                      f"{write_seconds(params):.0f} s state write does not fit the {KILL_GRACE_S:g} s between "
                      f"SIGTERM and SIGKILL, and the checkpoint interval is "
                      f"{checkpoint_minutes(checkpoint, params) or 'by steps only'})")
    return math.ceil(work / gain), None


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
        if b and all(v.model.get(k) == val for k, val in b.items() if k in v.model):
            return vid
    return None


def plan_cost(plan: Plan, gpu: Card, mfu: float | None = None, root: str | Path = ".",
              loader_rate: float = LOADER_RATE) -> list[StudyCost]:
    """Every job of the plan priced on `gpu`, grouped by study."""
    return [StudyCost(name, [price(j, plan, gpu, mfu, Path(root), loader_rate) for j in jobs(study)],
                      study.resources, _baseline_variant(study)) for name, study in plan.studies.items()]


def _hours(value: float | None) -> str:
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
                     "?" if flops is None else f"{flops:.3g}", _hours(c.total("gpu_hours")),
                     "?" if None in walls else _hours(max(walls)), big["job"],
                     f"{big['memory_gb']:.1f}" if k == 1 else f"{k} x {big['memory_gb']:.1f}",
                     "yes" if k * big["memory_gb"] <= gpu.memory_gb else "NO", _tries(c), *_conditioning_cells(c)])
    hours, flops = [c.total("gpu_hours") for c in costs], [c.total("train_flops") for c in costs]
    cond = [r.get("cond_hours", 0.0) for c in costs for r in c.rows]
    rows.append(["total", str(sum(int(r[1]) for r in rows)), str(sum(int(r[2]) for r in rows)), "", "", "",
                 "?" if None in flops else f"{sum(flops):.3g}", _hours(None if None in hours else sum(hours)),
                 "", "", "", "", "", "", _hours(sum(cond))])
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
    return [f"{max(r['cond_memory_gb'] for r in rows):.1f}", _hours(sum(r["cond_hours"] for r in rows))]


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
            graph = (f", replayed as one CUDA graph at 1/{P2_GRAPH_SPEEDUP:.1f} of that (measured at L1-H1-W1 only)"
                     if how.endswith("(CUDA graph)") else "")
            notes.append(f"{share}launch-bound, a step {P2_STEP_S[0] * 1e3:.1f} ms + {P2_STEP_S[1] * 1e3:.1f} ms per "
                         f"layer (measured on an H200: 169 steps/s at 1 layer, 65 at 3), each of {k} jobs on a GPU "
                         f"at {_sharing(k):.2f} of that (8 jobs: 95-103 against 134 steps/s alone){graph}.")
        elif how.startswith("loader"):
            rows = [r for r in c.rows if r["priced_by"] == how]
            need, fed = max(r["images_per_s_needed"] for r in rows), rows[0]["images_per_s_fed"]
            workers = rows[0]["loader_workers"]
            notes.append(f"{share}loader-bound: the step asks up to {need:,.0f} images/s a GPU, decode: pil gives "
                         f"{fed:,.0f} ({workers} workers x {fed / max(workers, 1):.0f} images/s, --loader-rate); "
                         "decode: device (nvJPEG on the GPU, its rate there not yet measured) is the path that could "
                         "keep the GPUs fed.")
        elif how.startswith("attention scores"):
            kernel = how.split("(")[1][:-1]
            notes.append(f"{share}attention-bound, {P2_SCORE_S[kernel] * 1e12:.0f} ps per score of the {kernel} form "
                         f"(W x heads x N^2 per layer and sample; measured on an H100), {k} jobs in turn.")
        else:
            mfu = sorted({r["mfu"] for r in c.rows if r["priced_by"] == how})
            notes.append(f"{share}FLOPs at {'/'.join(f'{m:.0%}' for m in mfu)} MFU, {how[len('FLOPs ('):-1]}.")
    return " ".join(notes)


def write_cost_csv(path: str | Path, costs: list[StudyCost]) -> None:
    import pandas as pd

    from ..io import write_csv

    write_csv(path, pd.DataFrame([r for c in costs for r in c.rows]))


# ---------------------------------------------------------------- the check before a run

MEM_ENV = "LEANER_GPU_MEM_GB"


def fit_cards(plan: Plan, where: str, env=os.environ) -> dict[str, Card]:
    """The card each GPU study's jobs will run on, where it is known: $LEANER_GPU_MEM_GB (GB of one
    GPU) for every study; else `where` is "local": the smallest CUDA device of this machine (none
    without CUDA, or with LEANER_DEVICE=cpu), "cluster": the study's `gpu_model` when it names a
    card of CARDS."""
    studies = [n for n, s in plan.studies.items() if s.resources["gpu"] >= 1]
    if not studies:
        return {}
    given = env.get(MEM_ENV)
    if given is not None:
        memory = parse_memory_gb(given)
        return {n: Card(f"the GPU of {MEM_ENV}={given}", memory, math.nan, math.nan, math.nan) for n in studies}
    if where == "local":
        found = None if (env.get("LEANER_DEVICE") or "").startswith("cpu") else local_card()
        return {n: found for n in studies} if found else {}
    return {n: CARDS[plan.studies[n].resources["gpu_model"].lower()] for n in studies
            if plan.studies[n].resources["gpu_model"].lower() in CARDS}


def parse_memory_gb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise ValueError(f"{MEM_ENV}={text}: not a GPU memory in GB (allowed: a number > 0, e.g. 80)")
    return value


def local_card() -> Card | None:
    """This machine's smallest CUDA device, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = min((torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())),
                key=lambda p: p.total_memory)
    return Card(f"this machine's {props.name}", props.total_memory / 1e9, math.nan, math.nan, math.nan)


def memory_problems(plan: Plan, cards: dict[str, Card]) -> list[str]:
    """One line per study whose jobs (or jobs_per_gpu of them together) cannot fit its card."""
    from ..models.footprint import footprint

    problems = []
    for name, gpu in cards.items():
        study = plan.studies[name]
        gpus = max(1, study.resources["gpu"])
        k = study.resources["jobs_per_gpu"] if gpus == 1 else 1
        need = {j.name: job_memory_bytes(footprint(j.spec["model"], precision_of(j.spec), flops=False), j.spec,
                                         gpus) / 1e9 for j in jobs(study)}
        worst = max(need, key=need.get)
        if need[worst] > gpu.memory_gb:
            allowed = "a smaller batch_size, more GPUs per variant (resources.gpu)" if k == 1 else \
                "a smaller batch_size"
            problems.append(f"study {name}: job {worst} needs ~{need[worst]:.0f} GB of GPU memory"
                            f"{' per GPU' if gpus > 1 else ''}, {gpu.name} has {gpu.memory_gb:g} GB "
                            f"(allowed: {allowed}, or a larger card)")
        elif k * need[worst] > gpu.memory_gb:
            problems.append(f"study {name}: {k} jobs share a GPU (jobs_per_gpu) and need ~{k * need[worst]:.0f} GB "
                            f"together (job {worst}: ~{need[worst]:.1f} GB), {gpu.name} has {gpu.memory_gb:g} GB "
                            f"(allowed: jobs_per_gpu <= {int(gpu.memory_gb // need[worst])}, a smaller batch_size, "
                            "or a larger card)")
    return problems


def fit_problems(plan: Plan, where: str, env=os.environ) -> list[str]:
    """The memory check against the cards known here, one line per problem."""
    try:
        cards = fit_cards(plan, where, env)
    except ValueError as exc:
        return [str(exc)]
    return memory_problems(plan, cards)


def check_plan(plan: Plan, where: str, gpu: Card, env=os.environ,
               root: str | Path = ".") -> tuple[list[str], list[str]]:
    """`leaner cost --check WHERE`: (what to know, one line each; problems, one line each): memory
    against the cards known here, and on a cluster each GPU job's time against its runtime, on
    its study's gpu_model where that names a card, else on `gpu` (--gpu)."""
    problems = fit_problems(plan, where, env)
    if where != "cluster" or problems:
        return [], problems
    known = fit_cards(plan, where, env)
    cards = {n: known.get(n, gpu) for n, s in plan.studies.items() if s.resources["gpu"] >= 1}
    return time_limit_lines(plan, cards, root)


def time_limit_lines(plan: Plan, cards: dict[str, Card], root: str | Path = ".") -> tuple[list[str], list[str]]:
    """`leaner cost --check cluster`'s time check: (one line per job predicted to outlast its
    study's runtime, with the attempts it needs; one line per job that cannot finish: no attempt
    keeps progress, or it needs more attempts than its study's resources.attempts allows)."""
    listed, problems = [], []
    for name, gpu in cards.items():
        study = plan.studies[name]
        runtime, allowed = study.resources["runtime"], study.resources["attempts"]
        for job in jobs(study):
            row = price(job, plan, gpu, None, Path(root))
            if row["cannot_finish"]:
                problems.append(f"study {name}: job {job.name} cannot finish: {row['cannot_finish']} (allowed: a "
                                f"longer resources.runtime, or a shorter recipe.checkpoint_minutes)")
                continue
            if row["wall_hours"] is None:
                listed.append(f"study {name}: job {job.name}: time unknown (its dataset is not prepared)")
                continue
            if row["attempts"] > 1:
                listed.append(f"study {name}: job {job.name}: ~{row['wall_hours']:.1f} h on {gpu.name} against "
                              f"runtime {runtime} min: {row['attempts']} attempts")
            if row["attempts"] > allowed:
                problems.append(f"study {name}: job {job.name} needs {row['attempts']} attempts of {runtime} min "
                                f"(~{row['wall_hours']:.1f} h on {gpu.name}), resources.attempts allows {allowed} "
                                f"(allowed: attempts >= {row['attempts']}, or a longer runtime)")
    return listed, problems


def may_know_a_card(plan: Plan, where: str, env=os.environ) -> bool:
    """Whether `fit_cards` could find a card here (cheap: no CUDA context, no model built)."""
    if not any(s.resources["gpu"] >= 1 for s in plan.studies.values()):
        return False
    if env.get(MEM_ENV) is not None:
        return True
    if where == "local":
        import torch

        return not (env.get("LEANER_DEVICE") or "").startswith("cpu") and torch.cuda.device_count() > 0
    return any(s.resources["gpu_model"].lower() in CARDS for s in plan.studies.values())
