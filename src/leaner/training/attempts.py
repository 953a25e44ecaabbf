"""A job's attempts: every run of `leaner train` on one variant since its resume state began
(Snakemake's retries of the job, a re-run after a crash), each with the step it began at, the
last step it saved, how it ended and what it cost, kept in the resume folder (`attempts.json`,
light: no torch, so the Snakemake that decides retries reads it too).

Three readers:
- the run itself, at its start (`AttemptRecord.begin`): an attempt that follows one that saved
  nothing since it began refuses to start, in one line (a time limit shorter than start-up plus
  one step, a crash at every start): another would do the same. A new Snakemake run of the job
  (attempt 1) always starts;
- the Snakemake that decides whether a failed job is tried again (`no_progress`, through
  workflow/scheduling.py): not when its attempt saved no step beyond the one it began at;
- metrics.json (`attempts`): every attempt's cost, which the job-costs table adds up (Snakemake
  keeps a benchmark record of a job's last attempt only, and none of one that failed).

Each attempt also keeps its own log: Snakemake deletes a job's log before it runs it again, so
the log of attempt N is hard-linked to `<log>.attempt-N.log` beside it (`keep_attempt_log`), and
the link of a job that needed one attempt is removed when it ends.
"""

from __future__ import annotations

import hashlib
import os
import platform
import resource
import time
from pathlib import Path

from ..io import read_json, write_json
from .watchers import Watcher

RESUME_DIR = ".resume"  # a run's resume folder in its output folder (not a Snakemake output: a kill keeps it)
ATTEMPTS_FILE = "attempts.json"
FINISHED_FILE = "finished.json"  # a finished run kept aside (finished.py)


def spec_digest(spec_json: str) -> str:
    return hashlib.sha256(spec_json.encode()).hexdigest()[:16]


def _cost() -> dict:
    """This process's CPU seconds (with its ended children: data loader workers) and peak RSS."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    return {"cpu_s": round(cpu, 2), "peak_rss_mb": round(max(own.ru_maxrss, children.ru_maxrss) / 1024, 1)}


class AttemptRecord(Watcher):
    """The attempts of one spec's run, in its resume folder (rank 0 writes); a watcher of the
    loop: each checkpoint is this attempt's last step saved, and its end how it ended."""

    def __init__(self, folder: Path, spec_json: str | None = None):
        self.path = Path(folder) / ATTEMPTS_FILE
        self.spec = spec_digest(spec_json) if spec_json is not None else None

    def records(self) -> list[dict]:
        try:
            data = read_json(self.path)
        except (FileNotFoundError, ValueError):
            return []
        if not isinstance(data, dict) or (self.spec is not None and data.get("spec") != self.spec):
            return []  # another spec's (or an unreadable) record: not this run's attempts
        return [a for a in data.get("attempts", []) if isinstance(a, dict)]

    def _write(self, attempts: list[dict]) -> None:
        write_json(self.path, {"spec": self.spec, "attempts": attempts})

    def begin(self, attempt: int | None, step: int) -> None:
        """Record that this attempt (Snakemake's number; None outside Snakemake) begins at `step`;
        refuse, one line, where the attempt before it saved nothing since it began at this same
        step, unless this is a new Snakemake run's first attempt."""
        seen = self.records()
        last = seen[-1] if seen else None
        if attempt != 1 and last is not None and last["saved_step"] == last["began_at_step"] == step:
            raise RuntimeError(
                f"no progress: the last attempt also began at step {step} and saved nothing before it ended "
                f"({last['end']}{': ' + last['why'] if last.get('why') else ''}; a time limit shorter than start-up "
                f"plus one step, or a crash at every start); stopping instead of trying again (see its log; a new "
                f"Snakemake run tries again, or delete {self.path})")
        now = time.time()
        seen.append({"attempt": attempt, "began_at_step": step, "saved_step": step, "end": "running", "why": None,
                     "host": platform.node(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                     "started_unix": now, "last_seen_unix": now, "ended_unix": None})
        self._write(seen)

    def _update(self, **fields) -> None:
        seen = self.records()
        if seen and seen[-1]["end"] == "running":
            seen[-1].update(last_seen_unix=time.time(), **fields)
            self._write(seen)

    def saved(self, step: int) -> None:
        """The resume state now holds `step`."""
        self._update(saved_step=step)

    def end(self, how: str, why: str | None = None, step: int | None = None) -> list[dict]:
        """This attempt ended: `how` is done (its outputs hold `step`), stopped (on a signal,
        resumable) or failed; with its cost. Returns every attempt's record."""
        now = time.time()
        done = {} if step is None else {"saved_step": step}
        self._update(end=how, why=why and why[:300], ended_unix=now, **done, **_cost())
        return self.records()

    def checkpointed(self, step: int, loss: float | None) -> None:
        self.saved(step)

    def ended(self, how, why, step, loss, error) -> None:
        self.end(how, why, step if how == "done" else None)

    def resumed_at(self) -> list[int]:
        """The steps later attempts began at (metrics.json's `resumed_at`)."""
        return [a["began_at_step"] for a in self.records() if a["began_at_step"] > 0]


def no_progress(folder: Path, attempt: int) -> str | None:
    """Why a failed attempt `attempt` of the run whose resume folder is `folder` is not worth
    trying again (None: it is): it ended before it began training, or saved no step beyond the
    one it began at. A run that finished and kept its outputs aside (finished.py: Slurm took the
    job for failed, in its group or just past its time limit) is worth it: it puts them back."""
    if (folder / FINISHED_FILE).exists():
        return None
    seen = AttemptRecord(folder).records()
    last = seen[-1] if seen else None
    if last is None or last.get("attempt") != attempt:
        return f"attempt {attempt} failed before its first step"
    if last["saved_step"] <= last["began_at_step"]:
        how = last["end"] if last["end"] != "running" else "killed"
        return (f"attempt {attempt} saved no step beyond step {last['began_at_step']}, where it began ({how}"
                f"{': ' + last['why'] if last.get('why') else ''})")
    return None


def attempt_log(log: Path, attempt: int) -> Path:
    return log.with_name(f"{log.stem}.attempt-{attempt}{log.suffix}")


def keep_attempt_log(log: str | os.PathLike | None, attempt: int | None) -> None:
    """Give this attempt's log (the job's log, which Snakemake deletes before the next attempt) a
    second name that survives it: `<log>.attempt-N.log` (a hard link, else nothing). The first
    attempt of a Snakemake run first removes the links an earlier run left."""
    if not log or not attempt:
        return
    log = Path(log)
    if attempt == 1:
        for old in log.parent.glob(f"{log.stem}.attempt-*{log.suffix}"):
            old.unlink(missing_ok=True)
    target = attempt_log(log, attempt)
    try:
        target.unlink(missing_ok=True)
        os.link(log, target)
    except OSError:  # no log yet, or a filesystem without hard links: the job's log is the only one
        pass


def drop_single_attempt_log(log: str | os.PathLike | None, attempts: list[dict]) -> None:
    """A job done in one attempt needs no second name for its log."""
    if log and len(attempts) <= 1:
        attempt_log(Path(log), 1).unlink(missing_ok=True)
