"""Data for every task: preparation (once, by the data rule) and the splits a task reads
(splits.py). One module per data family; this package only dispatches on the dataset's kind."""

from __future__ import annotations

from .splits import InMemorySplit, LoaderSplit, Splits, batch_indices, epoch_order

__all__ = ["InMemorySplit", "LoaderSplit", "Splits", "batch_indices", "epoch_order", "load_splits", "prepare"]


def prepare(dataset_name: str, spec: dict, out_manifest: str) -> dict:
    """Prepare dataset `dataset_name` (its config `spec`) and write its manifest; returns it."""
    kind = spec["kind"]
    if kind == "digits":
        from .digits import prepare_digits

        return prepare_digits(dataset_name, spec, out_manifest)
    if kind in ("hub", "imagefolder"):
        from .images import prepare_images

        return prepare_images(dataset_name, spec, out_manifest)
    if kind == "webdataset":
        from .shards import prepare_shards

        return prepare_shards(dataset_name, spec, out_manifest)
    if kind == "nearest_point":
        from .nearest_point import prepare_nearest_point

        return prepare_nearest_point(dataset_name, spec, out_manifest)
    if kind == "listops":
        from .listops import prepare_listops

        return prepare_listops(dataset_name, spec, out_manifest)
    if kind == "text":
        from .text import prepare_text

        return prepare_text(dataset_name, spec, out_manifest)
    if kind == "glue":
        from .glue import prepare_glue

        return prepare_glue(dataset_name, spec, out_manifest)
    raise ValueError(f"unknown dataset kind {kind!r} (allowed: digits, hub, imagefolder, webdataset, nearest_point, "
                     "listops, text, glue)")


def load_splits(manifest_path: str, recipe: dict, device_type: str = "cpu") -> Splits:
    """Open a prepared dataset for training and evaluation."""
    from ..io import read_json

    manifest = read_json(manifest_path)
    kind = manifest["kind"]
    if kind == "digits":
        from .digits import load_digits_splits

        return load_digits_splits(manifest_path, manifest)
    if kind in ("hub", "imagefolder", "webdataset"):
        from .images import load_image_splits

        return load_image_splits(manifest, recipe, pin_memory=device_type == "cuda")
    raise ValueError(f"{manifest_path}: unknown dataset kind {kind!r}")
