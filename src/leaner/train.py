"""THE training loop, shared by every task.

AdamW with linear warm-up then cosine decay (per step), device picked automatically, bf16
autocast and fused attention on CUDA, deterministic on CPU for a given seed. A rolling checkpoint
in ``<out>/.resume/`` (not a declared Snakemake output, so a killed job keeps it) lets a re-run
resume where the last one stopped, bit for bit on CPU. A NaN or inf loss ends the run with status
``diverged``: a result, not a crash of the sweep.

Outputs (each written atomically, metrics.json last):
  init.safetensors    weights at initialisation
  model.safetensors   final weights
  history.csv         one row per epoch (evaluation columns every eval_every epochs)
  metrics.json        spec, parameter counts, status, final and best metrics, cost
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import random
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from . import __version__
from . import distributed
from .devices import claimed, pick_device
from .io import atomic_path, remove_stale_temps, sha256_file, write_csv, write_json
from .models import build_model, param_counts
from .step import GraphedStep, LossMeter, sync_interval
from .tasks import make_task

RESUME_DIR = ".resume"
RESUME_FILE = "state.pt"
PREVIOUS_FILE = "state.prev.pt"  # the checkpoint before the last: the fallback if the last is damaged
KEPT_DIR = "checkpoints"  # weights kept at conditioning.steps (in .resume/ until the run ends)


def kept_steps(requested: list, total_steps: int) -> list[int]:
    """The steps whose weights a run keeps for conditioning: integers are steps, numbers in (0, 1)
    fractions of the run (rounded, at least step 1); steps at or past the end are the final weights."""
    steps = {int(x) if isinstance(x, int) or float(x) >= 1 else max(1, round(float(x) * total_steps))
             for x in requested}
    return sorted(s for s in steps if 0 < s < total_steps)


def kept_name(step: int) -> str:
    return f"step{step}"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_deterministic(device: torch.device) -> None:
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def autocast_for(device: torch.device, graph_safe: bool = False):
    """bf16 autocast on CUDA, nothing on CPU (fp32 keeps CPU runs exact and deterministic).
    graph_safe: without autocast's weight-cast cache, which a CUDA graph capture must not use."""
    if device.type == "cuda":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not graph_safe)
    return contextlib.nullcontext


def lr_at(step: int, total: int, recipe: dict, steps_per_epoch: int = 1) -> float:
    """The learning rate of optimiser step `step` of `total`.

    cosine: linear warm-up over warmup_frac of the steps, then cosine to min_lr, per step.
    epoch_cosine: P2's LinearWarmupCosineAnnealingLR stepped once per epoch: epoch 0 at lr 0,
    linear to lr at the end of warm-up (warmup_frac of the epochs, rounded down), then cosine."""
    base, floor = recipe["lr"], recipe.get("min_lr", 0.0)
    if recipe.get("schedule", "cosine") == "epoch_cosine":
        epochs = max(1, math.ceil(total / steps_per_epoch))
        epoch, warmup = step // steps_per_epoch, int(recipe["warmup_frac"] * epochs)
        if epoch < warmup:
            return epoch * base / max(1, warmup - 1)
        return floor + 0.5 * (base - floor) * (1 + math.cos(math.pi * (epoch - warmup) / max(1, epochs - warmup)))
    warmup = int(round(recipe["warmup_frac"] * total))
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return floor + 0.5 * (base - floor) * (1 + math.cos(math.pi * min(progress, 1.0)))


def compile_mode(recipe: dict) -> str | None:
    """torch.compile's mode for recipe.compile: true is "default", false/null is no compile."""
    value = recipe.get("compile")
    if value is True:
        return "default"
    return value or None


def make_optimizer(model, recipe: dict, capturable: bool = False) -> torch.optim.Optimizer:
    """AdamW; no weight decay on biases, norms, position embeddings and tokens (the timm/DeiT rule)."""
    skip = set(getattr(model, "no_weight_decay", lambda: set())())
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim <= 1 or name in skip else decay).append(p)
    groups = [{"params": decay, "weight_decay": recipe["weight_decay"]},
              {"params": no_decay, "weight_decay": 0.0}]
    # fused: one kernel for all parameters (on CPU too), ~25% faster steps for small models
    # capturable: state and lr on the device, for a step captured as a CUDA graph
    return torch.optim.AdamW(groups, lr=recipe["lr"], betas=tuple(recipe["betas"]), fused=True,
                             capturable=capturable)


def save_weights(model, path: Path, spec: dict) -> None:
    """safetensors of the model; a tensor shared by two names (a tied LM head) is stored once."""
    from safetensors.torch import save_file

    tensors, seen = {}, set()
    for name, value in model.state_dict().items():
        key = (value.data_ptr(), value.shape, value.stride())
        if key in seen:
            continue
        seen.add(key)
        tensors[name] = value.detach().to("cpu").contiguous()
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={"variant": spec["variant"], "spec": json.dumps(spec, sort_keys=True)})


def load_weights(model, path: str | Path) -> None:
    """Load what save_weights wrote; names it skipped must be tied to a loaded tensor."""
    from safetensors.torch import load_file

    missing, unexpected = model.load_state_dict(load_file(str(path)), strict=False)
    state = model.state_dict()
    shared = {(v.data_ptr(), v.shape) for k, v in state.items() if k not in missing}
    untied = [k for k in missing if (state[k].data_ptr(), state[k].shape) not in shared]
    if untied or unexpected:
        raise ValueError(f"{path}: weights do not fit the model (missing {untied}, unexpected {unexpected})")


def load_pretrained(model, path: str | Path) -> list[str]:
    """Start from a pretrained body (fine-tuning): every weight of `path` whose name and shape fit,
    the output head excepted; returns the names left at their fresh initialisation."""
    from safetensors.torch import load_file

    state = model.state_dict()
    given = {k: v for k, v in load_file(str(path)).items()
             if not k.startswith("head.") and k in state and state[k].shape == v.shape}
    if not given:
        raise ValueError(f"{path}: no weight fits this model")
    model.load_state_dict(given, strict=False)
    fresh = sorted(k for k in state if k not in given)
    body = [k for k in fresh if not k.startswith("head.")]
    if body:
        raise ValueError(f"{path}: pretrained weights lack {', '.join(body[:5])} (the encoder must match)")
    return fresh


def _rng_state() -> dict:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "numpy_keys": torch.from_numpy(keys.astype(np.int64)),
             "numpy_meta": [kind, int(pos), int(has_gauss), float(cached)], "python": repr(random.getstate())}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    import ast

    torch.set_rng_state(state["torch"])
    kind, pos, has_gauss, cached = state["numpy_meta"]
    np.random.set_state((kind, state["numpy_keys"].numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(ast.literal_eval(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _rank_seed(seed: int, rank: int) -> int:
    """Each rank's own RNG stream after the shared initialisation (dropout, augmentation)."""
    return int(np.random.SeedSequence([seed, rank, 0xDD9]).generate_state(1)[0])


def _save_resume(path: Path, payload: dict) -> None:
    """Write the checkpoint atomically, keeping the one before it as state.prev.pt."""
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
        if path.exists():
            os.replace(path, path.with_name(PREVIOUS_FILE))


def _load_resume(path: Path, spec_json: str, log) -> dict | None:
    """The newest readable checkpoint of this spec: state.pt, else state.prev.pt, else None.
    Loaded as tensors only (weights_only); a damaged or foreign file is skipped with a warning."""
    for candidate in (path, path.with_name(PREVIOUS_FILE)):
        if not candidate.exists():
            continue
        try:
            state = torch.load(candidate, map_location="cpu", weights_only=True)
        except Exception as exc:  # truncated, corrupted, or carrying code
            log(f"warning: resume checkpoint {candidate} is unreadable ({exc.__class__.__name__}: "
                f"{str(exc).splitlines()[0][:200]}); trying the previous one")
            continue
        if state.get("spec") != spec_json:
            log(f"warning: resume checkpoint {candidate} belongs to a different spec; ignoring it")
            continue
        return state
    if path.parent.exists() and any(path.parent.iterdir()):
        log("warning: no usable resume checkpoint; starting from step 0")
    return None


def _versions() -> dict:
    from importlib.metadata import version

    return {"python": platform.python_version(), "torch": torch.__version__, "timm": version("timm"),
            "numpy": np.__version__, "leaner": __version__}


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def check_expected_params(spec: dict, total: int) -> None:
    exp = spec.get("expect_params")
    if exp and abs(total - exp["params"]) > exp["tolerance"]:
        raise ValueError(f"{spec['study']}/{spec['variant']}: built model has {total:,} parameters, the config "
                         f"expects {exp['params']:,} +- {exp['tolerance']:,}")


def train(spec: dict, data_path: str, out_dir: str | os.PathLike, device: str | None = None,
          threads: int | None = None, progress: bool = True, gpu_share: int | None = None) -> dict:
    """Train one variant; returns the metrics written to metrics.json.

    The device: `device` (or $LEANER_DEVICE) when forced, else what `gpu_share` asked for (see
    devices.py: 0 is the CPU). `threads`: torch's CPU threads in all, split over the processes.

    Under `torchrun` (see distributed.py) every rank calls this; rank 0 writes every output and
    returns the metrics, the other ranks return an empty dict."""
    out = Path(out_dir)
    resume_path = out / RESUME_DIR / RESUME_FILE
    started = time.time()
    local_rank = int(os.environ["LOCAL_RANK"]) if distributed.launched_by_torchrun() else None

    def log(msg: str) -> None:
        if local_rank in (None, 0):
            print(f"[{spec['study']}/{spec['variant']}] {msg}", file=sys.stderr, flush=True)

    dev = pick_device(device, gpu_share, local_rank, log=log)
    ctx = distributed.init(dev.type)
    if threads:
        torch.set_num_threads(max(1, threads // ctx.world))
    make_deterministic(dev)
    recipe = spec["recipe"]
    init_seed = recipe.get("init_seed")
    seed_everything(spec["seed"] if init_seed is None else init_seed)
    model = build_model(spec["model"])
    if spec.get("init_from"):
        fresh = load_pretrained(model, spec["init_from"])
        log(f"started from {spec['init_from']} (new: {', '.join(fresh) or 'nothing'})")
    counts = param_counts(model)
    check_expected_params(spec, counts["total"])
    if ctx.main:
        out.mkdir(parents=True, exist_ok=True)
        for stale in sum((remove_stale_temps(d) for d in (out, out / RESUME_DIR, out / RESUME_DIR / KEPT_DIR)), []):
            log(f"removed {stale.name}, left by a killed run")
        save_weights(model, out / "init.safetensors", spec)
    if ctx.active:
        seed_everything(_rank_seed(spec["seed"], ctx.rank))
        log(f"{ctx.world} processes ({ctx.backend}), each {recipe['batch_size'] // ctx.world}-"
            f"{-(-recipe['batch_size'] // ctx.world)} of a global batch of {recipe['batch_size']}")
    model.to(dev)
    net = ctx.wrap(model, dev)  # what the training step calls; `model` stays the plain module
    graphed = bool(recipe.get("cuda_graph")) and dev.type == "cuda"
    if recipe.get("cuda_graph") and not graphed:
        log("recipe.cuda_graph is for CUDA; training eagerly on the CPU")
    if graphed and ctx.active:
        raise ValueError("recipe.cuda_graph captures one process's step; it cannot run under DDP (gpu > 1)")
    mode = compile_mode(recipe)
    if mode and dev.type == "cuda":
        net = torch.compile(net, mode=mode)
    elif mode:
        log("recipe.compile is for CUDA; training eagerly on the CPU")
    task = make_task(spec, data_path, dev)
    optimizer = make_optimizer(model, recipe, capturable=graphed)
    autocast = autocast_for(dev, graph_safe=graphed)

    steps_per_epoch = task.steps_per_epoch
    total_steps = recipe["epochs"] * steps_per_epoch
    if recipe.get("max_steps"):
        total_steps = min(total_steps, recipe["max_steps"])
    n_epochs = math.ceil(total_steps / steps_per_epoch)
    keep = set(kept_steps((spec.get("conditioning") or {}).get("steps", []), total_steps))
    kept_tmp = out / RESUME_DIR / KEPT_DIR  # survives a kill with the resume state

    step, history, status, diverged_at = 0, [], "ok", None
    epoch_loss, epoch_count, elapsed_before = 0.0, 0, 0.0
    state = _load_resume(resume_path, json.dumps(spec, sort_keys=True), log)
    if state is None and ctx.main:  # weights kept by a killed run of another spec are not this run's
        shutil.rmtree(kept_tmp, ignore_errors=True)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, history = state["step"], state["history"]
        epoch_loss, epoch_count = state["epoch_loss"], state["epoch_count"]
        elapsed_before = state["elapsed_s"]
        rngs = state["rng"] if isinstance(state["rng"], list) else [state["rng"]]
        if len(rngs) == ctx.world:
            _set_rng_state(rngs[ctx.rank])
        else:
            log(f"warning: checkpoint has RNG states of {len(rngs)} process(es), this run has {ctx.world}; "
                "data order is unaffected, dropout/augmentation draws are not continued")
        log(f"resumed from step {step} of {total_steps}")
    meter = LossMeter(dev, ctx, epoch_loss, epoch_count)
    optimizer.found_inf = meter.stopped  # no update from the first non-finite loss on
    sync_every = sync_interval(recipe, dev)

    def one_step(batch, step_now) -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss, n_local = task.loss(net, batch)
        meter.add(loss, n_local, step_now)
        # weight each rank's mean by its share, so DDP's average is the global-batch mean
        (loss * (n_local * ctx.world / ctx.device_sum(n_local, dev)) if ctx.active else loss).backward()
        if recipe.get("grad_clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe["grad_clip"])
        optimizer.step()

    runner = GraphedStep(one_step, optimizer, dev) if graphed else None

    def checkpoint() -> None:
        rngs = ctx.gather(_rng_state())  # every rank takes part; rank 0 writes
        if ctx.main:
            _save_resume(resume_path, {
                "spec": json.dumps(spec, sort_keys=True), "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "step": step, "history": history,
                "epoch_loss": meter.total, "epoch_count": meter.count,
                "elapsed_s": elapsed_before + time.perf_counter() - t0, "rng": rngs})

    from tqdm import tqdm

    bar = tqdm(total=total_steps, initial=step, disable=not (progress and ctx.main), file=sys.stderr, dynamic_ncols=True,
               mininterval=1.0 if sys.stderr.isatty() else 10.0, desc=spec["variant"])
    t0 = time.perf_counter()
    samples_local, steps_here = 0, 0
    best = {"value": None, "epoch": None, "step": None}
    for row in history:
        best = _update_best(best, row, task)
    model.train()
    epoch = step // steps_per_epoch
    while step < total_steps and status == "ok":
        skip = step - epoch * steps_per_epoch
        for batch in task.train_batches(epoch, skip, ctx.rank, ctx.world):
            lr = lr_at(step, total_steps, recipe, steps_per_epoch)
            if runner is not None:
                runner.set_lr(lr)
                runner.run(batch, step)
            else:
                for group in optimizer.param_groups:
                    group["lr"] = lr
                one_step(batch, step)
            step += 1
            steps_here += 1
            samples_local += len(batch[0])
            bar.update(1)
            due = step % sync_every == 0 or step % steps_per_epoch == 0 or step >= total_steps
            if due or step % recipe["checkpoint_every"] == 0:
                diverged_at = meter.sync()
                if diverged_at is not None:  # the weights are those before the bad step's update
                    status = "diverged"
                    log(f"loss is not finite at step {diverged_at} (found at step {step - 1}): stopping, "
                        "status diverged")
                    step = diverged_at
                    break
            if step in keep and ctx.main:
                kept_tmp.mkdir(parents=True, exist_ok=True)
                save_weights(model, kept_tmp / f"{kept_name(step)}.safetensors", spec)
            if step % recipe["checkpoint_every"] == 0 and step < total_steps:
                checkpoint()
            if step >= total_steps:
                break
        epoch_done = step % steps_per_epoch == 0 or step >= total_steps or status != "ok"
        if epoch_done:  # a history row every epoch; evaluation every eval_every epochs and at the end
            last = step >= total_steps or status != "ok"
            evaluate = (epoch + 1) % recipe["eval_every"] == 0 or last
            train_loss = meter.end_epoch()
            row = None
            if ctx.main:  # rank 0 evaluates (the others wait), every rank keeps the same history
                row = {"epoch": epoch + 1, "step": step,
                       "lr": lr_at(max(step - 1, 0), total_steps, recipe, steps_per_epoch),
                       "train_loss": train_loss,
                       **(task.evaluate(model, autocast) if evaluate else {}),
                       "elapsed_s": elapsed_before + time.perf_counter() - t0}
            row = ctx.from_main(row)
            history.append(row)
            best = _update_best(best, row, task)
            if evaluate:
                bar.set_postfix({k: f"{v:.4g}" for k, v in row.items() if k.startswith(("train", "eval"))})
                log("epoch {epoch} step {step}: ".format(**row) +
                    " ".join(f"{k}={v:.4g}" for k, v in row.items() if k.startswith(("train", "eval"))))
            epoch += 1
    bar.close()
    train_time = time.perf_counter() - t0
    samples_seen = ctx.all_sum([samples_local], dev)[0]
    if not ctx.main:
        ctx.close()
        return {}

    import pandas as pd

    save_weights(model, out / "model.safetensors", spec)
    kept = _publish_kept(kept_tmp, out / KEPT_DIR, {s for s in keep if s <= step})
    final = {k: v for k, v in (history[-1] if history else {}).items() if k.startswith(("train", "eval"))}
    write_csv(out / "history.csv", pd.DataFrame(history))
    metrics = {
        "study": spec["study"], "variant": spec["variant"], "spec": spec, "seed": spec["seed"],
        "params": counts, "status": status, "diverged_at_step": diverged_at, "final": final,
        "best": {task.primary_metric: best["value"], "epoch": best["epoch"], "step": best["step"]},
        "primary_metric": task.primary_metric, "diagnostics": task.diagnostics(model), "data": task.data_info(),
        "steps": step, "total_steps": total_steps, "epochs": n_epochs,
        "wall_time_s": elapsed_before + train_time,
        "throughput_samples_per_s": samples_seen / train_time if train_time > 0 else None,
        "peak_memory_mb": _peak_memory_mb(dev), "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
        "threads": torch.get_num_threads(), "processes": ctx.world, "backend": ctx.backend,
        "versions": _versions(),
        "run": {"host": platform.node(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpu_claim": claimed(),
                "started_unix": started, "finished_unix": time.time()},
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # what later stages check before they trust the weights (a truncated or replaced file)
        "sha256": {name: sha256_file(out / name) for name in ("init.safetensors", "model.safetensors")},
        "checkpoints": kept,
    }
    write_json(out / "metrics.json", metrics)
    shutil.rmtree(out / RESUME_DIR, ignore_errors=True)
    ctx.close()
    return metrics


def _publish_kept(tmp_dir: Path, final_dir: Path, keep: set[int]) -> list[dict]:
    """Move the weights kept during training to <out>/checkpoints/ (replacing an older run's) and
    describe them for metrics.json: [{name, step, file, sha256}] in step order. `keep` holds the
    steps the run trained to: a diverged run stops before its later steps, and drops any it saved
    between the bad step and the check that found it."""
    shutil.rmtree(final_dir, ignore_errors=True)
    if tmp_dir.exists():
        os.replace(tmp_dir, final_dir)
    else:
        final_dir.mkdir(parents=True)
    wanted = {f"{kept_name(step)}.safetensors" for step in keep}
    for path in final_dir.iterdir():
        if path.name not in wanted:
            path.unlink()
    out = []
    for step in sorted(keep):
        path = final_dir / f"{kept_name(step)}.safetensors"
        if path.exists():
            out.append({"name": kept_name(step), "step": step, "file": f"{KEPT_DIR}/{path.name}",
                        "sha256": sha256_file(path)})
    return out


def _update_best(best: dict, row: dict, task) -> dict:
    value = row.get(task.primary_metric)
    if value is None or not math.isfinite(value):
        return best
    better = best["value"] is None or (value > best["value"] if task.primary_mode == "max" else value < best["value"])
    return {"value": value, "epoch": row["epoch"], "step": row["step"]} if better else best
