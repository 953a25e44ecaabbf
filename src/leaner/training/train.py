"""THE training loop, shared by every task.

AdamW with linear warm-up then cosine decay (optim.py), device picked automatically, the recipe's
precision on CUDA (bf16 autocast or fp32, TF32 or not), deterministic fp32 on CPU for a given seed.
The run's state is saved every checkpoint_every steps (resume.py) so that a re-run resumes where
the last one stopped, bit for bit on CPU. The host reads the loss only at syncs (step.py). A NaN or inf loss
ends the run with status ``diverged``: a result, not a crash of the sweep. The run's start is in
start.py (seeds, initial weights, resume), its progress lines in progress.py, what metrics.json
records besides the history in metrics.py.

Outputs (each written atomically, metrics.json last):
  init.safetensors    weights at initialisation
  model.safetensors   final weights
  checkpoints/        weights at the study's conditioning.steps
  history.csv         one row per epoch (evaluation columns every eval_every epochs), rewritten at
                      each epoch, with TensorBoard event files and a heartbeat beside it (tracking.py)
  metrics.json        spec, parameter counts, status, final and best metrics, cost
"""

import math
import os
import shutil
import sys
import time
from pathlib import Path

import torch

from ..compute import distributed
from ..compute.devices import pick_device
from ..io import sha256_file, write_json
from ..provenance import claims_declared, describe
from ..runspec import RunSpec
from ..tasks.trainers import make_task
from . import finished
from .attempts import AttemptRecord
from .metrics import best_of, cost_and_provenance, log_data_events
from .optim import lr_at, make_optimizer
from .progress import budget_record, epoch_row, logger, past_budget, progress_bar
from .resume import RESUME_DIR, CheckpointClock, checkpoint_minutes, save_checkpoint
from .stall import Stalled, StallWatch, collective_timeout_min, fault_hold
from .start import initial_model, resume_state, training_module
from .step import GraphedStep, LossMeter, accumulate, autocast_for, set_precision, sync_interval
from .stopping import STOPPED_EXIT, Stopped, StopSignal, agree
from .tracking import RunRecord, starting
from .weights import KEPT_DIR, kept_name, kept_steps, publish_kept, save_weights


def train(spec: dict | RunSpec, data_path: str, out_dir: str | os.PathLike, device: str | None = None,
          threads: int | None = None, progress: bool = True, gpu_share: int | None = None,
          stop_after: int | None = None, attempt: int | None = None) -> dict:
    """Train one variant (its spec as the plan wrote it, or typed); returns the metrics written to
    metrics.json.

    SIGTERM or SIGUSR1 (a scheduler's time limit or its warning) stops the run at the next step
    boundary with its resume state saved: `stopping.Stopped` is raised (the CLI exits with
    STOPPED_EXIT) and the next call resumes there (stopping.py).

    `attempt`: Snakemake's attempt of this job (attempts.py; None outside Snakemake).

    `stop_after`: a checkpoint step (a multiple of checkpoint_every, before the end) after whose
    checkpoint the run stops as a preempted job would, with its resume state and no outputs
    (returns {}); the next call resumes there. `leaner rehearse` checks resumption with it.

    The device: `device` (or $LEANER_DEVICE) when forced, else what `gpu_share` asked for (see
    devices.py: 0 is the CPU). `threads`: torch's CPU threads in all, split over the processes.

    Under `torchrun` (see distributed.py) every rank calls this; rank 0 writes every output and
    returns the metrics, the other ranks return an empty dict."""
    spec = RunSpec.of(spec)  # typed once, here: every phase below reads the typed spec
    # the stop signals before the data loaders fork (their workers keep the handler, not die); the
    # stall watch from the start (a hung start-up is one too: stall.py)
    with StopSignal() as stop, StallWatch(_say, STOPPED_EXIT) as watch:
        run = _Run(spec, Path(out_dir), stop, watch, stop_after, attempt)
        run.set_up(data_path, device, threads, gpu_share)  # device, model, data, optimiser
        run.resume()  # the saved state of this spec, or a fresh one
        return run.train(progress)  # the epochs, then the outputs


def _say(line: str) -> None:
    print(f"leaner train: {line}", file=sys.stderr, flush=True)


class _Run:
    """One run of the loop, its phases called in order by `train`: set_up, resume, train (its epochs,
    `_train_epoch`: the steps, `_one_step`, the row, `_end_epoch`, the resume state; then `_outputs`)."""

    def __init__(self, spec: RunSpec, out: Path, stop: StopSignal, watch: StallWatch, stop_after: int | None,
                 attempt: int | None):
        self.spec, self.out, self.stop, self.watch = spec, out, stop, watch
        self.stop_after, self.attempt = stop_after, attempt
        self.keeps_finished = finished.wanted()  # a cluster job: Snakemake may still delete its outputs
        self.started = time.time()

    def set_up(self, data_path: str, device: str | None, threads: int | None, gpu_share: int | None) -> None:
        """The device and its processes, the model at initialisation, the task's data, the optimiser."""
        spec, out, stop_after = self.spec, self.out, self.stop_after
        local_rank = int(os.environ["LOCAL_RANK"]) if distributed.launched_by_torchrun() else None
        log = logger(spec, local_rank)
        dev = pick_device(device, gpu_share, local_rank, log=log)
        ctx = distributed.init(dev, collective_timeout_min())
        if ctx.main:
            starting(out)  # the heartbeat of this attempt, before data and model load
        if threads:
            torch.set_num_threads(max(1, threads // ctx.world))
        recipe = spec.recipe
        precision = set_precision(dev, recipe)
        self.log, self.dev, self.ctx, self.recipe, self.precision = log, dev, ctx, recipe, precision

        # ------------------------------------------------------------ model, data, optimiser
        model, counts = initial_model(spec, out, ctx, log)
        net, graphed = training_module(model, recipe, dev, ctx, log)
        task = make_task(spec, data_path, dev)
        if ctx.active and task.shards_evaluation:  # every rank evaluates its share of the batches
            task.share_evaluation(ctx.rank, ctx.world, ctx.gather)
        optimizer = make_optimizer(model, recipe, capturable=graphed)
        autocast = autocast_for(dev, precision["precision"], graph_safe=graphed)
        per_epoch = task.steps_per_epoch
        total = min(recipe.epochs * per_epoch, recipe.max_steps or math.inf)
        if stop_after is not None and (stop_after % recipe.checkpoint_every or not 0 < stop_after < total):
            raise ValueError(f"stop_after {stop_after}: allowed a multiple of checkpoint_every "
                             f"({recipe.checkpoint_every}) below the run's {total} steps")
        self.keep = set(kept_steps(spec.conditioning.get("steps", []), total))
        self.kept_tmp = out / RESUME_DIR / KEPT_DIR  # survives a kill with the resume state
        self.model, self.counts, self.net, self.task, self.optimizer = model, counts, net, task, optimizer
        self.autocast, self.per_epoch, self.total, self.graphed = autocast, per_epoch, total, graphed

    def resume(self) -> None:
        """The saved state restored (or a fresh one) and the loss meter."""
        recipe, counts, ctx, dev, total = self.recipe, self.counts, self.ctx, self.dev, self.total
        run = resume_state(self.spec, self.out, self.model, self.optimizer, ctx, self.kept_tmp, self.log,
                           self.attempt)
        self.attempts = AttemptRecord(self.out / RESUME_DIR, run.spec)
        step, history = run.step, run.history
        self.watch.checkpointed(step)
        self.stop.steps = step
        due = CheckpointClock(checkpoint_minutes(recipe.checkpoint_minutes, counts["total"]))
        minutes = due.seconds and due.seconds / 60
        self.log(f"{describe()}; device {dev}, {torch.get_num_threads()} threads, {ctx.world} process(es); "
                 f"{counts['total']:,} parameters; batch {recipe.batch_size}; resume state every "
                 f"{recipe.checkpoint_every} steps{f' and {minutes:.0f} min' if minutes else ''}; "
                 + (f"resumed from step {step} of {total}" if step else f"step 0 of {total}"))
        meter = LossMeter(dev, ctx, run.epoch_loss, run.epoch_count)
        self.optimizer.found_inf = meter.stopped  # no update from the first non-finite loss on
        self.sync_every = sync_interval(recipe, dev)
        self.accumulate = recipe.accumulate
        self.run_state, self.step, self.history, self.due, self.meter = run, step, history, due, meter

    def _one_step(self, batch, step_now) -> None:  # forward, backward, update
        optimizer, meter, ctx = self.optimizer, self.meter, self.ctx
        optimizer.zero_grad(set_to_none=True)
        if self.accumulate == 1:
            with self.autocast():
                loss, n_local = self.task.loss(self.net, batch)
            meter.add(loss, n_local, step_now)
            # weight each rank's mean by its share, so DDP's average is the global-batch mean
            (loss * (n_local * ctx.world / ctx.device_sum(n_local)) if ctx.active else loss).backward()
        else:
            accumulate(batch, self.accumulate, self.task, self.net, self.autocast, meter, step_now, ctx)
        if self.recipe.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe.grad_clip)
        optimizer.step()

    def train(self, progress: bool) -> dict:
        """The epochs, then the outputs; {} where the run stops at stop_after or on a rank but 0."""
        # the graphed step holds this run's step method (a local: no cycle keeps the run alive after)
        runner = GraphedStep(self._one_step, self.optimizer, self.dev) if self.graphed else None
        step, total, per_epoch, history, ctx = self.step, self.total, self.per_epoch, self.history, self.ctx
        self.bar = progress_bar(total, step, progress and ctx.main, self.spec.variant, self.log)
        self.record = RunRecord(self.out, total, step, ctx.main)  # history.csv, TensorBoard, heartbeat
        self.watch.on_exit = self._stalled_exit
        self.t0, self.samples, self.status, self.diverged_at = time.perf_counter(), 0, "ok", None
        self.over_budget = False  # recipe.wall_budget_minutes: the authors' regime, stopped at an epoch's end
        self.best = best_of(history, self.task)
        self.data_events: dict = {}  # Task.take_data_events, totalled (this attempt's: a resumed run counts from there)
        self.model.train()
        self.epoch = step // per_epoch
        try:
            if 0 < step < total and step % per_epoch == 0 and (not history or history[-1]["step"] < step):
                self._end_epoch(self.epoch - 1)  # saved at an epoch's last step, before its row: the row now
            while self.step < total and self.status == "ok" and not self.over_budget:
                if self._train_epoch(runner):
                    return {}
            self.bar.close()
            return self._outputs()
        except BaseException as exc:  # in training or writing the outputs: the heartbeat says how, with the error
            how = "stopped" if isinstance(exc, Stopped | Stalled) else "failed"
            self.record.close(exc, self.step, self.meter.mean, state=how)
            if ctx.main:
                self.attempts.end(how, f"{type(exc).__name__}: {exc}")
            raise

    def _train_epoch(self, runner: GraphedStep | None) -> bool:
        """The current epoch's steps from `step` on, then its row; True where the run stopped
        after its checkpoint at stop_after (as a preempted job would)."""
        task, ctx, recipe, optimizer = self.task, self.ctx, self.recipe, self.optimizer
        total, per_epoch, epoch, sync_every = self.total, self.per_epoch, self.epoch, self.sync_every
        batches = iter(task.train_batches(epoch, self.step - epoch * per_epoch, ctx.rank, ctx.world))
        while (batch := self._next_batch(batches)) is not None:
            lr = lr_at(self.step, total, recipe, per_epoch)
            if runner is not None:
                runner.set_lr(lr)
                runner.run(batch, self.step)
            else:
                for group in optimizer.param_groups:
                    group["lr"] = lr
                self._one_step(batch, self.step)
            self.step, self.samples = self.step + 1, self.samples + len(batch[0])
            step = self.step
            self.stop.steps = step
            self.watch.beat(step)
            self.bar.update(1)
            # a stop signal and the checkpoint clock: read at every step on one process, at the
            # syncs under DDP (where the ranks agree on them)
            halt = timed = False
            if step < total and (not ctx.active or step % sync_every == 0):
                halt, timed = agree(ctx, self.stop.received, ctx.main and self.due.passed())
            save = step < total and (halt or timed or step % recipe.checkpoint_every == 0)
            # sync: the loss sums and the divergence flag reach the host
            if step % sync_every == 0 or step % per_epoch == 0 or step >= total or save:
                self.diverged_at = diverged_at = self.meter.sync()
                self.record.beat(step, self.meter.mean)
                if diverged_at is not None:  # the weights are those before the bad step's update
                    self.status = "diverged"
                    self.log(f"loss is not finite at step {diverged_at} (found at step {step - 1}): stopping, "
                             "status diverged")
                    self.step = diverged_at
                    break
            # keep weights, checkpoint
            if step in self.keep and ctx.main:
                self.kept_tmp.mkdir(parents=True, exist_ok=True)
                save_weights(self.model, self.kept_tmp / f"{kept_name(step)}.safetensors", self.spec.raw)
            if save and self._save_state(halt):  # at an epoch's end before its row: a resume writes it
                return True
            if step >= total:
                break
        # evaluate and log the epoch (every epoch a history row; evaluation every eval_every and at the end)
        if self.step % per_epoch == 0 or self.step >= total or self.status != "ok":
            trained_s = self.run_state.elapsed_s + time.perf_counter() - self.t0
            self.over_budget = past_budget(self.recipe, self.step < total, trained_s, self.ctx)
            self._end_epoch(epoch)
            self.epoch += 1
        return False

    def _next_batch(self, batches):
        """The epoch's next batch (None at its end). A stall while waiting for it (stall.py) is at a
        step boundary: one process saves its state there before it stops."""
        self.watch.fetching = True
        try:
            fault_hold(self.step, self.run_state.step)
            return next(batches)
        except StopIteration:
            return None
        except Stalled:
            if not self.ctx.active and self.step > self.watch.saved:
                self.meter.sync()
                self._save_state(False)
            raise
        finally:
            self.watch.fetching = False

    def _stalled_exit(self, why: str) -> None:
        """The stall watch ends a process whose main thread is stuck: the heartbeat and the attempt
        say so."""
        self.record.close(Stalled(why), self.step, None, state="stopped")
        if self.ctx.main:
            self.attempts.end("stopped", why)

    def _end_epoch(self, number: int) -> None:
        """Epoch `number`'s history row (evaluated every eval_every epochs and at the end), its
        TensorBoard scalars and data events."""
        self.watch.allow("evaluation")
        step, task, ctx = self.step, self.task, self.ctx
        last = step >= self.total or self.status != "ok" or self.over_budget
        row = epoch_row(task, self.model, self.autocast, self.meter, self.recipe, number, step, self.total,
                         self.per_epoch, self.run_state.elapsed_s + time.perf_counter() - self.t0, last, ctx,
                         self.bar, self.log)
        self.history.append(row)
        log_data_events(task, ctx, self.data_events, number, self.log)
        self.record.epoch(self.history)
        self.best = best_of([row], task, self.best)

    def _save_state(self, halt: bool) -> bool:
        """Write the resume state at `step`; stop there if told to (`Stopped`) or at stop_after
        (True: return, as a preempted job would)."""
        step, ctx, stop = self.step, self.ctx, self.stop
        self.watch.allow("a checkpoint's write")
        save_checkpoint(self.out, self.run_state, self.model, self.optimizer, step, self.history, self.meter,
                        time.perf_counter() - self.t0, ctx)
        self.watch.checkpointed(step)
        self.record.checkpointed(step, self.meter.mean)
        if ctx.main:
            self.attempts.saved(step)
        self.due.reset()
        if halt:  # told to stop: the state is saved, the step in flight was finished
            self.bar.close()
            if ctx.active:  # no rank ends before rank 0's write has: torchrun would stop the others
                ctx.all_sum([0.0])
            ctx.close()
            raise Stopped(stop.name or "a signal to another rank", stop.signalled_at, step, stop.since())
        if step == self.stop_after:  # preempted right after this checkpoint
            self.bar.close()
            self.record.close()
            if ctx.main:
                self.attempts.end("stopped", f"stop_after {step}")
            ctx.close()
            return True
        return False

    def _outputs(self) -> dict:
        """The final weights, the kept checkpoints and metrics.json (rank 0; the others return {})."""
        spec, out, ctx, task, model, history, step = (self.spec, self.out, self.ctx, self.task, self.model,
                                                      self.history, self.step)
        total, per_epoch, best, precision = self.total, self.per_epoch, self.best, self.precision
        train_time = time.perf_counter() - self.t0
        samples = ctx.all_sum([self.samples])[0]
        if not ctx.main:
            ctx.close()
            return {}
        save_weights(model, out / "model.safetensors", spec.raw)
        kept = publish_kept(self.kept_tmp, out / KEPT_DIR, {s for s in self.keep if s <= step})
        metrics = {
            "study": spec.study, "variant": spec.variant, "spec": spec.raw, "seed": spec.seed,
            "params": self.counts, "status": self.status, "diverged_at_step": self.diverged_at,
            "final": {k: v for k, v in (history[-1] if history else {}).items() if k.startswith(("train", "eval"))},
            "best": {task.primary_metric: best["value"], "epoch": best["epoch"], "step": best["step"]},
            "primary_metric": task.primary_metric, "diagnostics": task.diagnostics(model),
            "data": {**task.data_info(), **({"events": self.data_events} if self.data_events else {})},
            "chance": task.chance(),
            "steps": step, "total_steps": total, "epochs": math.ceil(total / per_epoch),
            "wall_time_s": self.run_state.elapsed_s + train_time,
            "throughput_samples_per_s": samples / train_time if train_time > 0 else None,
            **precision, **cost_and_provenance(self.dev, ctx, self.started, precision["precision"]),
            # what later stages check before they trust the weights (a truncated or replaced file)
            "sha256": {name: sha256_file(out / name) for name in ("init.safetensors", "model.safetensors")},
            "checkpoints": kept,
            **budget_record(self.recipe, self.epoch if self.over_budget else None),
            "resumed_at": self.attempts.resumed_at(),  # the steps later attempts began at
            "attempts": self.attempts.end("done", step=step),  # each attempt: where it began and ended, its cost
            "claims_digest": claims_declared(spec.study),  # the study's claims as declared when it trained
            # which evaluation examples the final model gets right (a claim's bootstrap over them)
            "eval_outcomes": task.eval_outcomes(model, self.autocast),
        }
        write_json(out / "metrics.json", metrics)
        shutil.rmtree(out / RESUME_DIR, ignore_errors=True)
        if self.keeps_finished:  # a failed group or a late TIMEOUT would delete these outputs: a second name
            finished.keep(out, self.run_state.spec)
        self.record.close()
        ctx.close()
        return metrics
