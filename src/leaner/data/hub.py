"""Data from the Hugging Face hub: every family loads it the same way (name, subset and the
config's `revision`, e.g. a parquet conversion)."""

from __future__ import annotations


def load_hub_split(spec: dict, subset: str | None, split: str):
    """One split of the hub dataset `spec` (its name and revision) and `subset`."""
    import datasets

    return datasets.load_dataset(spec["name"], subset, split=split, revision=spec.get("revision"))
