"""The training side of every task: `make_task` imports the module that defines a run's task
(its record's `trainer`), whose classes register under their tasks' names where they are defined
(base.trains), and builds the class the run's spec names. Imports torch (through that module)."""

from __future__ import annotations

import importlib
from typing import Any

from ..runspec import RunSpec
from . import CATALOG, task_of
from .base import TRAINERS


def load_trainer(spec_task: str) -> None:
    """Import the module of spec task `spec_task`'s training class (one outside this package is
    registered when its user imports it)."""
    trainer = task_of(spec_task).trainer
    if trainer:
        importlib.import_module(f"{__package__}.{trainer}")


def load_every_trainer() -> None:
    for name in CATALOG:
        load_trainer(name)


def make_task(spec: dict | RunSpec, data_path: str, device: Any):
    """The training side of the spec's task (a job's dict is typed here, once)."""
    spec = RunSpec.of(spec)
    name = spec.task
    if name not in TRAINERS:
        load_trainer(name)  # an unknown task: task_of says so, with the tasks there are
    if name not in TRAINERS:
        raise ValueError(f"unknown task {name!r} (allowed: {', '.join(TRAINERS.code)})")
    return TRAINERS[name](spec, data_path, device)
