"""A hung job does not hold its GPUs until its time limit: no step for too long ends the run as a
resumable stop, one line naming the stall.

A loader that stopped feeding, a dead NCCL peer or a deadlocked collective leaves the training loop
waiting without an error; on a cluster the job would hold its GPUs for the rest of its runtime
(72 h for vit_imagenet). `StallWatch` is a thread the loop tells of its progress (a watcher of it: `stepped`): after
each step it allows `step_allowance` (STALL_STEPS times the slowest recent step, at least
STALL_FLOOR_S), around a known long phase (start-up, evaluation, a checkpoint's write: `allow`)
LONG_ALLOWANCE_S (`phase`). When that passes without a beat it says so in one line and raises `Stalled` in the
main thread (a signal, so a wait in Python code such as the data loader's is interrupted): where that
wait was for the next batch, the model is at a step boundary and the loop saves its state there;
anywhere else the last resume state stands. If the main thread does not answer (stuck inside a
collective), the process exits EXIT_AFTER_S later with STOPPED_EXIT. Either way the attempt ends
"stopped", resumable, and comes back where its state was saved (or, without progress, is not tried
again: attempts.py). A multi-process run's collective timeout (compute/distributed.py) is
LONG_ALLOWANCE_S and a little: the watch, which says what hung, acts first.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import deque

from .watchers import Watcher

STALL_STEPS = 100  # a step may take this many times the slowest recent one before it is a stall
STALL_FLOOR_S = 600.0  # ... and at least this long
LONG_ALLOWANCE_S = 1800.0  # start-up (compile, CUDA graph capture), an evaluation, a checkpoint's write
EXIT_AFTER_S = 60.0  # a main thread that does not answer the stall is ended this much later
STALL_SIGNAL = signal.SIGUSR2


class Stalled(Exception):
    """No progress for `seconds`: the run stops as it would on a scheduler's signal."""

    def __init__(self, what: str):
        super().__init__(what)


class StallWatch(Watcher):
    """The stall watch of one run (a `with` block on the main thread; elsewhere it does nothing)."""

    def __init__(self, log, exit_code: int, on_exit=None, floor_s: float | None = None,
                 exit_after_s: float = EXIT_AFTER_S):
        self.log, self.exit_code, self.on_exit, self.exit_after = log, exit_code, on_exit, exit_after_s
        self.floor = STALL_FLOOR_S if floor_s is None else floor_s
        self.recent: deque[float] = deque(maxlen=50)
        self.step, self.saved = 0, 0
        self.doing, self.allowance = "start-up", max(LONG_ALLOWANCE_S, self.floor)
        self.last = time.monotonic()
        self.fired: str | None = None
        self.fetching = False  # the main thread is waiting for the next batch (a step boundary)
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous = None

    # ---------------------------------------------------------------- the loop's side
    def step_allowance(self) -> float:
        return max(self.floor, STALL_STEPS * max(self.recent, default=0.0))

    def started(self, step: int) -> None:
        self.saved = step  # the resume state it began from

    def stepped(self, step: int) -> None:
        """A step is done."""
        now = time.monotonic()
        if self.doing == "step":
            self.recent.append(now - self.last)
        self.step, self.last, self.doing, self.allowance = step, now, "step", self.step_allowance()

    def phase(self, name: str) -> None:
        """A known long phase begins (evaluation, a checkpoint's write)."""
        self.last, self.doing, self.allowance = time.monotonic(), name, max(LONG_ALLOWANCE_S, self.floor)

    def checkpointed(self, step: int, loss: float | None) -> None:
        self.saved = step

    # ---------------------------------------------------------------- the watch
    def __enter__(self) -> StallWatch:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(STALL_SIGNAL, self._raise)
            self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._previous is not None:
            signal.signal(STALL_SIGNAL, self._previous)
            self._previous = None

    def _raise(self, signum, frame) -> None:
        if self.fired and not self._done.is_set():
            raise Stalled(self.fired)

    def _watch(self) -> None:
        while not self._done.wait(min(5.0, self.floor / 4)):
            silent = time.monotonic() - self.last
            if silent < self.allowance:
                continue
            self.fired = (f"stalled: no progress for {silent / 60:.1f} min in {self.doing} after step {self.step} "
                          f"(allowed {self.allowance / 60:.1f} min{', the loader' if self.fetching else ''}); the "
                          f"resume state is at step {self.saved} or later")
            self.log(self.fired)
            signal.pthread_kill(threading.main_thread().ident, STALL_SIGNAL)
            if self._done.wait(self.exit_after):
                return
            self.log(f"the main thread did not answer the stall in {self.exit_after:g} s: exiting "
                     f"{self.exit_code} (resumable)")
            if self.on_exit is not None:
                self.on_exit(self.fired)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(self.exit_code)


def collective_timeout_min() -> float:
    """Minutes a multi-process run's collectives wait before they fail: beyond what the watch
    allows (it acts first and says what hung), not the 120 min a hung peer used to hold a job."""
    return (max(LONG_ALLOWANCE_S, STALL_FLOOR_S) + EXIT_AFTER_S) / 60 + 5
