"""What every row of benchmarks/run.py shares: the repository and the script (rows 1c and 6b run it
again in processes of their own), the median with its spread, the machine line, the Markdown table,
and another commit's source tree unpacked from git (rows 1c and 1e time it against this one's)."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "benchmarks" / "run.py"
# 1c times another tree: the package is imported inside the functions, so that this script runs
# with an older tree's as well
sys.path.insert(0, os.environ.get("LEANER_BENCH_SRC", str(REPO / "src")))


def median_spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{statistics.median(values):.4g} ({min(values):.4g}-{max(values):.4g})"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {gpu}; Python {platform.python_version()}, "
            f"torch {torch.__version__}")


def table(title: str, header: list[str], rows: list[list]) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _unpack(rev: str | None, dest: Path) -> tuple[Path | None, str]:
    """(the src/ of commit `rev`, unpacked from git into `dest` with its schemas, or None; a note
    saying why not)."""
    if not rev:
        return None, ""
    dest.mkdir(parents=True)
    archive = subprocess.run(f"git -C {REPO} archive {rev} src schemas | tar -x -C {dest}", shell=True,
                             capture_output=True, text=True)
    if archive.returncode:
        return None, f" The baseline {rev} could not be unpacked: {archive.stderr.strip()[:200]}"
    return dest / "src", ""
