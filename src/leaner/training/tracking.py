"""What a training job shows while it runs, for people and for `leaner status`.

In the variant's folder, by the main process:
  history.csv       rewritten (atomically) at every epoch: the curve so far, readable mid-run
  events.out.tfevents.*   TensorBoard's own event files: every history column against the step
                    (`tensorboard --logdir results/`); a resumed run drops the events after its
                    resume step, so the curve has no doubled segment
  progress.json     the heartbeat: state, step, last loss, the last checkpoint's step, host, pid,
                    when it was written; every `every` seconds at a sync, at each epoch and
                    checkpoint, and when the run fails (removed when it ends: metrics.json)

And by the summary stage, once the study's variants are done (write_hparams):
  events.out.tfevents.*.hparams   TensorBoard's HParams for the run (depth, heads, width,
                    protocols, parameters, seed, ...) with its final metric and kappa, and kappa
                    at every kept checkpoint (kappa/<matrix>), so runs sort and filter there
"""

from __future__ import annotations

import math
import os
import platform
import time
from pathlib import Path

from ..io import read_json, write_csv, write_json
from .watchers import Watcher

PROGRESS_FILE = "progress.json"
HEARTBEAT_S = 30.0


def tag(column: str) -> str:
    """A history column's TensorBoard tag: train_loss -> train/loss, eval_acc -> eval/acc, lr -> lr."""
    head, _, rest = column.partition("_")
    return f"{head}/{rest}" if head in ("train", "eval") and rest else column


class RunRecord(Watcher):
    """History, TensorBoard events and the heartbeat of one training run (a no-op when not `main`);
    a watcher of the loop."""

    def __init__(self, out: Path, total: int, start_step: int, main: bool, every: float = HEARTBEAT_S):
        self.out, self.total, self.main, self.every = Path(out), total, main, every
        self.started_unix, self.last_beat, self.writer = time.time(), -math.inf, None
        self.checkpoint_step = start_step or None
        if main:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: events an earlier attempt wrote from this step on are superseded (all of
            # them when this run starts at step 0)
            self.writer = SummaryWriter(log_dir=str(self.out), purge_step=start_step, flush_secs=60)
            self.beat(start_step, None, force=True)

    def synced(self, step: int, loss: float | None) -> None:
        self.beat(step, loss)

    def epoch(self, row: dict, history: list[dict]) -> None:
        """The epoch's row: history.csv rewritten whole, its numbers to TensorBoard, a heartbeat."""
        if not self.main:
            return
        import pandas as pd

        write_csv(self.out / "history.csv", pd.DataFrame(history))
        for column, value in row.items():
            if column not in ("epoch", "step", "elapsed_s") and isinstance(value, int | float) and math.isfinite(value):
                self.writer.add_scalar(tag(column), value, row["step"])
        self.writer.flush()
        self.beat(row["step"], row.get("train_loss"), force=True)

    def checkpointed(self, step: int, loss: float | None) -> None:
        """The resume state now holds `step`: a re-run would start there."""
        self.checkpoint_step = step
        self.beat(step, loss, force=True)

    def ended(self, how, why, step, loss, error) -> None:
        """Stopped or failed: the heartbeat says so, with the error (stop_after, which has none: it
        is removed); done: it stays until the outputs are written (`finished`)."""
        if how == "done":
            return
        if error is None:
            self.close()
        else:
            self.close(error, step, loss, state=how)

    def finished(self, out: Path) -> None:
        self.close()

    def beat(self, step: int, loss: float | None, state: str = "running", force: bool = False,
             detail: str | None = None) -> None:
        """Write progress.json, at most every `every` seconds unless forced."""
        now = time.time()
        if not self.main or (not force and now - self.last_beat < self.every):
            return
        self.last_beat = now
        _write_beat(self.out, state, step, self.total, loss, self.checkpoint_step, detail, self.started_unix, now)

    def close(self, failure: BaseException | None = None, step: int = 0, loss: float | None = None,
              state: str = "failed") -> None:
        """The run ended: the heartbeat is removed (metrics.json says how it ended), or on an
        exception it says `state` (failed; stopped: on a signal, resumable) with the error."""
        if not self.main:
            return
        if self.writer is not None:
            self.writer.close()
        if failure is None:
            (self.out / PROGRESS_FILE).unlink(missing_ok=True)
        else:
            self.beat(step, loss, state=state, force=True, detail=f"{type(failure).__name__}: {failure}"[:300])


HPARAMS_SUFFIX = ".hparams"


def write_hparams(folder: Path, hparams: dict, metrics: dict, kappa: list[tuple[str, int, float]]) -> None:
    """One run's TensorBoard HParams entry, in its folder beside its curves (one run to
    TensorBoard): `hparams` (numbers, strings, booleans), `metrics` (tag -> value, shown as the
    HParams dashboard's columns) and kappa/<matrix> at each checkpoint's step. Written again, the
    previous entry is replaced; non-finite values are left out."""
    from torch.utils.tensorboard.summary import hparams as hparams_summary
    from torch.utils.tensorboard.summary import scalar
    from torch.utils.tensorboard.writer import FileWriter

    folder = Path(folder)
    for old in folder.glob(f"events.out.tfevents.*{HPARAMS_SUFFIX}"):
        old.unlink()
    metrics = {tag: float(v) for tag, v in metrics.items() if v is not None and math.isfinite(v)}
    writer = FileWriter(str(folder), filename_suffix=HPARAMS_SUFFIX)
    for summary in hparams_summary(hparams, metrics):
        writer.add_summary(summary)
    for tag, value in metrics.items():
        writer.add_summary(scalar(tag, value), 0)
    # in step order across matrices: TensorBoard drops an event whose step is below the last one read
    for matrix, step, value in sorted(kappa, key=lambda k: k[1]):
        if math.isfinite(value):
            writer.add_summary(scalar(f"kappa/{matrix}", value), step)
    writer.close()


def _write_beat(out: Path, state: str, step: int | None, total: int | None, loss: float | None,
                checkpoint_step: int | None, detail: str | None, started: float, now: float) -> None:
    """progress.json, with who writes it: host, pid and the pid's start time (a pid reused later is
    not this process), Slurm job."""
    import psutil

    write_json(Path(out) / PROGRESS_FILE, {
        "state": state, "step": step, "total_steps": total, "loss": loss, "checkpoint_step": checkpoint_step,
        "detail": detail, "host": platform.node(), "pid": os.getpid(), "pid_started": psutil.Process().create_time(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "started_unix": started, "updated_unix": now})


def starting(out: Path) -> None:
    """The heartbeat of a job that has begun, before its data and model load (it replaces the
    last attempt's)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    now = time.time()
    _write_beat(out, "starting", None, None, None, None, None, now, now)


def mark_failed(out: Path, failure: BaseException) -> None:
    """Record `failure` in the heartbeat this process wrote, unless it already says how it ended."""
    beat = read_progress(out)
    if beat and beat.get("pid") == os.getpid() and beat.get("state") in ("starting", "running"):
        beat.update(state="failed", detail=f"{type(failure).__name__}: {failure}"[:300], updated_unix=time.time())
        write_json(Path(out) / PROGRESS_FILE, beat)


def read_progress(folder: Path) -> dict | None:
    """The heartbeat of the run in `folder`, or None."""
    try:
        return read_json(Path(folder) / PROGRESS_FILE)
    except (FileNotFoundError, ValueError):
        return None
