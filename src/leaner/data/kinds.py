"""The dataset-kind catalogue: what a kind of dataset is, with its code.

A kind says what a dataset is and how it is read: the schema of every key it reads (the config
schema's `dataset` is filled in from the kinds'), their defaults, the keys it requires, its checks
of a config entry, where and with what its data job runs, whether its epochs are streamed, and
the hub subsets it loads; and its code, which prepares it, opens what was prepared for a run,
makes its small rehearsal sample and counts its training rows (data/__init__.py is the door).

A kind is defined in one module of this package, its record and its code together: digits.py,
images.py (hub, imagefolder, webdataset), nearest_point.py, listops.py, text.py, glue.py (BUILT_IN
names each kind's module). Those modules import neither torch nor pandas when imported (the
Snakefile reads the records; what needs torch is imported inside the code that runs). A job loads
its own kind's module only (`dataset_kind`); the config's schema and checks load them all
(`every_kind`).

To add a kind: in a module of this package (named in BUILT_IN), write its preparation
(writes the manifest), its opening (what its tasks read), its rehearsal sample (`leaner rehearse`
rehearses every variant of a config, so every kind has one) and, where a manifest does not say,
its training rows (`leaner cost`), and below them its record, `add_kind(DatasetKind(..., prepare=,
open=, sample=, rows=, keys=))`; then name the kind in the `dataset_kinds` of the tasks that read
it (tasks/__init__.py). The config's schema and checks, the data rule, every training run, the
rehearsal and the cost read the rest from the record. A kind outside this package: the same,
anywhere (leaner.extend).
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
    # the JSON Schema of every key it reads (besides `kind` and `prepare`): the config's schema takes each
    # kind's (a key several kinds read is one definition: SHARED_KEYS)
    keys: dict[str, dict] = field(default_factory=dict, kw_only=True)
    about: str = field(default="", kw_only=True)  # what it is, in a sentence (the schema's `kind`)

    def __post_init__(self) -> None:
        unknown = [key for key in (*self.defaults, *self.required) if key not in self.keys]
        if unknown:
            raise ValueError(f"dataset kind {self.name!r}: {', '.join(unknown)} without a schema in its `keys` "
                             f"(allowed: {', '.join(self.keys) or 'none'})")


# Keys several kinds read, each one definition (a key means one thing whatever its kind).
SHARED_KEYS: dict[str, dict] = {
    "name": {"type": "string", "minLength": 1, "description": "hub dataset name, e.g. uoft-cs/cifar10"},
    "subset": {"type": ["string", "null"], "description": "hub dataset configuration name"},
    "revision": {"type": "string", "minLength": 1, "description": (
        "data from the hub (kind hub, or source hub): the branch, tag or commit to load, e.g. refs/convert/parquet, "
        "the hub's parquet conversion of a dataset that still ships a loading script (which datasets 4 and later "
        "refuse); absent: the dataset's default branch")},
    "path": {"type": "string", "minLength": 1, "description": (
        "local ImageFolder root, the folder of webdataset shards, or of a text or GLUE dataset's files")},
    "train_split": {"type": "string", "minLength": 1},
    "eval_split": {"type": "string", "minLength": 1},
    "num_classes": {"$ref": "#/$defs/posint"},
    "img_size": {"$ref": "#/$defs/posint"},
    "in_chans": {"$ref": "#/$defs/posint"},
    "seed": {"$ref": "#/$defs/nonnegint", "description": "listops / generated text: generator seed"},
    "n_train": {"$ref": "#/$defs/posint", "description": "training examples (listops: LRA's 96000)"},
    "max_length": {"$ref": "#/$defs/posint", "description": (
        "listops: maximum tokens, the padded length (LRA: 2000); glue: tokens per example")},
    "source": {"enum": ["hub", "files", "generated", "induction"], "description": (
        "text: a hub dataset (name), local text files (path), the project's generated stories, or its induction "
        "lines (a task one layer cannot do); glue: hub or files")},
}


def shared(*names: str) -> dict[str, dict]:
    """The schema of these shared keys (SHARED_KEYS), for a kind's `keys`."""
    return {name: SHARED_KEYS[name] for name in names}


def settings(runtime: int, mem_mb: int, threads: int, local: bool | None) -> dict[str, Any]:
    return {"runtime": runtime, "mem_mb": mem_mb, "threads": threads, "local": local}


KINDS: dict[str, DatasetKind] = scoped_catalogue({})

# Each built-in kind's module in this package, in the catalogue's order: a job imports its kind's
# alone, so a run on digits loads no text or image family (a stage's digest takes the module its
# job loads: provenance.stage_digest).
BUILT_IN = {"digits": "digits", "hub": "images", "imagefolder": "images", "webdataset": "images",
            "nearest_point": "nearest_point", "listops": "listops", "text": "text", "glue": "glue"}


def kind_module(name: str) -> str | None:
    """The module that defines built-in kind `name` (leaner.data.<module>); None for another."""
    return f"{__package__}.{BUILT_IN[name]}" if name in BUILT_IN else None


def kind_modules() -> tuple[str, ...]:
    """Every built-in kind's module (leaner.data.<module>), once each."""
    return tuple(dict.fromkeys(map(kind_module, BUILT_IN)))


def every_kind() -> dict[str, DatasetKind]:
    """Every kind, the built-in ones first in BUILT_IN's order (each module imported), then any added."""
    import importlib

    for module in kind_modules():
        importlib.import_module(module)
    return {**{name: KINDS[name] for name in BUILT_IN}, **KINDS}


def add_kind(kind: DatasetKind) -> DatasetKind:
    """Add a dataset kind's record to the catalogue (refused where the name is taken); returns it."""
    return add_record(KINDS, "dataset kind", kind)



def dataset_schema() -> tuple[dict[str, dict], str]:
    """(the schema of every key some kind reads, the prose of the kinds) for the config's schema;
    a key two kinds define differently is refused."""
    keys: dict[str, dict] = {}
    kinds = every_kind()
    for kind in kinds.values():
        for key, schema in kind.keys.items():
            if keys.setdefault(key, schema) != schema:
                owners = [k.name for k in kinds.values() if key in k.keys]
                raise ValueError(f"dataset key {key!r}: defined differently by kinds {', '.join(owners)} "
                                 f"(allowed: one definition, e.g. in data/kinds.py's SHARED_KEYS)")
    return keys, " ".join(f"{kind.name}: {kind.about}" for kind in kinds.values() if kind.about)


def reading(key: str) -> list[str]:
    """The kinds that read `key`."""
    return [name for name, kind in every_kind().items() if key in kind.keys]


def dataset_kind(name: str) -> DatasetKind:
    """Kind `name`'s record, its module imported where it is a built-in kind not yet loaded."""
    if name not in KINDS and name in BUILT_IN:
        import importlib

        importlib.import_module(kind_module(name))
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown dataset kind {name!r} (allowed: {', '.join(every_kind())})") from None


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
    return [name for name, kind in every_kind().items() if kind.implicit]



