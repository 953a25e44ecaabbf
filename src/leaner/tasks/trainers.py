"""The training side of every task: importing this module imports each task's module, whose
classes register under their tasks' names where they are defined (base.trains), and `make_task`
builds the class a run's spec names. Imports torch."""

from __future__ import annotations

from typing import Any

from ..runspec import RunSpec
from . import image, nearest, sequence  # noqa: F401  (each registers its training classes)
from .base import TRAINERS


def make_task(spec: dict | RunSpec, data_path: str, device: Any):
    """The training side of the spec's task (a job's dict is typed here, once)."""
    spec = RunSpec.of(spec)
    name = spec.task
    if name not in TRAINERS:
        raise ValueError(f"unknown task {name!r} (allowed: {', '.join(TRAINERS.code)})")
    return TRAINERS[name](spec, data_path, device)
