"""Preparing an image dataset once, before its jobs: both splits resolved (from the hub, a local
ImageFolder, or webdataset shards), their columns and class count checked, and the manifest the
training jobs read written; and opening a split again from the Arrow files preparation left."""

from __future__ import annotations

from pathlib import Path

from ..io import write_json
from .hub import load_hub_split


def load_split(meta: dict, split: str):
    """One split: from the Arrow files its preparation left (memory-mapped, in milliseconds) where
    they are on this machine, else through `datasets` (which resolves an ImageFolder again by
    walking the whole tree, seconds for 1,000 class folders and far longer for ImageNet's 1.28M
    files, and asks the hub again for a hub dataset)."""
    import datasets

    prepared = meta.get("arrow_files", {}).get(split)
    if prepared and all(Path(f).is_file() for f in prepared["files"]):
        ds = datasets.concatenate_datasets([datasets.Dataset.from_file(f) for f in prepared["files"]])
        if len(ds) == prepared["rows"]:
            return ds
    if meta["kind"] == "hub":
        return load_hub_split(meta, meta.get("subset"), split)
    return datasets.load_dataset("imagefolder", data_dir=meta["path"], split=split)


def _label_count(ds, label_key: str) -> int | None:
    feature = ds.features.get(label_key)
    return getattr(feature, "num_classes", None)


def prepare_webdataset(name: str, spec: dict, out_manifest: str) -> dict:
    from .shards import prepare_shards

    return prepare_shards(name, spec, out_manifest)


def prepare_images(name: str, spec: dict, out_manifest: str) -> dict:
    """Resolve both splits once (downloading into the Hugging Face cache if needed), check
    their columns and class count, and write the manifest the training jobs read."""
    splits, arrow = {}, {}
    for role in ("train_split", "eval_split"):
        ds = load_split(spec, spec[role])
        for key in (spec["image_key"], spec["label_key"]):
            if key not in ds.column_names:
                raise ValueError(f"dataset {name!r} split {spec[role]!r} has no column {key!r} "
                                 f"(columns: {', '.join(ds.column_names)})")
        n_classes = _label_count(ds, spec["label_key"])
        if n_classes is not None and n_classes != spec["num_classes"]:
            raise ValueError(f"dataset {name!r}: num_classes is {spec['num_classes']} in the config but the "
                             f"{spec['label_key']!r} column has {n_classes} classes")
        splits[role] = {"split": spec[role], "rows": len(ds), "fingerprint": ds._fingerprint}
        if "[" not in spec[role]:  # a slice's cache files hold the whole split
            arrow[spec[role]] = {"files": [f["filename"] for f in ds.cache_files], "rows": len(ds)}
    manifest = {"dataset": name, **spec, "n_train": splits["train_split"]["rows"],
                "n_eval": splits["eval_split"]["rows"], "splits": splits, "arrow_files": arrow}
    write_json(out_manifest, manifest)
    return manifest
