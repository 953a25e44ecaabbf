"""The dataset-kind catalogue: one record per kind of dataset, the one place a kind is registered.

A kind says what a dataset is and how it is read: its keys' defaults (the keys themselves, with
their types and descriptions, are the schema's `dataset`), the keys it requires, its checks of a
config entry, where and with what its data job runs, whether its epochs are streamed, and the
hub subsets it loads. This module imports neither torch nor pandas (the Snakefile reads it).
The code that prepares a kind, opens what was prepared for a run, makes its small rehearsal
sample and counts its training rows registers under the kind's name where it is defined
(`@PREPARE.register("kind")` and the others below); data/__init__.py is the door to them.

To add a kind: add one `DatasetKind` below (a kind outside this package: `add_kind`); in a module
of this package, write its preparation (writes the manifest), its opening (what its tasks read)
and its rehearsal sample (`leaner rehearse` rehearses every variant of a config, so every kind has
one), and where a manifest does not say, its training rows (`leaner cost`), each registered under
the kind's name; import the module in data/__init__.py's `builtin_kinds`; and name the kind in the
`dataset_kinds` of the tasks that read it (tasks/__init__.py). The config's schema, its checks,
the data rule, every training run, the rehearsal and the cost read the rest from the record; a
test fails where a kind lacks its preparation, opening or rehearsal sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..registry import Registry, add_record, scoped_catalogue
from .checks import check_glue, check_imagefolder, check_listops, check_text, check_webdataset

IMAGE_NORM = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
IMAGE_LOADING = {"train_split": "train", "eval_split": "validation", "image_key": "image", "label_key": "label",
                 "img_size": 224, "in_chans": 3, "decode": "pil", **IMAGE_NORM}
IMAGE_KEYS = ("decode", "image_key", "label_key", "mean", "std")  # read only by the image loaders


def _never(spec: dict) -> bool:
    return False


def _always(spec: dict) -> bool:
    return True


def _source_hub(spec: dict) -> bool:
    return spec.get("source") == "hub"


def _one_subset(spec: dict) -> list[str | None]:
    return [spec.get("subset")]


def _each_task(spec: dict) -> list[str | None]:
    return list(spec["tasks"])


@dataclass(frozen=True)
class DatasetKind:
    name: str
    defaults: dict[str, Any]  # its keys' defaults, over which a config entry's keys go
    prepare_settings: dict[str, Any]  # where and with what its data job runs (the entry's `prepare` goes over it)
    required: tuple[str, ...] = ()  # keys a config entry must give
    check: Callable[[str, dict, dict, Path], list[str]] | None = None  # (name, given, completed, config folder)
    from_hub: Callable[[dict], bool] = _never  # whether an entry's data comes from the Hugging Face hub
    implicit: bool = False  # usable by its kind's name alone, without a `datasets` entry
    tasks_read: str = ""  # what its opening returns, in words
    streamed: bool = False  # drawn afresh each step: an epoch is the recipe's steps_per_epoch, not a pass over rows
    hub_subsets: Callable[[dict], list[str | None]] = _one_subset  # the hub subsets an entry loads


# The code of each kind, registered where it is defined (data/__init__.py imports the modules):
PREPARE = Registry("preparation of dataset kind", lambda: KINDS)  # (name, entry, manifest path) -> manifest
OPEN = Registry("opening of dataset kind", lambda: KINDS)  # (manifest path, RunSpec (runspec.py), device) -> tasks_read
# (name, entry, folder) -> an entry to prepare as the kind's small rehearsal sample (`leaner rehearse`)
SAMPLE = Registry("rehearsal sample of dataset kind", lambda: KINDS)
# (entry, its manifest or None, the job's RunSpec) -> the job's training rows where the manifest has no `n_train`,
# or None where unknown (`leaner cost`)
ROWS = Registry("training rows of dataset kind", lambda: KINDS)


def _settings(runtime: int, mem_mb: int, threads: int, local: bool | None) -> dict[str, Any]:
    return {"runtime": runtime, "mem_mb": mem_mb, "threads": threads, "local": local}


IMAGE_SPLITS = "splits.Splits: a LoaderSplit (or ShardSplit) for train and for eval, decoded as the recipe says"

KINDS: dict[str, DatasetKind] = scoped_catalogue({})


def add_kind(kind: DatasetKind) -> DatasetKind:
    """Add a dataset kind's record to the catalogue (refused where the name is taken); returns it."""
    return add_record(KINDS, "dataset kind", kind)


for _kind in (
    DatasetKind(
        "digits", {"test_fraction": 0.2, "split_seed": 0, "num_classes": 10, "img_size": 8, "in_chans": 1},
        _settings(10, 2000, 1, False), implicit=True,
        tasks_read="splits.Splits of two InMemorySplits (standardised 8x8 images, labels)"),
    DatasetKind(
        "hub", {"subset": None, **IMAGE_LOADING}, _settings(240, 16000, 4, True), required=("name", "num_classes"),
        from_hub=_always, tasks_read=IMAGE_SPLITS),
    DatasetKind(
        "imagefolder", dict(IMAGE_LOADING), _settings(240, 16000, 4, False), required=("path", "num_classes"),
        check=check_imagefolder, tasks_read=IMAGE_SPLITS),
    DatasetKind(
        "webdataset", {**IMAGE_LOADING, "image_key": "jpg", "label_key": "cls"}, _settings(240, 4000, 1, False),
        required=("path", "num_classes"), check=check_webdataset, tasks_read=IMAGE_SPLITS),
    DatasetKind(
        "nearest_point", {"stream": "fresh", "streams": 7, "eval_samples": 4096, "eval_seed": 12345},
        _settings(10, 2000, 1, False), implicit=True, streamed=True,
        tasks_read="nearest_point.PointStream: point sets drawn on the run's device, by (seed, step)"),
    DatasetKind(
        "listops", {"seed": 0, "n_train": 96000, "n_val": 2000, "n_test": 2000, "max_depth": 10, "max_args": 10,
                    "min_length": 500, "max_length": 2000},
        _settings(60, 4000, 1, False), check=check_listops,
        tasks_read="{split: (tokens, lengths, labels)} tensors, hash-checked"),
    DatasetKind(
        "text", {"subset": None, "train_split": "train", "eval_split": "validation", "seed": 0, "source": "hub",
                 "text_key": "text", "train_file": "train.txt", "eval_file": "validation.txt", "stories": 4000,
                 "max_train_tokens": None, "eval_tokens": 262144},
        _settings(240, 16000, 4, None), check=check_text, from_hub=_source_hub, streamed=True,
        tasks_read="(train, eval) text.TokenStreams of byte tokens"),
    DatasetKind(
        "glue", {"name": "nyu-mll/glue", "max_length": 128, "source": "hub",
                 "tasks": ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"], "max_train_examples": None},
        _settings(120, 8000, 4, None), check=check_glue, from_hub=_source_hub, hub_subsets=_each_task,
        tasks_read="{train|eval: (tokens, labels)} of the run's spec.glue_task, hash-checked"),
):
    add_kind(_kind)


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

