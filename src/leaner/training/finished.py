"""A finished run's outputs, kept where Snakemake does not delete them, for a job on a cluster.

When Snakemake takes a cluster job for failed, it deletes its outputs, and when it tries the job
again it deletes them first: a job that trained to its end can still lose its result. This
happens (a) to every member of a group of variants sharing a GPU (one Slurm job) when one of them
fails or the group meets its time limit, and (b) to a job that ends in the seconds Slurm gives it
after its time limit (Slurm reports TIMEOUT). So a training job inside a Slurm job gives each
output a second name when it finishes (hard links: no second copy on disk) under
`.resume/finished/`, with `finished.json` naming its spec and files; the job run again finds them,
puts them back in place and ends at once (`restore`). The Snakemake that starts a run drops this
copy for a job it runs for any reason other than missing outputs (forced, new params, new input or
code: `drop`), so `--forcerun` and a changed spec still retrain. A local run (no groups; a failed
job's outputs are its own) keeps nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..io import read_json, write_json
from .attempts import FINISHED_FILE, RESUME_DIR, spec_digest
from .watchers import Watcher

FINISHED_DIR = "finished"


def wanted(environ=os.environ) -> bool:
    """Whether a job keeps its finished outputs: inside a Slurm job."""
    return bool(environ.get("SLURM_JOB_ID"))


class KeepFinished(Watcher):
    """A watcher of the loop: once a run's outputs are written, inside a Slurm job (`wanted`), their
    second names (`keep`)."""

    def __init__(self, spec_json: str, environ=os.environ):
        self.spec_json, self.wanted = spec_json, wanted(environ)

    def finished(self, out: Path) -> None:
        if self.wanted:
            keep(out, self.spec_json)


def _link(source: Path, target: Path) -> None:
    """`target` as a second name of `source`, replacing what is there (a copy where the filesystem
    has no hard links)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.link.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copy2(source, tmp)
    os.replace(tmp, target)


def _outputs(out: Path) -> list[Path]:
    """The run's outputs, relative to its folder (metrics.json last)."""
    names = [p.relative_to(out) for p in sorted(out.glob("checkpoints/*.safetensors"))]
    names += [Path(n) for n in ("init.safetensors", "model.safetensors", "history.csv", "metrics.json")]
    return [n for n in names if (out / n).exists()]


def keep(out: Path, spec_json: str) -> None:
    """The finished run's outputs under .resume/finished/, named in finished.json (written last)."""
    folder = out / RESUME_DIR / FINISHED_DIR
    shutil.rmtree(folder, ignore_errors=True)
    files = _outputs(out)
    for name in files:
        _link(out / name, folder / name)
    write_json(out / RESUME_DIR / FINISHED_FILE, {"spec": spec_digest(spec_json),
                                                  "files": {str(n): (out / n).stat().st_size for n in files}})


def restore(out: Path, spec_json: str) -> list[str] | None:
    """Put a finished run of this spec back in place (the outputs' names it restored), or None
    where there is none whole: another spec's, a file missing or of another size."""
    record = out / RESUME_DIR / FINISHED_FILE
    try:
        kept = read_json(record)
    except (FileNotFoundError, ValueError):
        return None
    folder = out / RESUME_DIR / FINISHED_DIR
    files = kept.get("files", {}) if kept.get("spec") == spec_digest(spec_json) else {}
    if not files or any(not (folder / n).is_file() or (folder / n).stat().st_size != size
                        for n, size in files.items()):
        return None
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)  # a directory output, perhaps with nothing kept
    for name in sorted(files, key=lambda n: n == "metrics.json"):  # metrics.json last, as training writes it
        _link(folder / name, out / name)
    return sorted(files)


def kept(out: Path) -> bool:
    """Whether a finished run is kept here."""
    return (out / RESUME_DIR / FINISHED_FILE).exists()


def drop(out: Path) -> bool:
    """Forget a finished run kept here (True where there was one)."""
    record = out / RESUME_DIR / FINISHED_FILE
    had = record.exists()
    record.unlink(missing_ok=True)
    shutil.rmtree(out / RESUME_DIR / FINISHED_DIR, ignore_errors=True)
    return had
