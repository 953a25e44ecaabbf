"""`leaner catalogue`: what is written from the catalogues' definitions for those who cannot import
them or read no Python: the index of every figure and table a study may show
(src/leaner/catalogue.json, which the Snakefile's side reads without the drawing code: shown.py),
their captions (report/<figures|tables>/<name>.rst), and the config's schema whole, its dataset
keys filled in from the kinds (schemas/config.schema.json, for editors and readers)."""

from __future__ import annotations

import json
from pathlib import Path

from .analysis import study_figures, study_tables  # noqa: F401  (they load every figure's and table's definition)
from .io import write_text
from .shown import index_files
from .workflow.config import config_schema

SOURCE_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_JSON = "schemas/config.schema.json"


def catalogue_files() -> dict[str, str]:
    """{path relative to the source tree: text} of the index, the captions and the schema, from the
    definitions."""
    return {**index_files(), SCHEMA_JSON: json.dumps(config_schema(), indent=1) + "\n"}


def stale_files(root: Path = SOURCE_ROOT, files: dict[str, str] | None = None) -> list[str]:
    """The files under `root` that differ from what the definitions give (`files`, else
    catalogue_files(); missing ones too)."""
    files = catalogue_files() if files is None else files
    return [rel for rel, text in files.items() if not (root / rel).is_file() or (root / rel).read_text() != text]


def write_catalogue(root: Path = SOURCE_ROOT, check: bool = False) -> list[str]:
    """Write the stale files under `root` (a source tree: its report/ and src/leaner/), or with
    `check` only name them; returns them."""
    if not all((root / folder).is_dir() for folder in ("report", "schemas", "src/leaner")):
        raise ValueError(f"{root}: not a source tree of this project (no report/, schemas/ or src/leaner/ there)")
    files = catalogue_files()
    stale = stale_files(root, files)
    if not check:
        for rel in stale:
            write_text(root / rel, files[rel])
    return stale
