"""What each dataset kind checks in its config entry beyond the schema (the kind's `check` in
kinds.py): folders that must exist and hold what the kind reads, and settings that must agree.
Each check returns one line per problem and may complete the entry (a local folder resolved
against the config's folder). Light: no torch, no pandas."""

from __future__ import annotations

import os
import re
from pathlib import Path

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
TEXT_SOURCE_REQUIRED = {"hub": ("name",), "files": ("path",), "generated": (), "induction": ()}


def folder(path: str, base_dir: Path) -> Path:
    """A dataset's folder: as given when absolute, else relative to the config's folder."""
    root = Path(path)
    return root if root.is_absolute() else base_dir / root


def _has_image(where: Path) -> bool:
    return any(entry.is_file() and entry.name.lower().endswith(IMAGE_SUFFIXES) for entry in os.scandir(where))


def image_folder_problems(name: str, root: Path, spec: dict) -> list[str]:
    """An ImageFolder's layout, read cheaply (folder names, and files until one image is found):
    each split a folder of class folders, some holding images, and the same classes in both (the
    labels follow the sorted class names, so a class missing from one split shifts every label)."""
    problems, classes = [], {}
    for key in ("train_split", "eval_split"):
        split = root / re.sub(r"\[.*\]$", "", spec[key])  # a slice (train[:6]) reads the whole folder's files
        if not split.is_dir():
            present = sorted(d.name for d in os.scandir(root) if d.is_dir())
            problems.append(f"config error: datasets.{name}.{key}: {str(split)!r} does not exist (allowed: a "
                            f"folder of {root} holding one folder per class: {', '.join(present) or 'there are none'})")
            continue
        classes[key] = sorted(d.name for d in os.scandir(split) if d.is_dir())
        if not any(_has_image(split / c) for c in classes[key]):
            problems.append(f"config error: datasets.{name}.{key}: no images in {str(split)!r} (allowed: one folder "
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


def check_text(name: str, given: dict, out: dict, base_dir: Path) -> list[str]:
    problems = [f"config error: datasets.{name}.{req}: required for a text dataset from {out['source']}"
                for req in TEXT_SOURCE_REQUIRED[out["source"]] if req not in given]
    if out["source"] == "files" and "path" in given:
        root = folder(given["path"], base_dir)
        if not root.is_dir():
            problems.append(f"config error: datasets.{name}.path: {given['path']!r} does not exist "
                            f"(allowed: a folder holding train_file and eval_file)")
        for key in ("train_file", "eval_file") if root.is_dir() else ():
            if not (root / out[key]).is_file():
                problems.append(f"config error: datasets.{name}.{key}: {str(root / out[key])!r} does not exist "
                                f"(allowed: a text file, one document per line)")
        out["path"] = str(root)
    return problems


def check_glue(name: str, given: dict, out: dict, base_dir: Path) -> list[str]:
    if out["source"] in ("generated", "induction"):
        return [f"config error: datasets.{name}.source: {out['source']!r} is not allowed for glue (allowed: hub, "
                f"files)"]
    if out["source"] == "files":
        root = folder(given.get("path", ""), base_dir)
        if "path" not in given or not root.is_dir():
            return [f"config error: datasets.{name}.path: {given.get('path')!r} is not a directory "
                    f"(allowed: a folder with <task>/train.tsv and <task>/<eval split>.tsv)"]
        out["path"] = str(root)
    return []


def check_listops(name: str, given: dict, out: dict, base_dir: Path) -> list[str]:
    if out["min_length"] > out["max_length"]:
        return [f"config error: datasets.{name}.min_length: {out['min_length']} is above max_length "
                f"{out['max_length']} (allowed: at most max_length)"]
    return []


def check_imagefolder(name: str, given: dict, out: dict, base_dir: Path) -> list[str]:
    root = folder(given["path"], base_dir)
    if not root.is_dir():
        return [f"config error: datasets.{name}.path: {given['path']!r} does not exist "
                f"(allowed: an existing ImageFolder directory with one sub-folder per split)"]
    out["path"] = str(root)
    return image_folder_problems(name, root, out)


def check_webdataset(name: str, given: dict, out: dict, base_dir: Path) -> list[str]:
    root = folder(given["path"], base_dir)
    out["path"] = str(root)
    if not root.is_dir():
        return [f"config error: datasets.{name}.path: {given['path']!r} does not exist "
                f"(allowed: a folder of webdataset tar shards)"]
    return [f"config error: datasets.{name}.{key}: no shards {str(root / f'*{out[key]}-*.tar')!r} "
            f"(allowed: a folder of webdataset tar shards, named as timm/imagenet-1k-wds's: "
            f"imagenet1k-{out[key]}-0000.tar, ...)"
            for key in ("train_split", "eval_split") if not any(root.glob(f"*{out[key]}-*.tar"))]
