"""The dataset-kind catalogue: what a kind of dataset is, and the registries of its code.

A kind says what a dataset is and how it is read: its keys' defaults (the keys themselves, with
their types and descriptions, are the schema's `dataset`), the keys it requires, its checks of a
config entry, where and with what its data job runs, whether its epochs are streamed, and the
hub subsets it loads; and its code, which prepares it, opens what was prepared for a run, makes
its small rehearsal sample and counts its training rows (data/__init__.py is the door to them).

A kind is defined in one module of this package, its record and its code together: digits.py,
images.py (hub, imagefolder, webdataset), nearest_point.py, listops.py, text.py, glue.py. Those
modules import neither torch nor pandas when imported (the Snakefile reads the records; what
needs torch is imported inside the code that runs), and data/__init__.py imports them all.

To add a kind: in a module of this package (imported in data/__init__.py), write its preparation
(writes the manifest), its opening (what its tasks read), its rehearsal sample (`leaner rehearse`
rehearses every variant of a config, so every kind has one) and, where a manifest does not say,
its training rows (`leaner cost`), and below them its record, `add_kind(DatasetKind(..., prepare=,
open=, sample=, rows=))`; then name the kind in the `dataset_kinds` of the tasks that read it
(tasks/__init__.py), and any key of its own in the schema's `dataset`. The config's checks, the
data rule, every training run, the rehearsal and the cost read the rest from the record. A kind
outside this package: the same, anywhere (leaner.extend).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..registry import add_record, scoped_catalogue


def never(spec: dict) -> bool:
    return False


def always(spec: dict) -> bool:
    return True


def source_hub(spec: dict) -> bool:
    return spec.get("source") == "hub"


def one_subset(spec: dict) -> list[str | None]:
    return [spec.get("subset")]


def each_task(spec: dict) -> list[str | None]:
    return list(spec["tasks"])


@dataclass(frozen=True)
class DatasetKind:
    """A kind of dataset: what it is, and its code (keyword arguments: `prepare`, `open`, `sample`
    and, where `leaner cost` should count its rows before a manifest says, `rows`)."""

    name: str
    defaults: dict[str, Any]  # its keys' defaults, over which a config entry's keys go
    prepare_settings: dict[str, Any]  # where and with what its data job runs (the entry's `prepare` goes over it)
    required: tuple[str, ...] = ()  # keys a config entry must give
    check: Callable[[str, dict, dict, Path], list[str]] | None = None  # (name, given, completed, config folder)
    from_hub: Callable[[dict], bool] = never  # whether an entry's data comes from the Hugging Face hub
    implicit: bool = False  # usable by its kind's name alone, without a `datasets` entry
    tasks_read: str = ""  # what its opening returns, in words
    streamed: bool = False  # drawn afresh each step: an epoch is the recipe's steps_per_epoch, not a pass over rows
    hub_subsets: Callable[[dict], list[str | None]] = one_subset  # the hub subsets an entry loads
    # its code: (name, entry, manifest path) -> the manifest written (the data rule)
    prepare: Callable[[str, dict, str], dict] = field(kw_only=True)
    # (manifest path, the run's RunSpec (runspec.py), device) -> what its tasks read (`tasks_read`)
    open: Callable[[str, Any, Any], Any] = field(kw_only=True)
    # (name, entry, folder) -> an entry to prepare as the kind's small rehearsal sample (`leaner rehearse`)
    sample: Callable[[str, dict, Path], dict] = field(kw_only=True)
    # (entry, its manifest or None, the job's RunSpec) -> the job's training rows where the manifest has no
    # `n_train`, or None where unknown (`leaner cost`)
    rows: Callable[[dict, dict | None, Any], int | None] | None = field(default=None, kw_only=True)


def settings(runtime: int, mem_mb: int, threads: int, local: bool | None) -> dict[str, Any]:
    return {"runtime": runtime, "mem_mb": mem_mb, "threads": threads, "local": local}


KINDS: dict[str, DatasetKind] = scoped_catalogue({})


def add_kind(kind: DatasetKind) -> DatasetKind:
    """Add a dataset kind's record to the catalogue (refused where the name is taken); returns it."""
    return add_record(KINDS, "dataset kind", kind)



def dataset_kind(name: str) -> DatasetKind:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown dataset kind {name!r} (allowed: {', '.join(KINDS)})") from None


def kind_defaults(name: str) -> dict[str, Any]:
    """A kind's defaults with its `prepare` settings, fresh (callers may change them)."""
    import copy

    kind = dataset_kind(name)
    return copy.deepcopy({**kind.defaults, "prepare": kind.prepare_settings})


def from_hub(spec: dict) -> bool:
    """Whether the dataset is downloaded from the Hugging Face hub (kind hub, or source hub)."""
    return dataset_kind(spec["kind"]).from_hub(spec)


def implicit_kinds() -> list[str]:
    """Kinds a study may name as its dataset without a `datasets` entry."""
    return [name for name, kind in KINDS.items() if kind.implicit]


def taking(key: str) -> list[str]:
    """The kinds that read `key` (have a default for it)."""
    return [name for name, kind in KINDS.items() if key in kind.defaults]

