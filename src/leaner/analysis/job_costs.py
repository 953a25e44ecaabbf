"""What each stage of a run cost, from Snakemake's per-job benchmark files, the warm process's
measure of the jobs it ran and each training job's attempts (its metrics.json)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd

from ..running.handoff import WARM_LINE, child_benchmark, log_of
from .plots import captioned
from .table_render import write_table


def warm_costs(benchmark: Path) -> tuple[float, float] | None:
    """(CPU s, peak MB) of a job that ran in the warm process: its child's benchmark beside
    Snakemake's (running/handoff.py write_child_benchmark), else its log's last line (runs made
    before the child wrote its benchmark); None for a job that ran in its own process."""
    child = child_benchmark(benchmark)
    if child.exists():
        row = pd.read_csv(child, sep="\t").iloc[-1]
        return float(row["cpu_time"]), float(row["max_rss"])
    try:
        with open(log_of(benchmark), "rb") as fh:  # its tail only: a long run's log holds days of progress lines
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            last = fh.read().decode(errors="replace").rstrip().rpartition("\n")[2]
    except OSError:
        return None
    found = re.match(re.escape(WARM_LINE) + r" \(pid \d+\): cpu_s ([\d.]+), peak_mb ([\d.]+)$", last)
    return (float(found[1]), float(found[2])) if found else None


def earlier_attempts(metrics_paths: list[str]) -> dict[tuple[str, str], list[dict]]:
    """{(study, the variant's job name), its attempts before the last}: what a job's retries cost,
    from each training's metrics.json (training/attempts.py; its benchmark file holds only the
    last attempt). An attempt that was killed counts until it was last seen alive."""
    out = {}
    for path in metrics_paths:
        try:
            metrics = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        attempts = metrics.get("attempts") or []
        folder = Path(path).parent.parts  # results/{study}/{variant}[/glue/{task}]: as its benchmark file's name
        if len(attempts) > 1 and metrics.get("study") in folder:
            job = "/".join(p for p in folder[folder.index(metrics["study"]) + 1:] if p != "glue")
            out[(metrics["study"], job)] = attempts[:-1]
    return out


def job_costs(benchmark_paths: list[str], metrics_paths: list[str] = ()) -> pd.DataFrame:
    """Snakemake's per-job benchmark files (logs/benchmarks/{rule}/{study}/...tsv) -> per rule and study:
    jobs, attempts, wall time (median, max, total), peak RSS, CPU time and mean load; a total row last.

    A job that ran in the warm process (leaner/running/handoff.py) is measured by the warm process: its
    benchmark saw only the client. The child's CPU time and peak RSS (its own benchmark file beside
    Snakemake's, `<job>.warm.tsv`) replace the benchmark's; its mean load is that CPU time over its
    wall time. `warm_jobs` counts them. A training or fine-tuning job that took several attempts adds the
    earlier ones' wall and CPU time, from its metrics.json (`metrics_paths`, `earlier_attempts`)."""
    earlier = earlier_attempts(list(metrics_paths))
    rows = []
    for path in benchmark_paths:
        parts = Path(path).parts
        i = len(parts) - 1 - parts[::-1].index("benchmarks") if "benchmarks" in parts else 0
        bench = pd.read_csv(path, sep="\t")
        row = {"rule": parts[i + 1], "study": parts[i + 2] if len(parts) > i + 3 else "-",
               "s": float(bench["s"].iloc[-1]),
               "max_rss_mb": float(pd.to_numeric(bench["max_rss"], errors="coerce").iloc[-1]),
               "cpu_time_s": float(pd.to_numeric(bench["cpu_time"], errors="coerce").iloc[-1]),
               "mean_load": float(pd.to_numeric(bench["mean_load"], errors="coerce").iloc[-1]), "warm": 0}
        warm = warm_costs(Path(path))
        if warm:
            row.update(cpu_time_s=warm[0], max_rss_mb=warm[1], warm=1,
                       mean_load=100 * warm[0] / row["s"] if row["s"] > 0 else float("nan"))
        before = earlier.get((row["study"], str(Path(*parts[i + 3:]).with_suffix(""))), []) \
            if row["rule"] in ("train", "finetune") else []
        row["attempts"] = 1 + len(before)
        for a in before:
            row["s"] += (a.get("ended_unix") or a["last_seen_unix"]) - a["started_unix"]
            row["cpu_time_s"] += a.get("cpu_s") or 0.0
        rows.append(row)
    jobs = pd.DataFrame(rows, columns=["rule", "study", "s", "max_rss_mb", "cpu_time_s", "mean_load", "warm",
                                       "attempts"])

    def cost(rule: str, study: str, g: pd.DataFrame) -> dict:
        return {"rule": rule, "study": study, "jobs": len(g), "attempts": int(g["attempts"].sum()),
                "warm_jobs": int(g["warm"].sum()),
                "wall_s_median": g["s"].median(),
                "wall_s_max": g["s"].max(), "wall_s_total": g["s"].sum(), "max_rss_mb": g["max_rss_mb"].max(),
                "cpu_time_s_total": g["cpu_time_s"].sum(), "mean_load_pct": g["mean_load"].mean()}

    out = [cost(rule, study, g) for (rule, study), g in jobs.groupby(["rule", "study"], sort=True)]
    return pd.DataFrame(out + ([cost("all", "-", jobs)] if len(jobs) else []))


@captioned("job_costs", (
        "What each stage of this run cost, from Snakemake's per-job benchmark files\n"
        "(``benchmarks/{rule}/...``): per rule and study the number of jobs, wall time (median, maximum,\n"
        "total), peak resident memory, total CPU time and mean CPU load; the last row sums the run.\n"
    ))
def write_job_costs(benchmark_paths: list[str], table_dir: str, metrics_paths: list[str] = ()) -> list[Path]:
    return write_table(job_costs(benchmark_paths, metrics_paths), Path(table_dir) / "all_studies-job_costs",
                       "What each stage cost, from Snakemake's per-job benchmark files: wall time (s), peak "
                       "resident memory (MB), CPU time (s) and mean CPU load (%); for the jobs run warm (forked "
                       "from the run's warm process), memory and CPU time are the child's, which the warm "
                       "process measured; a training job's earlier attempts (attempts > jobs: retries after a "
                       "time limit or a failure) add their wall and CPU time, from its metrics.json")
