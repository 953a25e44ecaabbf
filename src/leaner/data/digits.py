"""scikit-learn's bundled 8x8 digits: the default study's data, no download needed.

`img_size` a multiple of 8 repeats each pixel to that side (e.g. 32 for a timm backbone's
stride-8 or stride-4 stem); the images are the same.

Preparation fixes the train/test split (a seeded permutation, recorded index by index) and the
standardisation (one mean and std over all training pixels), and writes them once.

`validation_fraction` carves a validation split out of the training rows (a second seeded
permutation of them): the run then trains on the rest and evaluates on the validation rows, and
the test rows are not written at all, so a recipe chosen on it (`leaner tune`) never saw them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io import atomic_path, read_json, sha256_file, write_json
from ..runspec import RunSpec
from .kinds import DatasetKind, add_kind, settings, shared


def prepare_digits(name: str, spec: dict, out_manifest: str) -> dict:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = bunch.data.astype(np.float32).reshape(-1, 1, 8, 8)
    size = spec.get("img_size", 8)
    if size % 8:
        raise ValueError(f"datasets.{name}.img_size: {size} is not a multiple of the digits' 8 pixels "
                         f"(allowed: 8, 16, 24, 32, ...: each pixel repeated img_size/8 times a side)")
    x = np.kron(x, np.ones((1, 1, size // 8, size // 8), dtype=np.float32))  # larger backbones' stems
    y = bunch.target.astype(np.int64)
    n = len(y)
    perm = np.random.default_rng(spec["split_seed"]).permutation(n)
    n_test = int(round(n * spec["test_fraction"]))
    test_idx, train_idx = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    held_out, eval_split = test_idx, "test"
    if spec.get("validation_fraction"):
        inner = np.random.default_rng([spec["split_seed"], 1]).permutation(train_idx)
        n_val = int(round(len(train_idx) * spec["validation_fraction"]))
        held_out, train_idx, eval_split = np.sort(inner[:n_val]), np.sort(inner[n_val:]), "validation"
    mean, std = float(x[train_idx].mean()), float(x[train_idx].std())
    x = (x - mean) / std

    out_manifest = Path(out_manifest)
    arrays = out_manifest.with_name("digits.npz")
    with atomic_path(arrays) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, x_train=x[train_idx], y_train=y[train_idx], x_test=x[held_out], y_test=y[held_out],
                     train_idx=train_idx, test_idx=held_out)
    manifest = {
        "dataset": name, "kind": "digits", "source": "sklearn.datasets.load_digits",
        "split_seed": spec["split_seed"], "test_fraction": spec["test_fraction"],
        "n_train": int(len(train_idx)), "n_eval": int(len(held_out)),
        "num_classes": 10, "img_size": size, "in_chans": 1,
        "standardise": {"mean": mean, "std": std},
        "arrays": arrays.name, "sha256": sha256_file(arrays),
    }
    if eval_split == "validation":
        manifest.update(validation_fraction=spec["validation_fraction"], eval_split="validation")
    write_json(out_manifest, manifest)
    return manifest


def load_digits_splits(manifest_path: str, manifest: dict | None = None):
    import torch

    from .splits import InMemorySplit, Splits

    manifest = manifest or read_json(manifest_path)
    arrays = Path(manifest_path).with_name(manifest["arrays"])
    if sha256_file(arrays) != manifest["sha256"]:
        raise RuntimeError(f"{arrays}: contents do not match the manifest's sha256; re-run the data rule")
    with np.load(arrays) as z:
        train = InMemorySplit(torch.from_numpy(z["x_train"]), torch.from_numpy(z["y_train"]))
        test = InMemorySplit(torch.from_numpy(z["x_test"]), torch.from_numpy(z["y_test"]))
    return Splits(train=train, eval=test, meta=manifest)


def open_digits(manifest_path: str, spec: RunSpec, device):
    """What a run reads (the kind's `open`): both splits in memory."""
    return load_digits_splits(manifest_path)


DIGITS_ROWS = 1797  # scikit-learn's bundled digits


def digits_rows(entry: dict, manifest: dict | None, spec: RunSpec) -> int:
    """What the test fraction (and a validation fraction) leave of the bundled digits."""
    train = DIGITS_ROWS - int(round(DIGITS_ROWS * entry["test_fraction"]))
    return train - int(round(train * (entry.get("validation_fraction") or 0)))


def digits_sample(name: str, entry: dict, folder: Path) -> dict:
    """The bundled data itself (it is small)."""
    return entry


# The kind this module defines: its record, with the code above.
add_kind(DatasetKind(
    "digits", {"test_fraction": 0.2, "split_seed": 0, "num_classes": 10, "img_size": 8, "in_chans": 1},
    settings(10, 2000, 1, False), implicit=True,
    tasks_read="splits.Splits of two InMemorySplits (standardised 8x8 images, labels)",
    prepare=prepare_digits, open=open_digits, sample=digits_sample, rows=digits_rows,
    keys={"test_fraction": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
          "validation_fraction": {"type": ["number", "null"], "exclusiveMinimum": 0, "exclusiveMaximum": 1,
                                  "description": "carve this share of the training rows as the eval split "
                                                 "(the test rows are then not written; leaner tune's split)"},
          "split_seed": {"$ref": "#/$defs/nonnegint"}, **shared("num_classes", "img_size", "in_chans")},
    about="scikit-learn's bundled 8x8 digits (no download)."))
