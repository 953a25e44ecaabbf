"""Data from the Hugging Face hub: every family loads it the same way (name, subset and the
config's `revision`, e.g. a parquet conversion), and names the subsets it needs (the preflight in
hub_check.py asks the hub for each one)."""

from __future__ import annotations


def load_hub_split(spec: dict, subset: str | None, split: str):
    """One split of the hub dataset `spec` (its name and revision) and `subset`."""
    import datasets

    return datasets.load_dataset(spec["name"], subset, split=split, revision=spec.get("revision"))


def hub_subsets(spec: dict) -> list[str | None]:
    """The subsets (configurations) a dataset from the hub is loaded with (its kind's record says:
    e.g. each GLUE task, or the one subset)."""
    from .kinds import dataset_kind

    return dataset_kind(spec["kind"]).hub_subsets(spec)
