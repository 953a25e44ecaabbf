"""`leaner catalogue`: the index of every figure and table a study may show (src/leaner/catalogue.json)
and their captions (report/<figures|tables>/<name>.rst), written from their definitions (shown.py),
which the Snakefile's side reads without importing the drawing code."""

from __future__ import annotations

from pathlib import Path

from ..io import write_text
from ..shown import index_files
from . import study_figures, study_tables  # noqa: F401  (they load every figure's and table's definition)

SOURCE_ROOT = Path(__file__).resolve().parents[3]


def catalogue_files() -> dict[str, str]:
    """{path relative to the source tree: text} of the index and the captions, from the definitions."""
    return index_files()


def stale_files(root: Path = SOURCE_ROOT) -> list[str]:
    """The files under `root` that differ from what the definitions give (missing ones too)."""
    return [rel for rel, text in catalogue_files().items()
            if not (root / rel).is_file() or (root / rel).read_text() != text]


def write_catalogue(root: Path = SOURCE_ROOT, check: bool = False) -> list[str]:
    """Write the stale files under `root` (a source tree: its report/ and src/leaner/), or with
    `check` only name them; returns them."""
    if not (root / "report").is_dir() or not (root / "src" / "leaner").is_dir():
        raise ValueError(f"{root}: not a source tree of this project (no report/ or src/leaner/ there)")
    stale = stale_files(root)
    if not check:
        files = catalogue_files()
        for rel in stale:
            write_text(root / rel, files[rel])
    return stale
