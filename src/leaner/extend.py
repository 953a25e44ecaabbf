"""Adding to the catalogues, each through its one door, where the thing is defined:
- a task: its record on its training class, `@trains(TaskInfo(...))` (tasks/base.py);
- a dataset kind: `add_kind(DatasetKind(..., prepare=, open=, sample=, rows=))` beside its code
  (data/kinds.py);
- a figure: `@figure("name", caption=..., requires=..., tasks=...)` on its drawing function, a table:
  `@table(...)` on its function (shown.py); `leaner catalogue` then writes the index the Snakefile
  reads and the report's caption.

`scoped()` loads every built-in record and its code, then undoes on leaving whatever was added
inside it: a test adds a toy of each and leaves the catalogues as they were."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from . import registry


def load_builtins() -> None:
    """Import every module that defines a built-in record's code (each registers it)."""
    from . import data  # noqa: F401  (its families define the built-in kinds)
    from .analysis import papers, study_figures, study_tables  # noqa: F401
    from .tasks import trainers  # noqa: F401


@contextmanager
def scoped() -> Iterator[None]:
    """The catalogues (tasks, dataset kinds, figures, tables, and the code registered under their
    names) as they are on entering, put back on leaving."""
    load_builtins()
    with registry.scoped():
        yield
