"""What watches a training run, hooked into the loop (train.py) at its named points through one list.

Each watcher is told the same things at the same points, and does what it is for with them:

  stopping.StopSignal    the steps done when a stop signal comes
  stall.StallWatch       the time since the last step, against the stall allowance
  progress.Bar           the terminal's bar, or a log's line a minute
  tracking.RunRecord     history.csv, TensorBoard's events and the heartbeat (progress.json)
  attempts.AttemptRecord this attempt's record: the last step saved, how it ended, its cost
  finished.KeepFinished  a cluster job's second name for its outputs (a shared GPU's group, a late
                         TIMEOUT: Snakemake may delete them after the job ended)

The points, in the order a run meets them:

  started(step)                 the run is set up and resumed at `step`
  stepped(step)                 an optimiser step is done (every step: keep it cheap)
  synced(step, loss)            the loss sums reached the host (every sync_every steps)
  phase(name)                   a known long phase begins (evaluation, a checkpoint's write)
  epoch(row, history)           an epoch's history row is made
  checkpointed(step, loss)      the resume state now holds `step`
  ended(how, why, step, loss, error)
                                the attempt ended: done (its outputs are written next), stopped
                                (resumable: a signal, a stall, stop_after) or failed; `error` is
                                what ended it (None: done, or stop_after)
  finished(out)                 metrics.json is written: the run is over
"""

from __future__ import annotations

from pathlib import Path


class Watcher:
    """A watcher of the loop; each point does nothing unless a watcher has something to do there."""

    def started(self, step: int) -> None:
        pass

    def stepped(self, step: int) -> None:
        pass

    def synced(self, step: int, loss: float | None) -> None:
        pass

    def phase(self, name: str) -> None:
        pass

    def epoch(self, row: dict, history: list[dict]) -> None:
        pass

    def checkpointed(self, step: int, loss: float | None) -> None:
        pass

    def ended(self, how: str, why: str | None, step: int, loss: float | None, error: BaseException | None) -> None:
        pass

    def finished(self, out: Path) -> None:
        pass


class Watchers(Watcher):
    """The run's watchers, each told in the order given (None: not watching this run)."""

    def __init__(self, *watchers: Watcher | None):
        self.all = [w for w in watchers if w is not None]

    def started(self, step):
        for w in self.all:
            w.started(step)

    def stepped(self, step):
        for w in self.all:
            w.stepped(step)

    def synced(self, step, loss):
        for w in self.all:
            w.synced(step, loss)

    def phase(self, name):
        for w in self.all:
            w.phase(name)

    def epoch(self, row, history):
        for w in self.all:
            w.epoch(row, history)

    def checkpointed(self, step, loss):
        for w in self.all:
            w.checkpointed(step, loss)

    def ended(self, how, why, step, loss, error):
        for w in self.all:
            w.ended(how, why, step, loss, error)

    def finished(self, out):
        for w in self.all:
            w.finished(out)
