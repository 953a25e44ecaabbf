"""Data for every task: preparation (once, by the data rule) and what a run reads (splits.py).
One module per data family; the kinds of dataset and what each does are in kinds.py, and this
package's two doors, `prepare` and `open_data`, go through it for every kind."""

from __future__ import annotations

from typing import Any

from ..entry import resolve
from .kinds import dataset_kind
from .splits import InMemorySplit, LoaderSplit, Splits, batch_indices, epoch_order

__all__ = ["InMemorySplit", "LoaderSplit", "Splits", "batch_indices", "epoch_order", "load_splits", "open_data",
           "prepare"]


def prepare(dataset_name: str, spec: dict, out_manifest: str) -> dict:
    """Prepare dataset `dataset_name` (its config `spec`) and write its manifest; returns it."""
    return resolve(dataset_kind(spec["kind"]).prepare)(dataset_name, spec, out_manifest)


def open_data(manifest_path: str, spec: dict, device: Any = "cpu") -> Any:
    """What a run of `spec` reads from a prepared dataset (its kind's `open`: kinds.py says what)."""
    from ..io import read_json

    kind = read_json(manifest_path)["kind"]
    try:
        opener = dataset_kind(kind).open
    except ValueError as err:
        raise ValueError(f"{manifest_path}: {err}") from None
    return resolve(opener)(manifest_path, spec, device)


def load_splits(manifest_path: str, recipe: dict, device_type: str = "cpu") -> Splits:
    """The splits of a prepared image dataset (digits, hub, imagefolder, webdataset): `open_data`
    for a run with this recipe."""
    return open_data(manifest_path, {"recipe": recipe}, device_type)
