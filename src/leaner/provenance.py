"""Which code produced a result: the package version and, in a git checkout, the commit and
whether the working tree differed from it (recorded in every metrics.json, shown by
`leaner --version`)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from . import __version__

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout holding src/leaner, if it is one


@functools.cache
def code_state() -> dict:
    """{"version", "commit", "dirty"}: commit and dirty are None outside a git checkout (an
    installed copy) or without git; dirty means tracked files differ from the commit."""
    state = {"version": __version__, "commit": None, "dirty": None}
    try:
        commit = subprocess.run(["git", "-C", str(SOURCE_ROOT), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10)
        if commit.returncode != 0:
            return state
        changed = subprocess.run(["git", "-C", str(SOURCE_ROOT), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return state
    state["commit"] = commit.stdout.strip()
    state["dirty"] = bool(changed.stdout.strip()) if changed.returncode == 0 else None
    return state


def describe() -> str:
    """'leaner 0.1.0 (commit 1a2b3c4d, with local changes)', for --version and log headers."""
    s = code_state()
    if s["commit"] is None:
        return f"leaner {s['version']}"
    return f"leaner {s['version']} (commit {s['commit'][:10]}{', with local changes' if s['dirty'] else ''})"


# The Snakefile puts each study's claims digest (workflow/plan.claims_digest) here for its jobs: a
# run records the declaration its study had when it trained (metrics.json `claims_digest`), so
# that the claims table can tell a declaration changed after its runs.
CLAIMS_ENV = "LEANER_CLAIMS_DIGESTS"


def claims_declared(study: str) -> str | None:
    """The digest of `study`'s claims block the running workflow declares; None outside one."""
    import json
    import os

    try:
        return json.loads(os.environ.get(CLAIMS_ENV) or "{}").get(study)
    except ValueError:
        return None
