"""Writes envs/leaner.yaml from requirements.lock: Python and pip from conda-forge, then every pin
of the lock, line for line, as the environment's pip part. Run it after changing the lock:
    python envs/sync_pins.py
(tests/test_env.py fails while the two disagree)."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE.parent / "requirements.lock"
ENV_FILE = HERE / "leaner.yaml"

HEADER = """\
# Conda environment of every rule (snakemake --sdm conda). Generated from requirements.lock by
# envs/sync_pins.py: change the lock, then run `python envs/sync_pins.py`; do not edit by hand.
# The leaner package itself is installed by leaner.post-deploy.sh, which Snakemake runs once,
# right after creating the environment. Nothing here may be a relative path: Snakemake copies this
# file to .snakemake/conda/<hash>.yaml and conda runs pip in that directory.
name: leaner
channels:
  - conda-forge
  - nodefaults
dependencies:
  - python=3.11
  - pip
  - setuptools>=68  # the build backend of pyproject.toml, for the post-deploy install
  - pip:
"""

PLAIN = re.compile(r"[A-Za-z0-9._-]+==[A-Za-z0-9._+!-]+")  # safe as a YAML plain scalar


def pins(lock: Path = LOCK) -> list[str]:
    """The requirement lines of the lock (comments and blank lines dropped), in order."""
    return [s for line in lock.read_text().splitlines() if (s := line.strip()) and not s.startswith("#")]


def render(lock: Path = LOCK) -> str:
    quoted = [p if PLAIN.fullmatch(p) else "'" + p.replace("'", "''") + "'" for p in pins(lock)]
    return HEADER + "".join(f"      - {p}\n" for p in quoted)


if __name__ == "__main__":
    ENV_FILE.write_text(render())
    print(f"wrote {ENV_FILE} ({len(pins())} pins)")
