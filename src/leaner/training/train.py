"""THE training loop, shared by every task, read top to bottom: `train` calls its phases in order.

  set_up        the device and its processes, the model at initialisation, the task's data, the
                optimiser: `Run`, what the run is made of (fixed from here on)
  resume        the saved state of this spec, or a fresh one: `State`, where the run stands (what
                a checkpoint holds of it, and how this attempt is going)
  the epochs    each step (`one_step`: forward, backward, update; the task's `loss` is the only
                task code in it), then the stop checks (a signal, the checkpoint clock), the
                sync (the loss reaches the host; a NaN or inf loss ends the run `diverged`: a
                result, not a crash of the sweep), the weights kept for conditioning and the
                checkpoint (`checkpoint`); at each epoch's end its history row (`end_epoch`:
                evaluation every eval_every epochs and at the end)
  the outputs   the final weights, the kept checkpoints and metrics.json (`write_outputs`)

What watches the loop (the stop signals, the stall watch, the progress bar, the history and
heartbeat, the attempt's record, a cluster job's finished copies) hooks in at its named points
through one list (watchers.py). AdamW with linear warm-up then cosine decay (optim.py); the
device picked automatically; the recipe's precision on CUDA (bf16 autocast or fp32, TF32 or
not), deterministic fp32 on the CPU for a given seed (step.py). The state is saved every
checkpoint_every steps (resume.py) so that a re-run resumes where the last one stopped, bit for
bit on the CPU. The host reads the loss only at syncs (LossMeter). The run's start (seeds,
initial weights, the saved state) is in start.py, what metrics.json records besides the history
in metrics.py.

Outputs (each written atomically, metrics.json last):
  init.safetensors    weights at initialisation
  model.safetensors   final weights
  checkpoints/        weights at the study's conditioning.steps
  history.csv         one row per epoch (evaluation columns every eval_every epochs), rewritten at
                      each epoch, with TensorBoard event files and a heartbeat beside it (tracking.py)
  metrics.json        spec, parameter counts, status, final and best metrics, cost
"""

import contextlib
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..compute import distributed
from ..compute.devices import pick_device
from ..io import read_json, sha256_file, write_json
from ..provenance import describe
from ..runspec import RunSpec
from ..tasks import job_modules
from ..tasks.trainers import make_task
from .attempts import AttemptRecord
from .finished import KeepFinished
from .metrics import best_of, cost_and_provenance, log_data_events
from .optim import lr_at, make_optimizer
from .progress import Bar, budget_record, logger, past_budget
from .resume import RESUME_DIR, CheckpointClock, RunState, checkpoint_minutes, save_checkpoint
from .stall import Stalled, StallWatch, collective_timeout_min
from .start import initial_model, resume_state, training_module
from .step import GraphedStep, autocast_for, set_precision, sync_interval
from .stopping import STOPPED_EXIT, Stopped, StopSignal, agree
from .tracking import RunRecord, starting
from .watchers import Watchers
from .weights import KEPT_DIR, kept_name, kept_steps, publish_kept, save_weights

NEVER = 2**62  # "no bad step yet"


def train(spec: dict | RunSpec, data_path: str, out_dir: str | os.PathLike, device: str | None = None,
          threads: int | None = None, progress: bool = True, gpu_share: int | None = None,
          stop_after: int | None = None, attempt: int | None = None, claims_digest: str | None = None) -> dict:
    """Train one variant (its spec as the plan wrote it, or typed); returns the metrics written to
    metrics.json.

    SIGTERM or SIGUSR1 (a scheduler's time limit or its warning) stops the run at the next step
    boundary with its resume state saved: `stopping.Stopped` is raised (the CLI exits with
    STOPPED_EXIT) and the next call resumes there (stopping.py).

    `attempt`: Snakemake's attempt of this job (attempts.py; None outside Snakemake).
    `claims_digest`: the study's claims as declared when it trains (its declared.json; recorded).

    `stop_after`: a checkpoint step (a multiple of checkpoint_every, before the end) after whose
    checkpoint the run stops as a preempted job would, with its resume state and no outputs
    (returns {}); the next call resumes there. `leaner rehearse` checks resumption with it.

    The device: `device` (or $LEANER_DEVICE) when forced, else what `gpu_share` asked for (see
    devices.py: 0 is the CPU). `threads`: torch's CPU threads in all, split over the processes.

    Under `torchrun` (see distributed.py) every rank calls this; rank 0 writes every output and
    returns the metrics, the other ranks return an empty dict."""
    spec, started = RunSpec.of(spec), time.time()  # typed once, here: every phase below reads the typed spec
    # the stop signals before the data loaders fork (their workers keep the handler, not die); the
    # stall watch from the start (a hung start-up is one too: stall.py)
    with StopSignal() as stop, StallWatch(_say, STOPPED_EXIT) as stall:
        run = set_up(spec, Path(out_dir), data_path, device, threads, gpu_share, stop_after, started, stop, stall)
        state = resume(run, attempt)
        main = run.ctx.main
        watchers = Watchers(stop, stall, Bar(run.total, state.step, progress and main, spec.variant, run.log),
                            RunRecord(run.out, run.total, state.step, main), run.attempts,
                            KeepFinished(spec.json) if main else None)
        watchers.started(state.step)
        # the stall watch ends a process whose main thread is stuck: the heartbeat and the attempt say so
        stall.on_exit = lambda why: watchers.ended("stopped", why, state.step, None, Stalled(why))
        try:
            if epochs(run, state, watchers):
                return {}  # stopped after its checkpoint at stop_after, as a preempted job would
            return write_outputs(run, state, watchers, claims_digest)
        except BaseException as exc:  # in training or writing the outputs: the heartbeat says how, with the error
            how = "stopped" if isinstance(exc, Stopped | Stalled) else "failed"
            watchers.ended(how, f"{type(exc).__name__}: {exc}", state.step, state.meter.mean, exc)
            raise
        finally:
            run.task.close()  # its loader's workers and read-ahead thread


def _say(line: str) -> None:
    print(f"leaner train: {line}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------- set-up

@dataclass(frozen=True)
class Run:
    """What one run is made of: fixed from its set-up on."""

    spec: RunSpec
    out: Path
    log: Callable[[str], None]
    dev: torch.device
    ctx: distributed.Context
    precision: dict  # what it computes in, for metrics.json
    model: torch.nn.Module  # the plain module (its weights are saved)
    counts: dict  # its parameter counts
    net: torch.nn.Module  # what the step calls: on the device, DDP-wrapped, compiled
    graphed: bool  # the step replayed as one CUDA graph
    task: object
    optimizer: torch.optim.Optimizer
    autocast: Callable
    per_epoch: int
    total: int
    sync_every: int
    keep: frozenset  # the steps whose weights conditioning reads
    stop_after: int | None
    started: float
    stop: StopSignal  # what the loop asks of its watchers: a stop signal came,
    stall: StallWatch  # it waits for a batch (a stall there is at a step boundary),
    attempts: AttemptRecord | None  # this attempt's record (rank 0's)
    modules: tuple[str, ...]  # what it loads by name: its task's and its dataset kind's (tasks.job_modules)


def set_up(spec: RunSpec, out: Path, data_path: str, device: str | None, threads: int | None,
           gpu_share: int | None, stop_after: int | None, started: float, stop: StopSignal,
           stall: StallWatch) -> Run:
    """The device and its processes, the model at initialisation, the task's data, the optimiser."""
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
    model, counts = initial_model(spec, out, ctx, log)
    net, graphed = training_module(model, recipe, dev, ctx, log)
    task = make_task(spec, data_path, dev)
    if ctx.active and task.shards_evaluation:  # every rank evaluates its share of the batches
        task.share_evaluation(ctx.rank, ctx.world, ctx.gather)
    optimizer = make_optimizer(model, recipe, capturable=graphed)
    per_epoch = task.steps_per_epoch
    total = min(recipe.epochs * per_epoch, recipe.max_steps or math.inf)
    if stop_after is not None and (stop_after % recipe.checkpoint_every or not 0 < stop_after < total):
        raise ValueError(f"stop_after {stop_after}: allowed a multiple of checkpoint_every "
                         f"({recipe.checkpoint_every}) below the run's {total} steps")
    return Run(spec, out, log, dev, ctx, precision, model, counts, net, graphed, task, optimizer,
               autocast_for(dev, precision["precision"], graph_safe=graphed), per_epoch, total,
               sync_interval(recipe, dev), frozenset(kept_steps(spec.conditioning.get("steps", []), total)),
               stop_after, started, stop, stall, AttemptRecord(out / RESUME_DIR, spec.json) if ctx.main else None,
               job_modules(spec.task, read_json(data_path)["kind"]))


def kept_folder(run: Run) -> Path:
    """Where the weights kept for conditioning wait until the run ends (a kill keeps them with the
    resume state)."""
    return run.out / RESUME_DIR / KEPT_DIR


# ---------------------------------------------------------------------------------------- resume

@dataclass
class State:
    """Where the run stands: what a checkpoint holds of it (`saved`: its spec and the training
    time of the attempts before this one; the step, the history, the epoch's loss sums in the
    meter) and how this attempt is going."""

    saved: RunState
    step: int
    history: list[dict]
    meter: "LossMeter"
    due: CheckpointClock  # recipe.checkpoint_minutes since the last save
    t0: float = 0.0  # when this attempt's training began (epochs), on time.perf_counter's clock
    samples: int = 0  # trained on in this attempt
    status: str = "ok"  # ok, or diverged
    diverged_at: int | None = None
    over_budget: bool = False  # recipe.wall_budget_minutes passed at an epoch's end: the authors' regime
    data_events: dict = field(default_factory=dict)  # Task.take_data_events of this attempt, totalled

    def trained_s(self) -> float:
        """Training time of every attempt so far."""
        return self.saved.elapsed_s + time.perf_counter() - self.t0


def resume(run: Run, attempt: int | None) -> State:
    """The saved state of this spec restored into the model, the optimiser and the RNGs (or a fresh
    one), with this attempt recorded (start.resume_state)."""
    recipe, ctx = run.spec.recipe, run.ctx
    saved = resume_state(run.spec, run.out, run.model, run.optimizer, ctx, kept_folder(run), run.log, attempt)
    due = CheckpointClock(checkpoint_minutes(recipe.checkpoint_minutes, run.counts["total"]))
    minutes = due.seconds and due.seconds / 60
    run.log(f"{describe()}; device {run.dev}, {torch.get_num_threads()} threads, {ctx.world} process(es); "
            f"{run.counts['total']:,} parameters; batch {recipe.batch_size}; resume state every "
            f"{recipe.checkpoint_every} steps{f' and {minutes:.0f} min' if minutes else ''}; "
            + (f"resumed from step {saved.step} of {run.total}" if saved.step else f"step 0 of {run.total}"))
    meter = LossMeter(run.dev, ctx, saved.epoch_loss, saved.epoch_count)
    run.optimizer.found_inf = meter.stopped  # no update from the first non-finite loss on
    return State(saved, saved.step, saved.history, meter, due)


# ---------------------------------------------------------------------------------------- one step

def one_step(run: Run, meter: "LossMeter", batch, step_now) -> None:
    """Forward, backward, update: the task's loss on the batch (this rank's share), its gradient
    (recipe.accumulate: from micro-batches), clipped, and AdamW's step."""
    optimizer, ctx = run.optimizer, run.ctx
    optimizer.zero_grad(set_to_none=True)
    if run.spec.recipe.accumulate == 1:
        with run.autocast():
            loss, n_local = run.task.loss(run.net, batch)
        meter.add(loss, n_local, step_now)
        # each rank's mean weighted by its share, so DDP's average is the global-batch mean
        (loss * (n_local * ctx.world / ctx.device_sum(n_local)) if ctx.active else loss).backward()
    else:
        _accumulate(run, meter, batch, step_now)
    if run.spec.recipe.grad_clip:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.spec.recipe.grad_clip)
    optimizer.step()


def _accumulate(run: Run, meter: "LossMeter", batch, step_now) -> None:
    """The gradient of one batch (this rank's share) from k micro-batches, one after the other:
    only one micro-batch's activations are alive at a time. Each micro-batch's mean loss is
    weighted by its share of the global batch's samples (DDP averages ranks): the batch's mean
    exactly where the loss is a mean over samples (ViT, P2, classification), and up to how
    masked tokens fall between micro-batches for the masked-LM loss. DDP reduces the gradients
    once, after the last micro-batch."""
    ctx, k, net = run.ctx, run.spec.recipe.accumulate, run.net
    samples = len(batch[0])
    if samples < k:
        raise ValueError(f"recipe.accumulate {k}: a batch of {samples} samples in this process cannot be cut into "
                         f"{k} micro-batches (allowed: accumulate <= batch_size / processes)")
    total = ctx.device_sum(samples) if ctx.active else samples
    for i in range(k):
        part = distributed.shard(batch, i, k)
        with run.autocast():
            loss, n_local = run.task.loss(net, part)
        meter.add(loss, n_local, step_now)
        hold = net.no_sync() if ctx.active and i < k - 1 else contextlib.nullcontext()
        with hold:
            (loss * (len(part[0]) * ctx.world / total)).backward()


class LossMeter:
    """The epoch's training loss and the first non-finite loss, kept on the device.

    `add` is device ops only; `sync` (every rank calls it at the same steps) moves the sums since
    the last sync to the host, summed over ranks, and returns the first bad step or None. From the
    first bad step on, `stopped` (the fused AdamW's `found_inf`) makes every optimiser step a
    no-op inside the kernel, so the run ends `diverged` at that step with its weights, however
    late the host learns of it. A loss counts only while the run has not stopped, so the epoch
    mean is that of the steps that trained. On the CPU a sync costs nothing and comes every step.
    """

    def __init__(self, device: torch.device, ctx, total: float = 0.0, count: int = 0):
        self.ctx, self.total, self.count = ctx, total, count
        self.pending = torch.zeros(2, dtype=torch.float64, device=device)  # loss x n, n since the last sync
        self.first_bad = torch.full((), NEVER, dtype=torch.int64, device=device)
        self.stopped = torch.zeros((), dtype=torch.float32, device=device)  # the optimiser's found_inf

    def add(self, loss: torch.Tensor, n: int, step: torch.Tensor | int) -> None:
        loss = loss.detach()
        finite = torch.isfinite(loss)
        live = finite & (self.stopped == 0)
        self.pending[0] += torch.where(live, loss.double() * n, 0.0)
        self.pending[1] += live.double() * n
        self.first_bad.copy_(torch.minimum(self.first_bad, torch.where(finite, NEVER, step)))
        self.stopped.copy_(torch.maximum(self.stopped, (~finite).float()))
        if self.ctx.active:  # every rank skips the update once any rank saw a bad loss
            import torch.distributed as dist

            dist.all_reduce(self.stopped, op=dist.ReduceOp.MAX)

    def sync(self) -> int | None:
        """Fold the device sums into the host totals; the first bad step (all ranks agree) or None."""
        if self.ctx.active:
            import torch.distributed as dist

            dist.all_reduce(self.pending)
            dist.all_reduce(self.first_bad, op=dist.ReduceOp.MIN)
        loss_sum, count = self.pending.tolist()
        self.pending.zero_()
        self.total += loss_sum
        self.count += int(count)
        bad = int(self.first_bad)
        return None if bad == NEVER else bad

    @property
    def mean(self) -> float | None:
        """The epoch's mean loss up to the last sync (None before any)."""
        return self.total / self.count if self.count else None

    def end_epoch(self) -> float:
        """The epoch's mean loss (call after a sync); resets the totals."""
        mean = self.total / self.count if self.count else float("nan")
        self.total, self.count = 0.0, 0
        return mean


# ---------------------------------------------------------------------------------------- the epochs

def epochs(run: Run, state: State, watchers: Watchers) -> bool:
    """Every epoch from the state's step to the end (or the first bad step, or the wall budget);
    True where the run stopped after its checkpoint at stop_after."""
    # the graphed step holds this run's step (a closure: no cycle keeps the run alive after)
    graph = GraphedStep(lambda batch, step: one_step(run, state.meter, batch, step), run.optimizer,
                        run.dev) if run.graphed else None
    run.model.train()
    state.t0 = time.perf_counter()
    step, per_epoch = state.step, run.per_epoch
    if 0 < step < run.total and step % per_epoch == 0 and (not state.history or state.history[-1]["step"] < step):
        end_epoch(run, state, watchers, step // per_epoch - 1)  # saved at an epoch's last step, before its row
    while state.step < run.total and state.status == "ok" and not state.over_budget:
        if _epoch(run, state, watchers, graph):
            return True
    return False


def _epoch(run: Run, state: State, watchers: Watchers, graph: GraphedStep | None) -> bool:
    """The current epoch's steps from the state's step on, then its row; True where the run stopped
    after its checkpoint at stop_after."""
    ctx, recipe, total, per_epoch = run.ctx, run.spec.recipe, run.total, run.per_epoch
    epoch = state.step // per_epoch
    batches = iter(run.task.train_batches(epoch, state.step - epoch * per_epoch, ctx.rank, ctx.world))
    while (batch := _next_batch(run, state, watchers, batches)) is not None:
        lr = lr_at(state.step, total, recipe, per_epoch)
        if graph is not None:
            graph.set_lr(lr)
            graph.run(batch, state.step)
        else:
            for group in run.optimizer.param_groups:
                group["lr"] = lr
            one_step(run, state.meter, batch, state.step)
        state.step, state.samples = state.step + 1, state.samples + len(batch[0])
        step = state.step
        watchers.stepped(step)
        # a stop signal and the checkpoint clock: read at every step on one process, at the syncs
        # under DDP (where the ranks agree on them)
        halt = timed = False
        if step < total and (not ctx.active or step % run.sync_every == 0):
            halt, timed = agree(ctx, run.stop.received, ctx.main and state.due.passed())
        save = step < total and (halt or timed or step % recipe.checkpoint_every == 0)
        # sync: the loss sums and the divergence flag reach the host
        if step % run.sync_every == 0 or step % per_epoch == 0 or step >= total or save:
            state.diverged_at = state.meter.sync()
            watchers.synced(step, state.meter.mean)
            if state.diverged_at is not None:  # the weights are those before the bad step's update
                run.log(f"loss is not finite at step {state.diverged_at} (found at step {step - 1}): stopping, "
                        "status diverged")
                state.status, state.step = "diverged", state.diverged_at
                break
        if step in run.keep and ctx.main:  # the weights conditioning reads
            kept_folder(run).mkdir(parents=True, exist_ok=True)
            save_weights(run.model, kept_folder(run) / f"{kept_name(step)}.safetensors", run.spec.raw)
        if save and checkpoint(run, state, watchers, halt):  # at an epoch's end before its row: a resume writes it
            return True
        if step >= total:
            break
    if state.step % per_epoch == 0 or state.step >= total or state.status != "ok":
        state.over_budget = past_budget(recipe, state.step < total, state.trained_s(), ctx)
        end_epoch(run, state, watchers, epoch)
    return False


def _next_batch(run: Run, state: State, watchers: Watchers, batches):
    """The epoch's next batch (None at its end). A stall while waiting for it (stall.py) is at a
    step boundary: one process saves its state there before it stops."""
    stall = run.stall
    stall.fetching = True
    try:
        return next(batches)
    except StopIteration:
        return None
    except Stalled:
        if not run.ctx.active and state.step > stall.saved:
            state.meter.sync()
            checkpoint(run, state, watchers, False)
        raise
    finally:
        stall.fetching = False


def end_epoch(run: Run, state: State, watchers: Watchers, number: int) -> None:
    """Epoch `number`'s history row: the training loss, and evaluated every eval_every epochs and
    at the end (every rank its share of the batches, or for a task that cannot share, rank 0 while
    the others wait; every rank gets the row); the data path's events of the epoch."""
    watchers.phase("evaluation")
    task, ctx, recipe, step = run.task, run.ctx, run.spec.recipe, state.step
    last = step >= run.total or state.status != "ok" or state.over_budget
    evaluate = (number + 1) % recipe.eval_every == 0 or last
    train_loss = state.meter.end_epoch()
    scores = task.evaluate(run.model, run.autocast) if evaluate and (ctx.main or task.shards_evaluation) else {}
    row = None
    if ctx.main:
        row = {"epoch": number + 1, "step": step, "lr": lr_at(max(step - 1, 0), run.total, recipe, run.per_epoch),
               "train_loss": train_loss, **scores, "elapsed_s": state.trained_s()}
    row = ctx.from_main(row)
    if evaluate:
        run.log(f"epoch {row['epoch']} step {row['step']}: " + " ".join(
            f"{k}={v:.4g}" for k, v in row.items() if k.startswith(("train", "eval"))))
    state.history.append(row)
    log_data_events(task, ctx, state.data_events, number, run.log)
    watchers.epoch(row, state.history)


def checkpoint(run: Run, state: State, watchers: Watchers, halt: bool) -> bool:
    """Write the resume state at the state's step; stop there if told to (`Stopped`), or at
    stop_after (True: return, as a preempted job would)."""
    ctx, step = run.ctx, state.step
    watchers.phase("a checkpoint's write")
    save_checkpoint(run.out, state.saved, run.model, run.optimizer, step, state.history, state.meter,
                    time.perf_counter() - state.t0, ctx)
    watchers.checkpointed(step, state.meter.mean)
    state.due.reset()
    if halt:  # told to stop: the state is saved, the step in flight was finished
        if ctx.active:  # no rank ends before rank 0's write has: torchrun would stop the others
            ctx.all_sum([0.0])
        ctx.close()
        stop = run.stop
        raise Stopped(stop.name or "a signal to another rank", stop.signalled_at, step, stop.since())
    if step == run.stop_after:  # preempted right after this checkpoint
        watchers.ended("stopped", f"stop_after {step}", step, state.meter.mean, None)
        ctx.close()
        return True
    return False


# ---------------------------------------------------------------------------------------- the outputs

def write_outputs(run: Run, state: State, watchers: Watchers, claims_digest: str | None) -> dict:
    """The final weights, the kept checkpoints and metrics.json (rank 0; the others return {})."""
    spec, out, ctx, task, model, history, step = run.spec, run.out, run.ctx, run.task, run.model, state.history, \
        state.step
    train_time = time.perf_counter() - state.t0
    samples = ctx.all_sum([state.samples])[0]
    if not ctx.main:
        ctx.close()
        return {}
    save_weights(model, out / "model.safetensors", spec.raw)
    kept = publish_kept(kept_folder(run), out / KEPT_DIR, {s for s in run.keep if s <= step})
    watchers.ended("done", None, step, state.meter.mean, None)  # the attempt's record, with its cost
    attempts, best = run.attempts, best_of(history, task)
    metrics = {
        "study": spec.study, "variant": spec.variant, "spec": spec.raw, "seed": spec.seed,
        "params": run.counts, "status": state.status, "diverged_at_step": state.diverged_at,
        "final": {k: v for k, v in (history[-1] if history else {}).items() if k.startswith(("train", "eval"))},
        "best": {task.primary_metric: best["value"], "epoch": best["epoch"], "step": best["step"]},
        "primary_metric": task.primary_metric, "diagnostics": task.diagnostics(model),
        "data": {**task.data_info(), **({"events": state.data_events} if state.data_events else {})},
        "chance": task.chance(),
        "steps": step, "total_steps": run.total, "epochs": math.ceil(run.total / run.per_epoch),
        "wall_time_s": state.saved.elapsed_s + train_time,
        "throughput_samples_per_s": samples / train_time if train_time > 0 else None,
        **run.precision, **cost_and_provenance(run.dev, ctx, run.started, run.precision["precision"], run.modules),
        # what later stages check before they trust the weights (a truncated or replaced file)
        "sha256": {name: sha256_file(out / name) for name in ("init.safetensors", "model.safetensors")},
        "checkpoints": kept,
        **budget_record(spec.recipe, history[-1]["epoch"] if state.over_budget else None),
        "resumed_at": attempts.resumed_at(),  # the steps later attempts began at
        "attempts": attempts.records(),  # each attempt: where it began and ended, its cost
        "claims_digest": claims_digest,  # the study's claims as declared when it trained
        # which evaluation examples the final model gets right (a claim's bootstrap over them)
        "eval_outcomes": task.eval_outcomes(model, run.autocast),
    }
    write_json(out / "metrics.json", metrics)
    shutil.rmtree(out / RESUME_DIR, ignore_errors=True)
    watchers.finished(out)  # the heartbeat removed; a cluster job's second name for its outputs
    ctx.close()
    return metrics
