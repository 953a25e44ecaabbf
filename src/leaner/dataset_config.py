"""A dataset's config entry checked and completed: its kind's defaults filled in, what the kind
requires present, local folders resolved against the config's folder, and where its preparation
runs (`prepare`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .config import DATASET_DEFAULTS, DATASET_REQUIRED, REQUIRED_HINTS, TEXT_SOURCE_REQUIRED


def _folder(path: str, base_dir: Path) -> Path:
    """A dataset's folder: as given when absolute, else relative to the config's folder."""
    root = Path(path)
    return root if root.is_absolute() else base_dir / root


IMAGE_KEYS = ("decode", "image_key", "label_key", "mean", "std")  # read only by the image loaders
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")


def _has_image(folder: Path) -> bool:
    return any(entry.is_file() and entry.name.lower().endswith(IMAGE_SUFFIXES) for entry in os.scandir(folder))


def image_folder_problems(name: str, root: Path, spec: dict) -> list[str]:
    """An ImageFolder's layout, read cheaply (folder names, and files until one image is found):
    each split a folder of class folders, some holding images, and the same classes in both (the
    labels follow the sorted class names, so a class missing from one split shifts every label)."""
    problems, classes = [], {}
    for key in ("train_split", "eval_split"):
        folder = root / re.sub(r"\[.*\]$", "", spec[key])  # a slice (train[:6]) reads the whole folder's files
        if not folder.is_dir():
            present = sorted(d.name for d in os.scandir(root) if d.is_dir())
            problems.append(f"config error: datasets.{name}.{key}: {str(folder)!r} does not exist (allowed: a "
                            f"folder of {root} holding one folder per class: {', '.join(present) or 'there are none'})")
            continue
        classes[key] = sorted(d.name for d in os.scandir(folder) if d.is_dir())
        if not any(_has_image(folder / c) for c in classes[key]):
            problems.append(f"config error: datasets.{name}.{key}: no images in {str(folder)!r} (allowed: one folder "
                            f"per class holding image files: {', '.join(IMAGE_SUFFIXES)})")
    if len(classes) == 2 and classes["train_split"] != classes["eval_split"]:
        train, evaluate = set(classes["train_split"]), set(classes["eval_split"])

        def few(names):
            names = sorted(names)
            return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "") or "none"

        problems.append(f"config error: datasets.{name}.eval_split: its class folders differ from train_split's "
                        f"(only in {spec['train_split']}: {few(train - evaluate)}; only in {spec['eval_split']}: "
                        f"{few(evaluate - train)}) (allowed: the same class folders in both; labels follow "
                        f"their sorted names)")
    return problems


def from_hub(spec: dict) -> bool:
    """Whether the dataset is downloaded from the Hugging Face hub (kind hub, or source hub)."""
    return spec["kind"] == "hub" or (spec["kind"] in ("text", "glue") and spec.get("source") == "hub")


def data_spec(spec: dict) -> dict:
    """The entry without its `prepare` settings: what the data is, not where it is prepared, so
    the data rule's params (and every prepared dataset) stay the same when those change."""
    return {key: value for key, value in spec.items() if key != "prepare"}


def _prepare(spec: dict, out: dict) -> dict:
    """The dataset's `prepare` settings: the given keys over its kind's; local null (the default of
    text and glue) is true for data from the hub."""
    settings = {**DATASET_DEFAULTS[spec["kind"]]["prepare"], **(spec.get("prepare") or {})}
    if settings["local"] is None:
        settings["local"] = from_hub(out)
    return settings


def check_dataset(name: str, spec: dict, problems: list[str], base_dir: Path) -> dict:
    """The dataset `name` with every key (`spec` over its kind's defaults); problems are appended."""
    kind = spec["kind"]
    out = {**DATASET_DEFAULTS[kind], **spec}
    for req in DATASET_REQUIRED.get(kind, ()):
        if req not in spec:
            problems.append(f"config error: datasets.{name}.{req}: required for kind {kind} "
                            f"(allowed: {REQUIRED_HINTS.get(req, 'a value')})")
    if kind == "text":
        for req in TEXT_SOURCE_REQUIRED[out["source"]]:
            if req not in spec:
                problems.append(f"config error: datasets.{name}.{req}: required for a text dataset from "
                                f"{out['source']}")
        if out["source"] == "files" and "path" in spec:
            root = _folder(spec["path"], base_dir)
            if not root.is_dir():
                problems.append(f"config error: datasets.{name}.path: {spec['path']!r} does not exist "
                                f"(allowed: a folder holding train_file and eval_file)")
            for key in ("train_file", "eval_file") if root.is_dir() else ():
                if not (root / out[key]).is_file():
                    problems.append(f"config error: datasets.{name}.{key}: {str(root / out[key])!r} does not exist "
                                    f"(allowed: a text file, one document per line)")
            out["path"] = str(root)
    if kind == "glue":
        if out["source"] == "generated":
            problems.append(f"config error: datasets.{name}.source: 'generated' is not allowed for glue "
                            f"(allowed: hub, files)")
        elif out["source"] == "files":
            root = _folder(spec.get("path", ""), base_dir)
            if "path" not in spec or not root.is_dir():
                problems.append(f"config error: datasets.{name}.path: {spec.get('path')!r} is not a directory "
                                f"(allowed: a folder with <task>/train.tsv and <task>/<eval split>.tsv)")
            else:
                out["path"] = str(root)
    if kind == "listops":
        if out["min_length"] > out["max_length"]:
            problems.append(f"config error: datasets.{name}.min_length: {out['min_length']} is above max_length "
                            f"{out['max_length']} (allowed: at most max_length)")
    if kind == "imagefolder" and "path" in spec:
        root = _folder(spec["path"], base_dir)
        if not root.is_dir():
            problems.append(f"config error: datasets.{name}.path: {spec['path']!r} does not exist "
                            f"(allowed: an existing ImageFolder directory with one sub-folder per split)")
        else:
            out["path"] = str(root)
            problems += image_folder_problems(name, root, out)
    if kind == "webdataset" and "path" in spec:
        root = _folder(spec["path"], base_dir)
        out["path"] = str(root)
        if not root.is_dir():
            problems.append(f"config error: datasets.{name}.path: {spec['path']!r} does not exist "
                            f"(allowed: a folder of webdataset tar shards)")
        for key in ("train_split", "eval_split") if root.is_dir() else ():
            if not any(root.glob(f"*{out[key]}-*.tar")):
                problems.append(f"config error: datasets.{name}.{key}: no shards {str(root / f'*{out[key]}-*.tar')!r} "
                                f"(allowed: a folder of webdataset tar shards, named as timm/imagenet-1k-wds's: "
                                f"imagenet1k-{out[key]}-0000.tar, ...)")
    for key in IMAGE_KEYS:
        if key in spec and key not in DATASET_DEFAULTS[kind]:
            takers = ", ".join(k for k, defaults in DATASET_DEFAULTS.items() if key in defaults)
            problems.append(f"config error: datasets.{name}.{key}: not used by kind {kind} (allowed: leave it out; "
                            f"it is for kind {takers})")
    if "revision" in spec and not from_hub(out):
        source = f" from {out['source']}" if "source" in out else ""
        problems.append(f"config error: datasets.{name}.revision: only for data from the hub, this is a {kind} "
                        f"dataset{source} (allowed: kind hub, or source hub)")
    out["prepare"] = _prepare(spec, out)
    return out
