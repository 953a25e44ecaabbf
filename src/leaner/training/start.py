"""A run's start: the model at initialisation (its seeds, a pretrained body, the parameter count
checked against the config), the module the training step calls, and the saved state a resumed
run goes on from."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from ..io import remove_stale_temps
from ..models import build_model, param_counts
from ..runspec import RunSpec
from ..schema import Recipe
from .attempts import AttemptRecord
from .resume import RESUME_DIR, RunState, rank_seed, seed_everything, set_rng_state
from .step import compile_mode
from .weights import KEPT_DIR, load_pretrained, save_weights


def check_expected_params(spec: RunSpec, total: int) -> None:
    exp = spec.expect_params
    if exp and abs(total - exp["params"]) > exp["tolerance"]:
        raise ValueError(f"{spec.name}: built model has {total:,} parameters, the config "
                         f"expects {exp['params']:,} +- {exp['tolerance']:,}")


def initial_model(spec: RunSpec, out: Path, ctx, log):
    """The model at initialisation (seeded; pretrained body for fine-tuning), its parameter counts
    checked against the config, written as init.safetensors by rank 0; then each rank's own seed."""
    recipe = spec.recipe
    shared = recipe.init_seed is not None and recipe.replicates != "independent"
    seed_everything(recipe.init_seed if shared else spec.seed)  # independent replicates: the run's own
    model = build_model(spec.model)
    if spec.init_from:
        fresh = load_pretrained(model, spec.init_from)
        log(f"started from {spec.init_from} (new: {', '.join(fresh) or 'nothing'})")
    counts = param_counts(model)
    check_expected_params(spec, counts["total"])
    if ctx.main:
        out.mkdir(parents=True, exist_ok=True)
        for stale in sum((remove_stale_temps(d) for d in (out, out / RESUME_DIR, out / RESUME_DIR / KEPT_DIR)), []):
            log(f"removed {stale.name}, left by a killed run")
        save_weights(model, out / "init.safetensors", spec.raw)
    if ctx.active:
        seed_everything(rank_seed(spec.seed, ctx.rank))
        log(f"{ctx.world} processes ({ctx.backend}), each {recipe.batch_size // ctx.world}-"
            f"{-(-recipe.batch_size // ctx.world)} of a global batch of {recipe.batch_size}")
    return model, counts


def training_module(model, recipe: Recipe, dev: torch.device, ctx, log):
    """(what the training step calls: the model on `dev`, DDP-wrapped, compiled; whether the step
    is captured as a CUDA graph). `model` stays the plain module."""
    model.to(dev)
    net = ctx.wrap(model)
    graphed = bool(recipe.cuda_graph) and dev.type == "cuda"
    if recipe.cuda_graph and not graphed:
        log("recipe.cuda_graph is for CUDA; training eagerly on the CPU")
    if graphed and ctx.active:
        raise ValueError("recipe.cuda_graph captures one process's step; it cannot run under DDP (gpu > 1)")
    mode = compile_mode(recipe)
    if mode and dev.type == "cuda":
        net = torch.compile(net, mode=mode)
    elif mode:
        log("recipe.compile is for CUDA; training eagerly on the CPU")
    return net, graphed


def resume_state(spec: RunSpec, out: Path, model, optimizer, ctx, kept_tmp: Path, log,
                 attempt: int | None = None) -> RunState:
    """The saved state of this spec restored into model, optimiser and RNGs; else a fresh state
    (and the weights a killed run of another spec kept are not this run's). The attempt is
    recorded (attempts.py); one that begins where the last began, which saved nothing, is refused."""
    spec_json = spec.json
    state = RunState.load(out, spec_json, log)
    refused = None
    if ctx.main:  # an attempt that saved nothing since the last one ends the run (attempts.AttemptRecord)
        if state is None:
            shutil.rmtree(kept_tmp, ignore_errors=True)
        try:
            AttemptRecord(out / RESUME_DIR, spec_json).begin(attempt, state.step if state else 0)
        except RuntimeError as exc:
            refused = str(exc)
    if ctx.from_main(refused):
        raise RuntimeError(refused if ctx.main else "no progress since the last attempt (rank 0 says why)")
    if state is None:
        return RunState(spec_json)
    model.load_state_dict(state.model)
    optimizer.load_state_dict(state.optimizer)
    if len(state.rng) == ctx.world:
        set_rng_state(state.rng[ctx.rank], log)
    else:
        repeats = spec.recipe.repeat_aug
        order = (f"the data order changes too (repeat_aug {repeats} places each sample's copies by process count)"
                 if repeats > 1 else "the data order is unaffected")
        log(f"warning: checkpoint has RNG states of {len(state.rng)} process(es), this run has {ctx.world}; "
            f"{order}, dropout/augmentation draws are not continued")
    state.model, state.optimizer, state.rng = {}, {}, []  # loaded: not kept in memory for the whole run
    return state
