"""Faults the tests build into the processes they start, as a real fault arrives: nothing in leaner
looks for them. A test puts this folder on PYTHONPATH (conftest.fault_env), so that every Python
process of the run (Snakemake, its jobs, torchrun's ranks, a Slurm job's) imports this module at
start-up, and says in LEANER_TEST_FAULTS (JSON) which faults:

  {"stall": [30, 600]}         the data source holds the batch after step 30 for 600 s, in an
                               attempt that began before step 30 (a loader that stopped feeding,
                               which a resumed attempt does not meet again)
  {"slow_step": 0.13}          the data source holds every batch 0.13 s: a run long in time, not in
                               work, which computes what it would without it
  {"slow_rename": ["state.pt", 8]}
                               every write of state.pt is held 8 s between its complete temporary
                               copy and its rename (a slow filesystem), so a test can stop or kill
                               the process in the middle of writing it
  {"stall_floor_s": 2}         the stall watch's floor (training/stall.py STALL_FLOOR_S), so a stall
                               is seen in seconds

Each is put in when the leaner module it concerns is imported (training/train.py's fetch of the
next batch, io.py's atomic writes, stall.py's floor): wrapped from outside, never changed inside.
"""

from __future__ import annotations

import json
import os
import sys

FAULTS = json.loads(os.environ.get("LEANER_TEST_FAULTS") or "{}")


def _held_batches(module) -> None:
    import time

    fetch = module._next_batch
    stall, slow = FAULTS.get("stall"), FAULTS.get("slow_step")

    class Held:
        """The loop's batches, held where the faults say."""

        def __init__(self, batches, state):
            self.batches, self.state = batches, state

        def __next__(self):
            if stall and self.state.step == stall[0] > self.state.saved.step:
                time.sleep(stall[1])
            if slow:
                time.sleep(slow)
            return next(self.batches)

    module._next_batch = lambda run, state, watchers, batches: fetch(run, state, watchers, Held(batches, state))


def _held_writes(module) -> None:
    import contextlib
    import time
    from pathlib import Path

    write, (name, seconds) = module.atomic_path, FAULTS["slow_rename"]

    @contextlib.contextmanager
    def held(path):
        with write(path) as tmp:
            yield tmp
            if Path(path).name == name:  # the temporary copy is complete, the rename still to come
                time.sleep(seconds)

    module.atomic_path = held


def _stall_floor(module) -> None:
    module.STALL_FLOOR_S = float(FAULTS["stall_floor_s"])


WRAP = {"leaner.training.train": (_held_batches, ("stall", "slow_step")),
        "leaner.io": (_held_writes, ("slow_rename",)),
        "leaner.training.stall": (_stall_floor, ("stall_floor_s",))}


class _AfterImport:
    """A finder that lets the others find a module named in WRAP and wraps it once it has run."""

    def find_spec(self, name, path=None, target=None):
        wrap, keys = WRAP.get(name, (None, ()))
        if not any(k in FAULTS for k in keys):
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            wrap(module)

        spec.loader.exec_module = exec_module
        return spec


if FAULTS:
    sys.meta_path.insert(0, _AfterImport())
