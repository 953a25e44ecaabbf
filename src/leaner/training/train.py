"""THE training loop, shared by every task.

AdamW with linear warm-up then cosine decay (optim.py), device picked automatically, the recipe's
precision on CUDA (bf16 autocast or fp32, TF32 or not), deterministic fp32 on CPU for a given seed.
The run's state is saved every checkpoint_every steps (resume.py) so that a re-run resumes where
the last one stopped, bit for bit on CPU. The host reads the loss only at syncs (step.py). A NaN or inf loss
ends the run with status ``diverged``: a result, not a crash of the sweep.

Outputs (each written atomically, metrics.json last):
  init.safetensors    weights at initialisation
  model.safetensors   final weights
  checkpoints/        weights at the study's conditioning.steps
  history.csv         one row per epoch (evaluation columns every eval_every epochs), rewritten at
                      each epoch, with TensorBoard event files and a heartbeat beside it (tracking.py)
  metrics.json        spec, parameter counts, status, final and best metrics, cost
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .. import __version__
from ..compute import distributed, numerics
from ..compute.devices import claimed, pick_device
from ..data.splits import SKIPPED
from ..io import remove_stale_temps, sha256_file, write_json
from ..models import build_model, param_counts
from ..provenance import claims_declared, code_state, describe
from ..tasks.trainers import make_task
from .optim import lr_at, make_optimizer
from .resume import RESUME_DIR, RunState, checkpoint_minutes, rank_seed, rng_state, seed_everything, set_rng_state
from .step import GraphedStep, LossMeter, autocast_for, compile_mode, set_precision, sync_interval
from .stopping import Attempts, Stopped, StopSignal, agree
from .tracking import RunRecord, starting
from .weights import KEPT_DIR, kept_name, kept_steps, load_pretrained, publish_kept, save_weights


def train(spec: dict, data_path: str, out_dir: str | os.PathLike, device: str | None = None,
          threads: int | None = None, progress: bool = True, gpu_share: int | None = None,
          stop_after: int | None = None) -> dict:
    """Train one variant; returns the metrics written to metrics.json.

    SIGTERM or SIGUSR1 (a scheduler's time limit or its warning) stops the run at the next step
    boundary with its resume state saved: `stopping.Stopped` is raised (the CLI exits with
    STOPPED_EXIT) and the next call resumes there (stopping.py).

    `stop_after`: a checkpoint step (a multiple of checkpoint_every, before the end) after whose
    checkpoint the run stops as a preempted job would, with its resume state and no outputs
    (returns {}); the next call resumes there. `leaner rehearse` checks resumption with it.

    The device: `device` (or $LEANER_DEVICE) when forced, else what `gpu_share` asked for (see
    devices.py: 0 is the CPU). `threads`: torch's CPU threads in all, split over the processes.

    Under `torchrun` (see distributed.py) every rank calls this; rank 0 writes every output and
    returns the metrics, the other ranks return an empty dict."""
    with StopSignal() as stop:  # before the data loaders fork: their workers keep the handler, not die
        return _train(spec, data_path, out_dir, device, threads, progress, gpu_share, stop_after, stop)


def _train(spec: dict, data_path: str, out_dir: str | os.PathLike, device: str | None, threads: int | None,
           progress: bool, gpu_share: int | None, stop_after: int | None, stop: StopSignal) -> dict:
    out, started = Path(out_dir), time.time()
    local_rank = int(os.environ["LOCAL_RANK"]) if distributed.launched_by_torchrun() else None
    log = _logger(spec, local_rank)
    dev = pick_device(device, gpu_share, local_rank, log=log)
    ctx = distributed.init(dev)
    if ctx.main:
        starting(out)  # the heartbeat of this attempt, before data and model load
    if threads:
        torch.set_num_threads(max(1, threads // ctx.world))
    recipe = spec["recipe"]
    precision = set_precision(dev, recipe)

    # ------------------------------------------------------------ model, data, optimiser
    model, counts = _initial_model(spec, out, ctx, log)
    net, graphed = _training_module(model, recipe, dev, ctx, log)
    task = make_task(spec, data_path, dev)
    if ctx.active and task.shards_evaluation:  # every rank evaluates its share of the batches
        task.share_evaluation(ctx.rank, ctx.world, ctx.gather)
    optimizer = make_optimizer(model, recipe, capturable=graphed)
    autocast = autocast_for(dev, precision["precision"], graph_safe=graphed)
    per_epoch = task.steps_per_epoch
    total = min(recipe["epochs"] * per_epoch, recipe.get("max_steps") or math.inf)
    if stop_after is not None and (stop_after % recipe["checkpoint_every"] or not 0 < stop_after < total):
        raise ValueError(f"stop_after {stop_after}: allowed a multiple of checkpoint_every "
                         f"({recipe['checkpoint_every']}) below the run's {total} steps")
    keep = set(kept_steps((spec.get("conditioning") or {}).get("steps", []), total))
    kept_tmp = out / RESUME_DIR / KEPT_DIR  # survives a kill with the resume state

    # ------------------------------------------------------------ resume
    run = _resume(spec, out, model, optimizer, ctx, kept_tmp, log)
    step, history = run.step, run.history
    stop.steps = step
    due = _CheckpointClock(checkpoint_minutes(recipe.get("checkpoint_minutes"), counts["total"]))
    minutes = due.seconds and due.seconds / 60
    log(f"{describe()}; device {dev}, {torch.get_num_threads()} threads, {ctx.world} process(es); "
        f"{counts['total']:,} parameters; batch {recipe['batch_size']}; resume state every "
        f"{recipe['checkpoint_every']} steps{f' and {minutes:.0f} min' if minutes else ''}; "
        + (f"resumed from step {step} of {total}" if step else f"step 0 of {total}"))
    meter = LossMeter(dev, ctx, run.epoch_loss, run.epoch_count)
    optimizer.found_inf = meter.stopped  # no update from the first non-finite loss on
    sync_every = sync_interval(recipe, dev)

    accumulate = recipe["accumulate"]

    def one_step(batch, step_now) -> None:  # forward, backward, update
        optimizer.zero_grad(set_to_none=True)
        if accumulate == 1:
            with autocast():
                loss, n_local = task.loss(net, batch)
            meter.add(loss, n_local, step_now)
            # weight each rank's mean by its share, so DDP's average is the global-batch mean
            (loss * (n_local * ctx.world / ctx.device_sum(n_local)) if ctx.active else loss).backward()
        else:
            _accumulate(batch, accumulate, task, net, autocast, meter, step_now, ctx)
        if recipe.get("grad_clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe["grad_clip"])
        optimizer.step()

    runner = GraphedStep(one_step, optimizer, dev) if graphed else None

    # ------------------------------------------------------------ train
    bar = _progress(total, step, progress and ctx.main, spec["variant"], log)
    record = RunRecord(out, total, step, ctx.main)  # history.csv, TensorBoard, heartbeat
    t0, samples, status, diverged_at = time.perf_counter(), 0, "ok", None
    best = _best_of(history, task)
    data_events: dict = {}  # Task.take_data_events, totalled (this attempt's: a resumed run counts from there)
    model.train()
    epoch = step // per_epoch

    def end_epoch(number: int) -> None:
        """Epoch `number`'s history row (evaluated every eval_every epochs and at the end), its
        TensorBoard scalars and data events."""
        nonlocal best
        last = step >= total or status != "ok"
        row = _epoch_row(task, model, autocast, meter, recipe, number, step, total, per_epoch,
                         run.elapsed_s + time.perf_counter() - t0, last, ctx, bar, log)
        history.append(row)
        _log_data_events(task, ctx, data_events, number, log)
        record.epoch(history)
        best = _best_of([row], task, best)

    def save_state(halt: bool) -> bool:
        """Write the resume state at `step`; stop there if told to (`Stopped`) or at stop_after
        (True: return, as a preempted job would)."""
        _checkpoint(out, run, model, optimizer, step, history, meter, time.perf_counter() - t0, ctx)
        record.checkpointed(step, meter.mean)
        due.reset()
        if halt:  # told to stop: the state is saved, the step in flight was finished
            bar.close()
            ctx.close()
            raise Stopped(stop.name or "a signal to another rank", stop.signalled_at, step, stop.since())
        if step == stop_after:  # preempted right after this checkpoint
            bar.close()
            record.close()
            ctx.close()
            return True
        return False

    try:
        if 0 < step < total and step % per_epoch == 0 and (not history or history[-1]["step"] < step):
            end_epoch(epoch - 1)  # saved at an epoch's last step, before its row: the row now
        while step < total and status == "ok":
            for batch in task.train_batches(epoch, step - epoch * per_epoch, ctx.rank, ctx.world):
                lr = lr_at(step, total, recipe, per_epoch)
                if runner is not None:
                    runner.set_lr(lr)
                    runner.run(batch, step)
                else:
                    for group in optimizer.param_groups:
                        group["lr"] = lr
                    one_step(batch, step)
                step, samples = step + 1, samples + len(batch[0])
                stop.steps = step
                bar.update(1)
                # a stop signal and the checkpoint clock: read at every step on one process, at the
                # syncs under DDP (where the ranks agree on them)
                halt = timed = False
                if step < total and (not ctx.active or step % sync_every == 0):
                    halt, timed = agree(ctx, stop.received, ctx.main and due.passed())
                save = step < total and (halt or timed or step % recipe["checkpoint_every"] == 0)
                # sync: the loss sums and the divergence flag reach the host
                if step % sync_every == 0 or step % per_epoch == 0 or step >= total or save:
                    diverged_at = meter.sync()
                    record.beat(step, meter.mean)
                    if diverged_at is not None:  # the weights are those before the bad step's update
                        status = "diverged"
                        log(f"loss is not finite at step {diverged_at} (found at step {step - 1}): stopping, "
                            "status diverged")
                        step = diverged_at
                        break
                # keep weights, checkpoint
                if step in keep and ctx.main:
                    kept_tmp.mkdir(parents=True, exist_ok=True)
                    save_weights(model, kept_tmp / f"{kept_name(step)}.safetensors", spec)
                if save and save_state(halt):  # at an epoch's end before its row: a resume writes it
                    return {}
                if step >= total:
                    break
            # evaluate and log the epoch (every epoch a history row; evaluation every eval_every and at the end)
            if step % per_epoch == 0 or step >= total or status != "ok":
                end_epoch(epoch)
                epoch += 1
        bar.close()

        # ------------------------------------------------------------ outputs
        train_time = time.perf_counter() - t0
        samples = ctx.all_sum([samples])[0]
        if not ctx.main:
            ctx.close()
            return {}
        save_weights(model, out / "model.safetensors", spec)
        kept = publish_kept(kept_tmp, out / KEPT_DIR, {s for s in keep if s <= step})
        metrics = {
            "study": spec["study"], "variant": spec["variant"], "spec": spec, "seed": spec["seed"],
            "params": counts, "status": status, "diverged_at_step": diverged_at,
            "final": {k: v for k, v in (history[-1] if history else {}).items() if k.startswith(("train", "eval"))},
            "best": {task.primary_metric: best["value"], "epoch": best["epoch"], "step": best["step"]},
            "primary_metric": task.primary_metric, "diagnostics": task.diagnostics(model),
            "data": {**task.data_info(), **({"events": data_events} if data_events else {})},
            "chance": task.chance(),
            "steps": step, "total_steps": total, "epochs": math.ceil(total / per_epoch),
            "wall_time_s": run.elapsed_s + train_time,
            "throughput_samples_per_s": samples / train_time if train_time > 0 else None,
            **precision, **_cost_and_provenance(dev, ctx, started, precision["precision"]),
            # what later stages check before they trust the weights (a truncated or replaced file)
            "sha256": {name: sha256_file(out / name) for name in ("init.safetensors", "model.safetensors")},
            "checkpoints": kept,
            "resumed_at": Attempts(out / RESUME_DIR).resumed_at(),  # the steps later attempts began at
            "claims_digest": claims_declared(spec["study"]),  # the study's claims as declared when it trained
            # which evaluation examples the final model gets right (a claim's bootstrap over them)
            "eval_outcomes": task.eval_outcomes(model, autocast),
        }
        write_json(out / "metrics.json", metrics)
        shutil.rmtree(out / RESUME_DIR, ignore_errors=True)
        record.close()
        ctx.close()
        return metrics
    except BaseException as exc:  # in training or writing the outputs: the heartbeat says how, with the error
        record.close(exc, step, meter.mean, state="stopped" if isinstance(exc, Stopped) else "failed")
        raise


class _LineProgress:
    """Progress for a log file: one line every `every` seconds (steps, rate, time left) instead
    of a terminal bar's carriage-return frames."""

    def __init__(self, total: int, initial: int, log, every: float = 60.0):
        self.total, self.n, self.log, self.every = total, initial, log, every
        self.start_n, self.t0 = initial, time.perf_counter()
        self.last = self.t0

    def update(self, k: int = 1) -> None:
        self.n += k
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.last = now
            rate = (self.n - self.start_n) / (now - self.t0)
            left = (self.total - self.n) / rate if rate > 0 else float("nan")
            self.log(f"step {self.n}/{self.total} ({100 * self.n / self.total:.0f}%), {rate:.3g} steps/s, "
                     f"{left / 60:.1f} min left")

    def set_postfix(self, values: dict) -> None:
        pass  # the epoch lines carry the metrics

    def close(self) -> None:
        pass


def _progress(total: int, initial: int, show: bool, desc: str, log):
    """A tqdm bar on a terminal, progress lines in a log file, nothing when not shown."""
    from tqdm import tqdm

    if show and not sys.stderr.isatty():
        return _LineProgress(total, initial, log)
    return tqdm(total=total, initial=initial, disable=not show, file=sys.stderr, dynamic_ncols=True,
                mininterval=1.0, desc=desc)


def _logger(spec: dict, local_rank: int | None):
    def log(msg: str) -> None:
        if local_rank in (None, 0):
            print(f"[{spec['study']}/{spec['variant']}] {msg}", file=sys.stderr, flush=True)

    return log


def check_expected_params(spec: dict, total: int) -> None:
    exp = spec.get("expect_params")
    if exp and abs(total - exp["params"]) > exp["tolerance"]:
        raise ValueError(f"{spec['study']}/{spec['variant']}: built model has {total:,} parameters, the config "
                         f"expects {exp['params']:,} +- {exp['tolerance']:,}")


def _initial_model(spec: dict, out: Path, ctx, log):
    """The model at initialisation (seeded; pretrained body for fine-tuning), its parameter counts
    checked against the config, written as init.safetensors by rank 0; then each rank's own seed."""
    recipe = spec["recipe"]
    shared = recipe.get("init_seed") is not None and recipe.get("replicates") != "independent"
    seed_everything(recipe["init_seed"] if shared else spec["seed"])  # independent replicates: the run's own
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
        seed_everything(rank_seed(spec["seed"], ctx.rank))
        log(f"{ctx.world} processes ({ctx.backend}), each {recipe['batch_size'] // ctx.world}-"
            f"{-(-recipe['batch_size'] // ctx.world)} of a global batch of {recipe['batch_size']}")
    return model, counts


def _training_module(model, recipe: dict, dev: torch.device, ctx, log):
    """(what the training step calls: the model on `dev`, DDP-wrapped, compiled; whether the step
    is captured as a CUDA graph). `model` stays the plain module."""
    model.to(dev)
    net = ctx.wrap(model)
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
    return net, graphed


def _resume(spec: dict, out: Path, model, optimizer, ctx, kept_tmp: Path, log) -> RunState:
    """The saved state of this spec restored into model, optimiser and RNGs; else a fresh state
    (and the weights a killed run of another spec kept are not this run's). A resume at the step
    the last attempt also resumed at is refused: that attempt made no progress."""
    spec_json = json.dumps(spec, sort_keys=True)
    state = RunState.load(out, spec_json, log)
    if state is None:
        if ctx.main:
            shutil.rmtree(kept_tmp, ignore_errors=True)
        return RunState(spec_json)
    refused = None
    if ctx.main:  # an attempt that saved nothing since the last one ends the run (stopping.Attempts)
        try:
            Attempts(out / RESUME_DIR).check_and_record(state.step)
        except RuntimeError as exc:
            refused = str(exc)
    if ctx.from_main(refused):
        raise RuntimeError(refused if ctx.main else "no progress since the last attempt (rank 0 says why)")
    model.load_state_dict(state.model)
    optimizer.load_state_dict(state.optimizer)
    if len(state.rng) == ctx.world:
        set_rng_state(state.rng[ctx.rank], log)
    else:
        repeats = spec["recipe"].get("repeat_aug", 1)
        order = (f"the data order changes too (repeat_aug {repeats} places each sample's copies by process count)"
                 if repeats > 1 else "the data order is unaffected")
        log(f"warning: checkpoint has RNG states of {len(state.rng)} process(es), this run has {ctx.world}; "
            f"{order}, dropout/augmentation draws are not continued")
    state.model, state.optimizer, state.rng = {}, {}, []  # loaded: not kept in memory for the whole run
    return state


def _accumulate(batch, k: int, task, net, autocast, meter: LossMeter, step_now, ctx) -> None:
    """The gradient of one batch (this rank's share) from k micro-batches, one after the other:
    only one micro-batch's activations are alive at a time. Each micro-batch's mean loss is
    weighted by its share of the global batch's samples (DDP averages ranks): the batch's mean
    exactly where the loss is a mean over samples (ViT, P2, classification), and up to how
    masked tokens fall between micro-batches for the masked-LM loss. DDP reduces the gradients
    once, after the last micro-batch."""
    import contextlib

    from ..compute.distributed import shard

    samples = len(batch[0])
    if samples < k:
        raise ValueError(f"recipe.accumulate {k}: a batch of {samples} samples in this process cannot be cut into "
                         f"{k} micro-batches (allowed: accumulate <= batch_size / processes)")
    total = ctx.device_sum(samples) if ctx.active else samples
    for i in range(k):
        part = shard(batch, i, k)
        with autocast():
            loss, n_local = task.loss(net, part)
        meter.add(loss, n_local, step_now)
        hold = net.no_sync() if ctx.active and i < k - 1 else contextlib.nullcontext()
        with hold:
            (loss * (len(part[0]) * ctx.world / total)).backward()


class _CheckpointClock:
    """recipe.checkpoint_minutes: whether that long has passed since the resume state was last
    written (or the run started); never without it. Rank 0's clock decides for every rank (the
    loop all-reduces it), so all ranks take part in the same checkpoints."""

    def __init__(self, minutes: float | None):
        self.seconds = None if minutes is None else 60.0 * minutes
        self.reset()

    def reset(self) -> None:
        self.last = time.monotonic()

    def passed(self) -> bool:
        return self.seconds is not None and time.monotonic() - self.last >= self.seconds


def _checkpoint(out: Path, run: RunState, model, optimizer, step: int, history: list, meter: LossMeter,
                elapsed: float, ctx) -> None:
    """Save the run's state (after a sync: the meter's totals are current). Every rank takes part
    (their RNG states are gathered); rank 0 writes."""
    rngs = ctx.gather(rng_state())
    if ctx.main:
        RunState(run.spec, model.state_dict(), optimizer.state_dict(), step, history, meter.total, meter.count,
                 run.elapsed_s + elapsed, rngs).save(out)


def _epoch_row(task, model, autocast, meter: LossMeter, recipe: dict, epoch: int, step: int, total: int,
               per_epoch: int, elapsed: float, last: bool, ctx, bar, log) -> dict:
    """The epoch's history row (every rank evaluates its share of the batches, or for a task that
    cannot share, rank 0 while the others wait; every rank gets the row)."""
    evaluate = (epoch + 1) % recipe["eval_every"] == 0 or last
    train_loss = meter.end_epoch()
    scores = task.evaluate(model, autocast) if evaluate and (ctx.main or task.shards_evaluation) else {}
    row = None
    if ctx.main:
        row = {"epoch": epoch + 1, "step": step, "lr": lr_at(max(step - 1, 0), total, recipe, per_epoch),
               "train_loss": train_loss, **scores, "elapsed_s": elapsed}
    row = ctx.from_main(row)
    if evaluate:
        shown = {k: v for k, v in row.items() if k.startswith(("train", "eval"))}
        bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()})
        log(f"epoch {row['epoch']} step {row['step']}: " + " ".join(f"{k}={v:.4g}" for k, v in shown.items()))
    return row


UNREADABLE_LISTED = 100  # metrics.json names at most this many unreadable files


def _log_data_events(task, ctx, totals: dict, epoch: int, log) -> None:
    """One log line for what the data path worked around this epoch on any rank (images decoded
    on the CPU, unreadable files skipped: Task.take_data_events), added to `totals` for metrics.json."""
    merged: dict[str, list[str]] = {}
    for events in ctx.gather(task.take_data_events()):
        for what, names in events.items():
            merged.setdefault(what, []).extend(names)
    for what, names in merged.items():
        if not names:
            continue
        totals[what] = totals.get(what, 0) + len(names)
        if what == SKIPPED:
            listed = totals.setdefault("unreadable files", [])
            listed += [n for n in dict.fromkeys(names) if n not in listed][:UNREADABLE_LISTED - len(listed)]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        log(f"epoch {epoch + 1}: {len(names)} image{'s' * (len(names) > 1)} {what}: {shown}")


def _best_of(rows: list[dict], task, best: dict | None = None) -> dict:
    """The best value of the task's primary metric so far, with its epoch and step."""
    best = best or {"value": None, "epoch": None, "step": None}
    for row in rows:
        value = row.get(task.primary_metric)
        if value is None or not math.isfinite(value):
            continue
        if best["value"] is None or (value > best["value"] if task.primary_mode == "max" else value < best["value"]):
            best = {"value": value, "epoch": row["epoch"], "step": row["step"]}
    return best


def _cost_and_provenance(dev: torch.device, ctx, started: float, computed_in: str) -> dict:
    """metrics.json's record of where and how the run ran: its numerics as read back (kernels,
    BLAS branch, threads: numerics.in_effect), what it cost, the code and the host."""
    from importlib.metadata import version

    if dev.type == "cuda":
        peak, name = torch.cuda.max_memory_allocated(dev) / 2**20, torch.cuda.get_device_name(dev)
    else:
        peak, name = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, platform.processor() or "cpu"
    return {
        "peak_memory_mb": peak, "device": str(dev), "device_name": name,
        "threads": torch.get_num_threads(), "processes": ctx.world, "backend": ctx.backend,
        "numerics": numerics.in_effect(str(dev), computed_in),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "timm": version("timm"),
                     "numpy": np.__version__, "leaner": __version__},
        "code": code_state(),  # the commit that produced this run, and whether the tree differed
        "run": {"host": platform.node(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpu_claim": claimed(),
                "started_unix": started, "finished_unix": time.time()},
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
