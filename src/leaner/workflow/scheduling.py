"""How a study's GPU request becomes Snakemake resources, groups and checks.

A study says `resources: {gpu: g}` (GPUs per variant) and optionally `jobs_per_gpu: k` (k of its
jobs share one GPU; needs g = 1). The GPU jobs of a variant (train, finetune, conditioning) then
declare:

  gpu        whole GPUs: g, or 0 for a shared job. The user's `--resources gpu=N` counts GPUs, so
             a shared job must not count one whole GPU against it.
  gpu_share  the same request in 1/SHARE_UNITS of a GPU (compute/devices.py): g * SHARE_UNITS, or
             SHARE_UNITS // k. Locally the Snakefile caps it at N * SHARE_UNITS, so k shared jobs
             run per GPU; `leaner train --gpu-share` picks the device from it.
  gpu_model  the Slurm GPU model of a whole-GPU job (--gpus=<model>:<g>).
  gres       for a shared job, "gpu:1" (or "gpu:<model>:1"): on a cluster the k jobs of a group
             become one allocation, and Snakemake sums integer resources over a group but keeps a
             string that all its jobs agree on, so the allocation asks for one GPU.
  nodes      1 for a job of several GPUs (its DDP processes talk over one node's NVLink/shared
             memory: --nodes=1); unset (None) otherwise, since a group would sum it.
  tasks_per_gpu  0 for every GPU job: the SLURM plugin then asks for no --ntasks-per-gpu, and the
             allocation is one task that sees all its GPUs, in which `leaner train --nproc g`
             runs one torchrun of g ranks. Without it, a `tasks` in the user's default resources
             (many cluster profiles set `tasks: 1`) becomes --ntasks-per-gpu=1: g tasks of
             --cpus-per-task each (snakemake-executor-plugin-slurm #459). Unset for a CPU job.

On a cluster the shared jobs of a study form the Snakemake group `gpu_share_group(study)`, which
spans k connected components (`--group-components <group>=k`; the Snakefile sets it from the
config unless the user gave it): one Slurm job of one GPU trains k variants at once, and measures
their conditioning. Locally Snakemake runs no groups: each job claims its seat on a GPU itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..compute.devices import SHARE_UNITS, share_of


def job_resources(resources: Mapping, max_gpus: int | None = None) -> dict:
    """The GPU resources of one job of a study with these `resources` (see the module docstring);
    `max_gpus` caps whole GPUs (conditioning uses one at most)."""
    gpus = resources["gpu"] if max_gpus is None else min(max_gpus, resources["gpu"])
    k = resources["jobs_per_gpu"] if gpus else 1
    model = resources["gpu_model"]
    if k > 1:
        return {"gpu": 0, "gpu_share": share_of(1, k), "gpu_model": "",
                "gres": f"gpu:{model}:1" if model else "gpu:1", "nodes": None, "tasks_per_gpu": 0}
    return {"gpu": gpus, "gpu_share": share_of(gpus), "gpu_model": model if gpus else "", "gres": "",
            "nodes": 1 if gpus > 1 else None, "tasks_per_gpu": 0 if gpus else None}


def gpu_share_group(study: str, resources: Mapping) -> str | None:
    """The Snakemake group of a study whose jobs share GPUs (None for the others)."""
    return f"gpu_share_{study}" if resources["gpu"] and resources["jobs_per_gpu"] > 1 else None


def group_components(studies: Mapping[str, Mapping]) -> dict[str, int]:
    """--group-components for every GPU-sharing study: {group: jobs_per_gpu}."""
    out = {}
    for study, resources in studies.items():
        group = gpu_share_group(study, resources)
        if group:
            out[group] = resources["jobs_per_gpu"]
    return out


def share_pool(gpus: int) -> int:
    """The `gpu_share` that N GPUs hold."""
    return gpus * SHARE_UNITS


def gpu_problems(studies: Mapping[str, Mapping], gpus: int | None, cores: int | None,
                 gpus_from: str = "--resources gpu") -> list[str]:
    """One line per study that this machine cannot run as asked: more GPUs per variant than it has
    (`gpus`, None: unknown), or k jobs sharing a GPU that need more cores at once than `cores`."""
    problems = []
    for study, r in studies.items():
        if gpus is not None and r["gpu"] > gpus:
            problems.append(f"study {study}: asks for {r['gpu']} GPUs per variant, but {gpus_from}={gpus} "
                            f"(allowed: resources.gpu <= {gpus}, or more GPUs)")
        k, threads = r["jobs_per_gpu"], r["threads"]
        if r["gpu"] and k > 1 and cores is not None and k * threads > cores:
            problems.append(f"study {study}: jobs_per_gpu {k} jobs of {threads} threads share a GPU, which needs "
                            f"{k * threads} cores at once, but --cores is {cores} (allowed: jobs_per_gpu * "
                            f"threads <= {cores})")
    return problems


def bf16_problems(plan, device_name: str) -> list[str]:
    """One line per GPU study of `plan` whose recipes ask for bf16, for a GPU (`device_name`) that
    cannot do it."""
    problems = []
    for name, study in plan.studies.items():
        wants = sorted({v.id for v in study.variants.values() if v.recipe.precision == "bf16"})
        if study.resources["gpu"] and wants:
            problems.append(f"study {name}: recipe.precision bf16 ({len(wants)} variant(s), e.g. {wants[0]}), but "
                            f"{device_name} does not support bf16 (allowed here: precision fp32)")
    return problems


def wanted_group_components(studies: Mapping[str, Mapping], given: Mapping[str, int]) -> dict[str, int]:
    """--group-components for the run: every GPU-sharing study's (group_components), with the
    user's own (`given`) over them."""
    return {**group_components(studies), **given}


@dataclass(frozen=True)
class CudaHere:
    """What a local run's start finds of CUDA: how many devices, and the name of the first where
    it cannot do bf16 (else None)."""

    count: int
    without_bf16: str | None


def probe_cuda() -> CudaHere:
    """The CUDA devices of this machine (imports torch: called only at a local run's start)."""
    import torch

    no_bf16 = torch.cuda.is_available() and not torch.cuda.is_bf16_supported()
    return CudaHere(torch.cuda.device_count(), torch.cuda.get_device_name(0) if no_bf16 else None)


CUDA_HERE = "the CUDA devices here"


def local_gpu_limits(plan, gpus: int | None, cores: int | None, share: int | None,
                     probe: Callable[[], CudaHere] = probe_cuda) -> tuple[dict[str, int], list[str]]:
    """At the start of a local run: (the global resources to set, the problems that stop the run).
    The GPUs are `gpus` (--resources gpu=N), else the CUDA devices found here when a study asks for
    GPUs; without GPUs, GPU jobs train on the CPU, as many at once as cores allow, and nothing is
    set. With GPUs: gpu where they were found here, and gpu_share (unless the user set it, `share`)
    to N GPUs' shares, so k jobs of a jobs_per_gpu: k study run per GPU. A study this machine
    cannot run as asked (gpu_problems), or a bf16 study on a GPU without bf16, is a problem."""
    resources = {name: study.resources for name, study in plan.studies.items()}
    limits, source, found = {}, "--resources gpu", None
    if gpus is None and any(r["gpu"] for r in resources.values()):
        found = probe()
        gpus, source = found.count or None, CUDA_HERE
        if gpus:
            limits["gpu"] = gpus
    if gpus is None:
        return {}, []
    found = found or probe()
    problems = gpu_problems(resources, gpus, cores, source)
    problems += bf16_problems(plan, found.without_bf16) if found.without_bf16 else []
    if share is None:
        limits["gpu_share"] = share_pool(gpus)
    return limits, problems


RESUMABLE_RULES = ("train", "finetune")  # their jobs keep a resume state (training/attempts.py)
RETRIED_RULES = RESUMABLE_RULES + ("conditioning",)  # retried as their study allows
CONDITIONING_TRIES = 2  # a conditioning job starts over: one more try, for a failure that may not recur


def job_retries(rule: str, attempt: int, allowed: int, out_dir: Path, inside_job: bool) -> tuple[int, str | None]:
    """(restart_times, the line that says why it stops) for a failed job of `rule` at `attempt`,
    writing into `out_dir`, of a study that allows `allowed` attempts: a training or fine-tuning
    job is not tried again where its attempt saved no step beyond where it began; a conditioning
    job gets CONDITIONING_TRIES at most. Inside a cluster job none: the submitting Snakemake
    retries."""
    from ..training.attempts import RESUME_DIR, no_progress

    if inside_job:
        return 0, None
    if rule not in RESUMABLE_RULES:
        return study_retries(min(allowed, CONDITIONING_TRIES), attempt, None)
    return study_retries(allowed, attempt, no_progress(Path(out_dir) / RESUME_DIR, attempt))


def study_retries(allowed: int, attempt: int, why_not: str | None) -> tuple[int, str | None]:
    """(restart_times for a failed job of a study that allows `allowed` attempts, now at
    `attempt`; the line that says why it stops where it is not tried again): none more where
    its attempt made no progress (`why_not`, training/attempts.no_progress) or where the
    study's attempts are spent."""
    if attempt >= allowed:
        return attempt - 1, None  # Snakemake's own message says the job failed
    if why_not:
        return attempt - 1, f"not tried again ({attempt} of {allowed} attempts): {why_not}"
    return allowed - 1, None


GPU_ENV = "LEANER_GPU"  # the card a cluster run's jobs are checked on where no study or profile names one
SKIP_PLAN_CHECK_ENV = "LEANER_SKIP_PLAN_CHECK"


def plan_check_skipped(environ: Mapping) -> bool:
    """Whether the plan check at a run's start is skipped ($LEANER_SKIP_PLAN_CHECK=1)."""
    return environ.get(SKIP_PLAN_CHECK_ENV, "").strip().lower() in ("1", "true", "yes", "on")
SIGNAL_OPTION = re.compile(r"--signal[= ]['\"]?(?:[RB]+:)?(?:SIG)?(USR1|USR2|TERM|INT|\d+)(?:@(\d+))?")


def signal_lead(slurm_extra: str | None) -> float:
    """Seconds before its time limit a job's `slurm_extra` asks Slurm to signal it (sbatch
    --signal=[B:]SIG@N; no @N: Slurm's 60), or 0 where it asks for none."""
    found = SIGNAL_OPTION.search(slurm_extra or "")
    return float(found.group(2) or 60) if found else 0.0


def cluster_check_args(train_resources: list[Mapping], env: Mapping) -> list[str]:
    """`leaner cost --check cluster`'s arguments for a cluster run whose training jobs resolved to
    `train_resources` (their resources, the profile's default and set resources applied): the
    card where no study names one (a gpu_model every job agrees on, else $LEANER_GPU), and the
    early signal's lead the jobs ask for (the least of theirs)."""
    models = {r.get("gpu_model") or "" for r in train_resources}
    gpu = models.pop() if len(models) == 1 and "" not in models else env.get(GPU_ENV)
    lead = min((signal_lead(r.get("slurm_extra")) for r in train_resources), default=None)
    return (["--gpu", gpu] if gpu else []) + ([] if lead is None else ["--signal-lead", f"{lead:g}"])
