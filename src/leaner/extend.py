"""Adding to the catalogues, each through its one door, where the thing is defined:
- a task: its record on its training class, `@trains(TaskInfo(...))` (tasks/base.py);
- a dataset kind: `add_kind(DatasetKind(..., prepare=, open=, sample=, rows=))` beside its code
  (data/kinds.py)
(a figure or a table is not a record: it is a function carrying its caption and one line in
analysis/report.py's study_outputs.)

`scoped()` loads every built-in record and its code, then undoes on leaving whatever was added
inside it: a test adds a toy of each and leaves the catalogues as they were."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from . import registry


def load_builtins() -> None:
    """Import every module that defines a built-in record's code (each registers it)."""
    from .analysis import papers  # noqa: F401  (each task's rows of the paper comparison)
    from .data.kinds import every_kind
    from .tasks.trainers import load_every_trainer

    every_kind()  # each family's module defines its built-in kinds
    load_every_trainer()


@contextmanager
def scoped() -> Iterator[None]:
    """The catalogues (tasks, dataset kinds, and the code registered under their names) as they
    are on entering, put back on leaving."""
    load_builtins()
    with registry.scoped():
        yield
