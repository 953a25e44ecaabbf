"""Stopping when told to: a scheduler's signal ends a training run as a resumable stop, not a loss.

A scheduler ends a job at its time limit with SIGTERM to every process of the job, then SIGKILL
after a grace (Slurm: KillWait, 30 s by default); a job may also ask for a warning earlier
(`sbatch --signal=USR1@300`, profiles/slurm). On a workstation, Ctrl-C sends SIGINT to the
foreground process group. A training process that gets SIGTERM, SIGUSR1 or a first SIGINT
finishes the step it is in, saves its resume state at that step boundary (train.py) and exits
with STOPPED_EXIT, "stopped, resumable": at most the step in flight is lost. A second SIGINT
(Ctrl-C pressed again) aborts at once (KeyboardInterrupt): the resume state is then the last one
saved. Under DDP the ranks agree on the step (the flag is all-reduced, see `agree`), so every
rank takes part in the same save.

For the save to finish, the training process must be the one its scheduler waits for: the rules
start it with `exec` (no shell between it and Snakemake, which waits for running jobs on SIGTERM),
and the Snakemake inside a Slurm job passes SIGTERM and SIGUSR1 on to it (Slurm with
proctrack/cgroup signals that Snakemake alone) and keeps waiting (workflow/engine.py).

Each attempt is recorded (attempts.py): one that saved no progress since the one before it (a
time limit shorter than start-up plus one step, say) is not tried again.
"""

from __future__ import annotations

import signal
import time

from .watchers import Watcher

STOPPED_EXIT = 75  # EX_TEMPFAIL (sysexits.h): stopped on request, resumable
INTERRUPTED_EXIT = 130  # 128 + SIGINT: aborted by a second Ctrl-C, as a shell reports it
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class Stopped(Exception):
    """The run stopped on a signal that came when `signalled_at` steps were done, after saving its
    resume state at `step`."""

    def __init__(self, signal_name: str, signalled_at: int | None, step: int, seconds: float):
        came = "" if signalled_at is None else f" (it came after step {signalled_at})"
        super().__init__(f"stopped by {signal_name}{came}: resume state saved at step {step}, {seconds:.1f} s after "
                         f"the signal; exit status {STOPPED_EXIT} (stopped, resumable)")
        self.signal_name, self.signalled_at, self.step, self.seconds = signal_name, signalled_at, step, seconds


class StopSignal(Watcher):
    """Catches SIGTERM, SIGUSR1 and SIGINT while installed (a `with` block): the first one is kept,
    with the time it came and the steps done by then (`steps`, which the loop keeps current: a
    watcher of it); nothing else happens until the loop asks. A second SIGINT raises
    KeyboardInterrupt (an abort)."""

    def __init__(self):
        self.name: str | None = None
        self.at: float | None = None
        self.steps = 0
        self.signalled_at: int | None = None
        self.interrupts = 0
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        if self.name is None:
            self.name, self.at, self.signalled_at = signal.Signals(signum).name, time.monotonic(), self.steps
            self.interrupts = int(signum == signal.SIGINT)
        elif signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts > 1:  # Ctrl-C again: abort, without the save
                raise KeyboardInterrupt

    def started(self, step: int) -> None:
        self.steps = step

    def stepped(self, step: int) -> None:
        self.steps = step

    @property
    def received(self) -> bool:
        return self.name is not None

    def since(self) -> float:
        return 0.0 if self.at is None else time.monotonic() - self.at

    def __enter__(self) -> StopSignal:
        import threading

        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def agree(ctx, *flags: bool) -> list[bool]:
    """Each flag true on any rank, on every rank (one small all-reduce; the flags themselves on one
    process)."""
    if not ctx.active:
        return list(flags)
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(f) for f in flags], dtype=torch.float32, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]
