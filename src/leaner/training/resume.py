"""The state of a training run, saved every checkpoint_every steps and restored by a re-run.

It lives in ``<out>/.resume/`` (not a declared Snakemake output, so a killed job keeps it):
state.pt, and state.prev.pt, the one before, in case the newest is damaged. A state belongs to one
spec; it is loaded as tensors only (weights_only), and a damaged or foreign file is skipped with a
warning. With every rank's RNG state in it, a resumed CPU run is bit for bit an uninterrupted one.
The loop saves it with `save_checkpoint`, also when `CheckpointClock` says recipe.checkpoint_minutes passed.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..io import atomic_path
from .attempts import RESUME_DIR

RESUME_BYTES_PER_PARAM = 12  # fp32 weights and AdamW's two moments
WRITE_BYTES_PER_S = 200e6  # a shared filesystem's sustained write for one job (conservative)
KILLS_EVERY_S = 24 * 3600.0  # assumed mean time between kills without warning (node loss, memory)
CHECKPOINT_MINUTES = (5.0, 60.0)  # the range an automatic interval is kept in

RESUME_FILE = "state.pt"
PREVIOUS_FILE = "state.prev.pt"  # the checkpoint before the last: the fallback if the last is damaged


def write_seconds(params: int) -> float:
    """Seconds to write the resume state of a model of `params` parameters (1 s of overhead)."""
    return 1.0 + params * RESUME_BYTES_PER_PARAM / WRITE_BYTES_PER_S


def checkpoint_minutes(value: float | str | None, params: int) -> float | None:
    """recipe.checkpoint_minutes as a number of minutes (None: by steps only). `auto` is Young's
    interval sqrt(2 C M) between checkpoints that cost C seconds to write, for kills every M
    seconds on average (first-order optimal: the expected time lost to writing and to redoing
    work is least), kept within CHECKPOINT_MINUTES. A P2 model (~1 s to write): 7 minutes;
    ViT-B (1 GB): 17; a 7 GB state: 42."""
    if value != "auto":
        return value
    interval = math.sqrt(2 * write_seconds(params) * KILLS_EVERY_S) / 60
    return min(max(interval, CHECKPOINT_MINUTES[0]), CHECKPOINT_MINUTES[1])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rank_seed(seed: int, rank: int) -> int:
    """Each rank's own RNG stream after the shared initialisation (dropout, augmentation)."""
    return int(np.random.SeedSequence([seed, rank, 0xDD9]).generate_state(1)[0])


def rng_state() -> dict:
    """This process's Python, NumPy, torch (and, once it has used CUDA, its GPUs') RNG states, as
    tensors and plain values."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "numpy_keys": torch.from_numpy(keys.astype(np.int64)),
             "numpy_meta": [kind, int(pos), int(has_gauss), float(cached)], "python": repr(random.getstate())}
    if torch.cuda.is_initialized():
        state["cuda"] = [torch.cuda.get_rng_state(i) for i in _own_gpu_first()]
    return state


def set_rng_state(state: dict, log: Callable[[str], None]) -> None:
    import ast

    torch.set_rng_state(state["torch"])
    kind, pos, has_gauss, cached = state["numpy_meta"]
    np.random.set_state((kind, state["numpy_keys"].numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(ast.literal_eval(state["python"]))
    if "cuda" in state:
        _set_cuda_rng_states(state["cuda"], log)


def _own_gpu_first() -> list[int]:
    """The visible GPUs, this process's current one first: the one whose RNG stream it draws from."""
    own = torch.cuda.current_device()
    return [own] + [i for i in range(torch.cuda.device_count()) if i != own]


def _set_cuda_rng_states(states: list, log: Callable[[str], None]) -> None:
    """Saved GPU RNG states (own GPU first) onto the GPUs this process sees now, own GPU first: a
    run requeued onto a node with more or fewer GPUs, or another GPU of the same node, continues
    its own GPU's stream; states beyond the GPUs present are dropped, GPUs beyond the states keep
    their seeds."""
    gpus = _own_gpu_first() if torch.cuda.is_available() else []
    if len(states) != len(gpus):
        log(f"warning: checkpoint has the RNG states of {len(states)} GPU(s), this process sees {len(gpus)}; "
            f"restoring {min(len(states), len(gpus))}" + (", its own GPU's first" if gpus else ""))
    for saved, index in zip(states, gpus):
        torch.cuda.set_rng_state(saved, index)


@dataclass
class RunState:
    """Where a run stands: weights, optimiser, step, history so far, the epoch's loss sums, the
    training time so far and every rank's RNG state."""

    spec: str  # the spec's JSON, sorted keys: a state is only ever restored into its own spec
    model: dict = field(default_factory=dict)
    optimizer: dict = field(default_factory=dict)
    step: int = 0
    history: list = field(default_factory=list)
    epoch_loss: float = 0.0
    epoch_count: int = 0
    elapsed_s: float = 0.0
    rng: list = field(default_factory=list)

    def save(self, out: Path) -> None:
        """Write atomically, keeping the previous state as state.prev.pt."""
        path = out / RESUME_DIR / RESUME_FILE
        with atomic_path(path) as tmp:
            torch.save(asdict(self), tmp)
            if path.exists():
                os.replace(path, path.with_name(PREVIOUS_FILE))

    @classmethod
    def load(cls, out: Path, spec_json: str, log: Callable[[str], None]) -> RunState | None:
        """The newest readable state of this spec: state.pt, else state.prev.pt, else None."""
        path = out / RESUME_DIR / RESUME_FILE
        for candidate in (path, path.with_name(PREVIOUS_FILE)):
            if not candidate.exists():
                continue
            try:
                state = torch.load(candidate, map_location="cpu", weights_only=True)
            except Exception as exc:  # truncated, corrupted, or carrying code
                log(f"warning: resume checkpoint {candidate} is unreadable ({exc.__class__.__name__}: "
                    f"{str(exc).splitlines()[0][:200]}); trying the previous one")
                continue
            if state.get("spec") != spec_json:
                log(f"warning: resume checkpoint {candidate} belongs to a different spec; ignoring it")
                continue
            if not isinstance(state["rng"], list):  # states written before RNG states were per rank
                state["rng"] = [state["rng"]]
            return cls(**state)
        if path.parent.exists() and any(path.parent.iterdir()):
            log("warning: no usable resume checkpoint; starting from step 0")
        return None


class CheckpointClock:
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


def save_checkpoint(out: Path, run: RunState, model, optimizer, step: int, history: list, meter,
                    elapsed: float, ctx) -> None:
    """Save the run's state (after a sync: the meter's totals are current). Every rank takes part
    (their RNG states are gathered); rank 0 writes."""
    rngs = ctx.gather(rng_state())
    if ctx.main:
        RunState(run.spec, model.state_dict(), optimizer.state_dict(), step, history, meter.total, meter.count,
                 run.elapsed_s + elapsed, rngs).save(out)
