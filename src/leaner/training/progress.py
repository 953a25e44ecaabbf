"""What a training run tells the person watching it: its log lines (rank 0's, named by study and
variant) and its progress (a tqdm bar on a terminal, a line a minute in a log file)."""

from __future__ import annotations

import sys
import time


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


def progress_bar(total: int, initial: int, show: bool, desc: str, log):
    """A tqdm bar on a terminal, progress lines in a log file, nothing when not shown."""
    from tqdm import tqdm

    if show and not sys.stderr.isatty():
        return LineProgress(total, initial, log)
    return tqdm(total=total, initial=initial, disable=not show, file=sys.stderr, dynamic_ncols=True,
                mininterval=1.0, desc=desc)


def logger(spec: dict, local_rank: int | None):
    def log(msg: str) -> None:
        if local_rank in (None, 0):
            print(f"[{spec['study']}/{spec['variant']}] {msg}", file=sys.stderr, flush=True)

    return log
