"""What a training run tells the person watching it: its log lines (rank 0's, named by study and
variant) and its progress (`Bar`: a tqdm bar on a terminal, a line a minute in a log file); and
the wall budget an epoch's end is held to."""

from __future__ import annotations

import sys
import time

from ..runspec import RunSpec
from .watchers import Watcher


class LineProgress:
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


class Bar(Watcher):
    """The run's progress: a tqdm bar on a terminal (with the last evaluation's numbers), progress
    lines in a log file, nothing when not shown."""

    def __init__(self, total: int, initial: int, show: bool, desc: str, log):
        from tqdm import tqdm

        if show and not sys.stderr.isatty():
            self.bar = LineProgress(total, initial, log)
        else:
            self.bar = tqdm(total=total, initial=initial, disable=not show, file=sys.stderr, dynamic_ncols=True,
                            mininterval=1.0, desc=desc)

    def stepped(self, step):
        self.bar.update(1)

    def epoch(self, row, history):
        if any(k.startswith("eval") for k in row):
            self.bar.set_postfix({k: f"{v:.4g}" for k, v in row.items() if k.startswith(("train", "eval"))})

    def ended(self, how, why, step, loss, error):
        self.bar.close()


def logger(spec: RunSpec, local_rank: int | None):
    def log(msg: str) -> None:
        if local_rank in (None, 0):
            print(f"[{spec.name}] {msg}", file=sys.stderr, flush=True)

    return log


def past_budget(recipe, more_to_train: bool, trained_s: float, ctx) -> bool:
    """Whether a run with steps left has trained (all attempts together) past its
    recipe.wall_budget_minutes at an epoch's end: the authors' regime (planning/reach.py), a job
    stopped at its limit; the ranks agree."""
    if recipe.wall_budget_minutes is None or not more_to_train:
        return False
    past = trained_s >= 60 * recipe.wall_budget_minutes
    return bool(ctx.all_sum([int(past)])[0]) if ctx.active else past


def budget_record(recipe, stopped_at_epoch: int | None) -> dict:
    """metrics.json's `wall_budget` where the recipe sets one: the minutes, and the epoch the run
    stopped at (None: it finished its schedule within them)."""
    if recipe.wall_budget_minutes is None:
        return {}
    return {"wall_budget": {"minutes": recipe.wall_budget_minutes, "stopped_at_epoch": stopped_at_epoch}}
