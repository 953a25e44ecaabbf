"""Data for every task: preparation (once, by the data rule) and what a run reads (splits.py).
One module per data family, each defining its kinds (record and code, kinds.py says how), each
imported when its kind is first asked for (kinds.dataset_kind); this package's doors (`prepare`,
`open_data`, `rehearsal_sample`, `train_rows`) go through the code each kind's record carries, for
every kind."""

from __future__ import annotations

from typing import Any

from ..runspec import RunSpec
from ..schema import Recipe
from .kinds import dataset_kind
from .splits import InMemorySplit, LoaderSplit, Splits, batch_indices, epoch_order

__all__ = ["InMemorySplit", "LoaderSplit", "Splits", "batch_indices", "epoch_order", "load_splits", "open_data",
           "prepare", "rehearsal_sample", "train_rows"]


def prepare(dataset_name: str, spec: dict, out_manifest: str) -> dict:
    """Prepare dataset `dataset_name` (its config `spec`) and write its manifest; returns it."""
    return dataset_kind(spec["kind"]).prepare(dataset_name, spec, out_manifest)


def open_data(manifest_path: str, spec: RunSpec, device: Any = "cpu") -> Any:
    """What a run of `spec` reads from a prepared dataset (its kind's `open`: kinds.py says what)."""
    from ..io import read_json

    kind = read_json(manifest_path)["kind"]
    try:
        opener = dataset_kind(kind).open
    except ValueError as err:
        raise ValueError(f"{manifest_path}: {err}") from None
    return opener(manifest_path, spec, device)


def rehearsal_sample(dataset_name: str, spec: dict, folder) -> dict:
    """The entry to prepare as a small sample of dataset `dataset_name` (its config `spec`), of its
    kind and shape, for `leaner rehearse`; files it needs are made under `folder`."""
    return dataset_kind(spec["kind"]).sample(dataset_name, spec, folder)


def train_rows(spec: dict, manifest: dict | None, job_spec: RunSpec) -> int | None:
    """The training rows of a job (`job_spec`) on dataset `spec`: its prepared manifest's `n_train`
    where it says, else what its kind knows (its `rows`); None where neither does."""
    if manifest and "n_train" in manifest:
        return int(manifest["n_train"])
    rows = dataset_kind(spec["kind"]).rows
    return rows(spec, manifest, job_spec) if rows else None


def load_splits(manifest_path: str, recipe: Recipe, device_type: str = "cpu") -> Splits:
    """The splits of a prepared image dataset (digits, hub, imagefolder, webdataset) as a run with
    this recipe reads them: `open_data` where only the recipe is known (an image kind's opening
    reads no other field of the run's spec)."""
    from types import SimpleNamespace

    return open_data(manifest_path, SimpleNamespace(recipe=recipe), device_type)
