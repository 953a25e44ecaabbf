"""Whether each GPU study's jobs fit the card they will run on, checked at a run's start (onstart:
`leaner cost --check`): its memory, alone and k jobs sharing a GPU, and on a cluster its time:
the attempts a training job needs within the study's runtime and allows, a group of k jobs
sharing a GPU within one runtime (a group is one Slurm job: it runs again whole), each conditioning job
within its runtime. The card: $LEANER_GPU_MEM_GB (memory only), else this machine's smallest
CUDA device (local), else the study's gpu_model, else the run's default card (cluster: the
profile's gpu_model, else $LEANER_GPU, else DEFAULT_CARD), named in every line."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

from ..workflow.plan import Plan
from ..workflow.scheduling import GPU_ENV
from .cards import CARDS, MEM_ENV, Card, local_card, parse_memory_gb
from .cost import jobs, precision_of, price
from .time_limit import SIGNAL_LEAD_S, START_MINUTES

DEFAULT_CARD = "h100"  # a cluster run's card where neither its study nor its profile names one


def default_card(name: str | None) -> Card:
    """The card named (a profile's gpu_model, $LEANER_GPU, `leaner cost --gpu`) if it is one of
    CARDS, else DEFAULT_CARD's, said so in its name."""
    if name and name.lower() in CARDS:
        return CARDS[name.lower()]
    base = CARDS[DEFAULT_CARD]
    return dataclasses.replace(base, name=f"{base.name} (the default card)")


def default_card_note(name: str | None) -> str:
    """Why a cluster check fell back to the default card, and how to name another."""
    why = f"{name!r} is not a card priced here" if name else "no study or profile names a gpu_model"
    return (f"{why}; the profile's gpu_model or ${GPU_ENV} name another (allowed: {', '.join(CARDS)})")


def fit_cards(plan: Plan, where: str, env=os.environ, default: Card | None = None) -> dict[str, Card]:
    """The card each GPU study's jobs will run on, where it is known: $LEANER_GPU_MEM_GB (GB of one
    GPU) for every study; else `where` is "local": the smallest CUDA device of this machine (none
    without CUDA, or with LEANER_DEVICE=cpu), "cluster": the study's `gpu_model` when it names a
    card of CARDS, else `default`."""
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
    named = {n: CARDS.get(plan.studies[n].resources["gpu_model"].lower(), default) for n in studies}
    return {n: c for n, c in named.items() if c is not None}



def memory_problems(plan: Plan, cards: dict[str, Card]) -> list[str]:
    """One line per study whose jobs (or jobs_per_gpu of them together) cannot fit its card."""
    from ..models.footprint import footprint
    from ..models.memory import training_gpu_bytes

    problems = []
    for name, gpu in cards.items():
        study = plan.studies[name]
        gpus = max(1, study.resources["gpu"])
        k = study.resources["jobs_per_gpu"] if gpus == 1 else 1
        need = {j.name: training_gpu_bytes(footprint(j.spec.model, precision_of(j.spec), flops=False), j.spec.recipe,
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


def fit_problems(plan: Plan, where: str, env=os.environ, default: Card | None = None) -> list[str]:
    """The memory check against the cards known here, one line per problem."""
    try:
        cards = fit_cards(plan, where, env, default)
    except ValueError as exc:
        return [str(exc)]
    return memory_problems(plan, cards)


def check_plan(plan: Plan, where: str, gpu: Card, env=os.environ, root: str | Path = ".",
               grace_s: float | None = None, lead_s: float | None = None) -> tuple[list[str], list[str]]:
    """`leaner cost --check WHERE`: (what to know, one line each; problems, one line each): memory
    against the cards known here, and on a cluster each GPU job's time against its runtime (on
    its study's gpu_model where that names a card, else on `gpu`), with the stop signal `lead_s`
    before each time limit and `grace_s` from it to the SIGKILL (default: what profiles/slurm asks)."""
    default = gpu if where == "cluster" else None
    problems = fit_problems(plan, where, env, default)
    if where != "cluster" or problems:
        return [], problems
    return time_limit_lines(plan, fit_cards(plan, where, {}, default), root, grace_s, lead_s)


def time_limit_lines(plan: Plan, cards: dict[str, Card], root: str | Path = ".", grace_s: float | None = None,
                     lead_s: float | None = None) -> tuple[list[str], list[str]]:
    """`leaner cost --check cluster`'s time check: (one line per job predicted to outlast its
    study's runtime, with the attempts it needs; one line per job that cannot finish: no attempt
    keeps progress, it needs more attempts than its study's resources.attempts allows, it shares a
    GPU in a group whose runtime it outlasts (a group is one Slurm job and runs again whole), or its
    conditioning outlasts resources.conditioning_runtime)."""
    listed, problems = [], []
    for name, gpu in cards.items():
        study = plan.studies[name]
        runtime, allowed = study.resources["runtime"], study.resources["attempts"]
        cond_runtime, k = study.resources["conditioning_runtime"], study.resources["jobs_per_gpu"]
        for job in jobs(study):
            row = price(job, plan, gpu, None, Path(root), grace_s=grace_s, lead_s=lead_s)
            cond_minutes = START_MINUTES + 60 * row.get("cond_hours", 0.0) * k
            if cond_minutes > cond_runtime:
                problems.append(f"study {name}: job {job.name}'s conditioning needs ~{cond_minutes:.0f} min on "
                                f"{gpu.name} (with start-up{f', {k} at once on one GPU' if k > 1 else ''}), "
                                f"resources.conditioning_runtime is {cond_runtime} (allowed: conditioning_runtime "
                                f">= {math.ceil(cond_minutes)})")
            if row["cannot_finish"]:
                problems.append(f"study {name}: job {job.name} cannot finish: {row['cannot_finish']} (allowed: a "
                                f"longer resources.runtime, or a shorter recipe.checkpoint_minutes)")
                continue
            if row["wall_hours"] is None:
                listed.append(f"study {name}: job {job.name}: time unknown (its dataset is not prepared)")
                continue
            lead = SIGNAL_LEAD_S if lead_s is None else lead_s
            need = math.ceil(60 * row["wall_hours"] + START_MINUTES + lead / 60)  # a group's one attempt
            if row["attempts"] > 1 and k > 1:
                problems.append(f"study {name}: job {job.name} needs ~{row['wall_hours']:.1f} h on {gpu.name}, "
                                f"{k} at once on one GPU (jobs_per_gpu): more than one attempt of its group's "
                                f"runtime, {runtime} min: a group is one Slurm job and runs again whole "
                                f"(allowed: runtime >= {need}, or a smaller jobs_per_gpu)")
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
    return True  # a cluster run is checked on its studies' cards, else on the default card
