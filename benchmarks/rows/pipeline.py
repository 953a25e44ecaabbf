"""Rows 1e, 3, 4 and 6a of benchmarks/run.py, the workflow around the jobs: what a stage's job imports
before it works, `snakemake -n` on generated grids and the paper config, and the default study end
to end (on a GPU machine, against the same machine's CPU alone)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from .common import REPO, _unpack, median_spread, table

# ----------------------------------------------------------------------------- 1e. job start-up

STARTUP_REV = "05f4347"  # the tree before the workflow layer and the catalogues (issue 26)
# What a job of each stage of the default study imports before it works: the CLI, then the modules
# its command and its task's classes load (the same modules in both trees, but for BASELINE_STAGES).
STARTUP_STAGES = {
    "prepare-data (digits)": ("leaner.cli", "leaner.data", "leaner.data.digits", "sklearn.datasets"),
    "train (P2, nearest_point)": ("leaner.cli", "leaner.training.train", "leaner.tasks.nearest",
                                  "leaner.models.nearest"),
    "train (ViT, digits)": ("leaner.cli", "leaner.training.train", "leaner.tasks.image", "leaner.models.vit",
                            "leaner.data.digits"),
    "train (ListOps)": ("leaner.cli", "leaner.training.train", "leaner.tasks.sequence", "leaner.models.sequence"),
    "conditioning (P2)": ("leaner.cli", "leaner.measure.conditioning", "leaner.tasks.nearest", "leaner.models.nearest"),
    "summary": ("leaner.cli", "leaner.analysis.summary"),
    "report": ("leaner.cli", "leaner.analysis.report", "matplotlib.pyplot"),
}
# Where the baseline tree's job imported other modules for the same work: its figures, tables and
# overview jobs, which one report job does now.
BASELINE_STAGES = {"report": ("leaner.cli", "leaner.analysis.study_figures", "leaner.analysis.study_tables",
                              "leaner.analysis.overview", "matplotlib.pyplot")}


def _startup_of(src: Path, modules: tuple[str, ...]) -> dict:
    """Wall and CPU seconds a fresh interpreter takes to import `modules` from source tree `src`,
    and the heavy packages that came with them."""
    code = ("import importlib, json, sys, time\n"
            "t, c = time.perf_counter(), time.process_time()\n"
            f"for m in {list(modules)!r}: importlib.import_module(m)\n"
            "heavy = sorted({m.split('.')[0] for m, mod in sys.modules.items() if mod} & {'torch', 'timm', "
            "'torchvision', 'pandas', 'scipy', 'matplotlib', 'sklearn', 'sympy', 'triton'})\n"
            "print(json.dumps({'wall': time.perf_counter() - t, 'cpu': time.process_time() - c, 'heavy': heavy}))")
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=src.parent)
    if out.returncode != 0:
        raise RuntimeError(f"row 1e with {src} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_startup(repeats: int, work: Path, quick: bool, baseline_rev: str | None) -> str:
    """Each stage's imports, the cost every job of it pays before it works, in this tree and in
    baseline_rev's (unpacked from git), alternating fresh processes."""
    stages = dict(list(STARTUP_STAGES.items())[:2]) if quick else STARTUP_STAGES
    trees = {"this tree": REPO / "src"}
    baseline, note = _unpack(baseline_rev, work / "startup-baseline")
    if baseline:
        trees[baseline_rev] = baseline
    rows = []
    for stage, modules in stages.items():
        cpu: dict[str, list[float]] = {label: [] for label in trees}
        wall: dict[str, list[float]] = {label: [] for label in trees}
        heavy = []
        for _ in range(repeats):  # alternate, so that a slow spell of the machine hits both
            for label, src in trees.items():
                measured = _startup_of(src, modules if label == "this tree" else BASELINE_STAGES.get(stage, modules))
                cpu[label].append(measured["cpu"])
                wall[label].append(measured["wall"])
                heavy = measured["heavy"] if label == "this tree" else heavy
        row = [stage, ", ".join(heavy) or "-"] + [f"{median_spread(cpu[label])} s CPU, {median_spread(wall[label])} s"
                                                  for label in trees]
        if len(trees) == 2:
            row.append(median_spread([a / b for a, b in zip(*cpu.values())]))
        rows.append(row)
    header = ["stage", "heavy packages imported", *(f"imports, {label}" for label in trees)]
    header += ["CPU ratio, this tree / " + baseline_rev] if len(trees) == 2 else []
    text = table("1e. job start-up: what each stage's job imports before it works", header, rows)
    return text + ("\nA fresh interpreter importing the CLI and the modules the stage's command and task load; "
                   f"median (min-max) of {repeats}.{note}\n")


# ----------------------------------------------------------------------------- 3. DAG resolution

def _grid_config(n_variants: int) -> dict:
    """A ViT study on digits with about n_variants variants: depth x heads x seeds."""
    depths, heads = list(range(1, 11)), [1, 2, 4, 8, 16]
    seeds = max(1, n_variants // (len(depths) * len(heads)))
    return {"studies": {"grid": {"task": "image_classification", "dataset": "digits", "model": {"patch_size": 2},
                                 "grid": {"protocol": ["fixed_width"], "width": [64], "depth": depths,
                                          "heads": heads, "mlp_ratio": [2], "seeds": list(range(seeds))}}},
            "theory": {"draws": 2, "tokens": [17], "head_dim": [8], "width": [64], "heads": [1, 2]}}


def _dry_run(config: Path, work: Path) -> float:
    cmd = [str(Path(sys.executable).parent / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work), "-n",
           "--cores", "2", "--quiet", "all", "--configfile", str(config)]
    t0 = time.perf_counter()
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(cmd, check=True, capture_output=True, cwd=work)
    return time.perf_counter() - t0


def bench_dag(repeats: int, work: Path, quick: bool) -> str:
    import yaml

    from leaner.workflow.plan import build_plan

    rows = []
    for n in ([50, 100] if quick else [100, 500, 1000, 2000]):
        cfg = _grid_config(n)
        variants = sum(len(s.variants) for s in build_plan(cfg).studies.values())
        path = work / f"grid{n}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        times = [_dry_run(path, work / f"dag{n}") for _ in range(repeats)]
        rows.append([f"grid of {variants}", variants, median_spread(times),
                     f"{1e3 * statistics.median(times) / variants:.2f}"])
    if not quick:
        times = [_dry_run(REPO / "configs" / "paper.yaml", work / "dag_paper") for _ in range(repeats)]
        rows.append(["configs/paper.yaml (target < 10 s)", 764, median_spread(times),
                     f"{1e3 * statistics.median(times) / 764:.2f}"])
    return table("3. `snakemake -n` (DAG resolution)", ["config", "variants", "seconds", "ms per variant"], rows) + \
        "\nEach variant is two jobs (train, conditioning); the time includes Snakemake's start (~1.5 s).\n"


# ----------------------------------------------------------------------------- 4. end to end

def bench_e2e(work: Path) -> str:
    import resource

    cmd = [str(Path(sys.executable).parent / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work),
           "--cores", "all", "--quiet", "all"]
    work.mkdir(parents=True, exist_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=work)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return table("4. Default study end to end (`snakemake --cores all`, clean folder, one run)",
                 ["wall", "CPU time", "CPU use", "cores"],
                 [[f"{wall / 60:.2f} min", f"{cpu / 60:.2f} min", f"{100 * cpu / wall:.0f}%", os.cpu_count()]])


# ----------------------------------------------------------------------------- 6. GPU machines

def bench_gpu_e2e(work: Path) -> str:
    """The default study (all `gpu: 0`) with `snakemake --cores all` on a GPU machine, against the
    same machine with CUDA hidden: the jobs must not queue on the GPU."""
    title = "6a. Default study on a GPU machine against its CPU alone (`snakemake --cores all`)"
    if not torch.cuda.is_available():
        return table(title, ["result"], [["skipped: no CUDA device on this machine"]])
    rows = []
    for label, env in (("CUDA visible", {}), ("CPU alone (CUDA_VISIBLE_DEVICES='')", {"CUDA_VISIBLE_DEVICES": ""})):
        folder = work / label.split()[0].lower()
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "snakemake"), "-s", str(REPO / "Snakefile"), "-d",
                        str(folder), "--cores", "all", "--quiet", "all"], check=True, capture_output=True,
                       cwd=folder, env={**os.environ, **env})
        rows.append([label, f"{(time.perf_counter() - t0) / 60:.2f} min", os.cpu_count()])
    return table(title, ["run", "wall", "cores"], rows)
