"""Atomic file output: every file is written to a temporary sibling, then renamed into place.

A reader (Snakemake, a resumed run, the aggregation) therefore sees either the old file or the
complete new one, never a half-written one.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it onto `path`, else remove it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual mode
        os.replace(tmp_path, path)
    except (OSError, RuntimeError) as exc:
        if _disk_full(exc, path):
            raise OSError(errno.ENOSPC, f"no space left on device writing {path} "
                                        f"({_free_mb(path):.0f} MB free there; nothing was replaced)") from exc
        raise
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


LOW_SPACE_MB = 64  # below this much free space, a failed write is taken for a full disk


def _free_mb(path: Path) -> float:
    try:
        return shutil.disk_usage(path.parent).free / 2**20
    except OSError:
        return float("nan")


def _disk_full(exc: BaseException, path: Path) -> bool:
    """Whether a failed write ran out of space: ENOSPC/EDQUOT, or a writer that hides it (torch.save
    says only 'unexpected pos ...') with next to no space left beside `path`."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return _free_mb(path) < LOW_SPACE_MB


def remove_stale_temps(directory: str | os.PathLike) -> list[Path]:
    """Delete the temporary copies a killed writer left in `directory` (never read: they were
    not renamed into place). Call only where no other writer can be at work."""
    gone = []
    for tmp in Path(directory).glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
        gone.append(tmp)
    return gone


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _json_safe(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every reader can parse the file."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def write_json(path: str | os.PathLike, data: Any) -> None:
    write_text(path, json.dumps(_json_safe(data), indent=2, sort_keys=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    with open(path) as fh:
        return json.load(fh)


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame as CSV, atomically."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str, manifest_path) -> None:
    """Refuse a file whose contents are not the ones recorded when it was written (truncated,
    corrupted, replaced)."""
    if sha256_file(path) != expected:
        raise ValueError(f"{path}: contents do not match the sha256 in {manifest_path}; re-run the job that wrote it "
                         f"(snakemake --forcerun {path})")


# A run's per-example outcomes in metrics.json (`eval_outcomes`, tasks/base.correct_per_example)
def pack_outcomes(correct) -> str:
    """'N:base64' of a 0/1 vector, 8 examples a byte (ImageNet's 50,000 in 8.3 KB)."""
    import base64

    import numpy as np

    correct = np.asarray(correct, np.uint8)
    return f"{len(correct)}:{base64.b64encode(np.packbits(correct)).decode()}"


def unpack_outcomes(text: str):
    """pack_outcomes' 0/1 vector (numpy uint8)."""
    import base64

    import numpy as np

    n, _, data = str(text).partition(":")
    return np.unpackbits(np.frombuffer(base64.b64decode(data), np.uint8))[:int(n)]
