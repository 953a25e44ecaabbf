"""Ten vit_digits seeds (train + conditioning each, as their 20 jobs run them) handed to one warm
process against ten fresh processes each: wall and CPU seconds, alternating, min/median/max.

    .venv/bin/python benchmarks/warm.py [--repeats 3] [--seeds 10] [--variant L3-H4-W64-s] [--out FILE]

The warm side includes starting the warm process (its imports) and stopping it, as a run does. The
jobs run one after another on one thread each (the study's `threads: 1`), so the figures are the
jobs' own, not the two cores' overlap. Prints a Markdown table (and writes it to --out).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
BIN = Path(sys.executable).parent


def specs(seeds: int, variant: str) -> list[dict]:
    """The default study's vit_digits specs of one configuration, seeds 0..seeds-1."""
    from leaner.workflow.config import load_yaml
    from leaner.workflow.plan import build_plan

    plan = build_plan(load_yaml(REPO / "config.yaml"))
    study = plan.studies["vit_digits"]
    return [json.loads(plan.variant("vit_digits", f"{variant}{s}").spec_json()) for s in range(seeds)
            if f"{variant}{s}" in study.variants]


def jobs(spec: dict, manifest: Path, out: Path) -> list[list[str]]:
    common = ["--threads", "1", "--numerics", "pinned"]
    return [["train", "--spec", json.dumps(spec), "--data", str(manifest), "--out", str(out), "--no-progress",
             *common],
            ["conditioning", "--metrics", str(out / "metrics.json"), "--init", str(out / "init.safetensors"),
             "--final", str(out / "model.safetensors"), "--data", str(manifest), "--out",
             str(out / "conditioning.csv"), *common]]


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_side(specs_: list[dict], manifest: Path, work: Path, warm: bool) -> tuple[float, float]:
    """(wall s, CPU s) of every seed's two jobs, one after another, cold or handed to a warm process."""
    env = {k: v for k, v in os.environ.items() if k != "LEANER_WARM"}
    env["LEANER_DEVICE"] = "cpu"
    cpu0, t0 = cpu_of_children(), time.perf_counter()
    server = None
    if warm:
        path = str(work / "w.sock")
        server = subprocess.Popen([sys.executable, "-m", "leaner.warm", "--socket", path, "--numerics", "pinned"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        while not os.path.exists(path):
            time.sleep(0.01)
        env["LEANER_WARM"] = path
    for i, spec in enumerate(specs_):
        for args in jobs(spec, manifest, work / f"run{i}"):
            subprocess.run([str(BIN / "leaner"), *args], env=env, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    if server:
        server.terminate()
        server.wait()
    return time.perf_counter() - t0, cpu_of_children() - cpu0


def spread(values: list[float], digits: int = 1) -> str:
    """median (min-max)"""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--variant", default="L3-H4-D64-hd16-mlp128-s", help="the configuration's id without its seed")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    from leaner.data import prepare

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifest = root / "digits" / "manifest.json"
        prepare("digits", {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}, str(manifest))
        todo = specs(a.seeds, a.variant)
        assert len(todo) == a.seeds, f"{a.variant}: {len(todo)} seeds in config.yaml"
        got: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for r in range(a.repeats):
            for warm in (False, True) if r % 2 == 0 else (True, False):
                work = root / f"{'warm' if warm else 'cold'}{r}"
                work.mkdir()
                got[warm].append(one_side(todo, manifest, work, warm))
                print(f"repeat {r} {'warm' if warm else 'cold'}: {got[warm][-1][0]:.1f} s wall, "
                      f"{got[warm][-1][1]:.1f} s CPU", file=sys.stderr, flush=True)
    ratio_wall = [c[0] / w[0] for c, w in zip(got[False], got[True])]
    ratio_cpu = [c[1] / w[1] for c, w in zip(got[False], got[True])]
    rows = [f"| {len(todo)} seeds of {a.variant}*: train + conditioning | {spread([x[0] for x in got[False]])} | "
            f"{spread([x[1] for x in got[False]])} | {spread([x[0] for x in got[True]])} | "
            f"{spread([x[1] for x in got[True]])} | {spread(ratio_wall, 2)} | {spread(ratio_cpu, 2)} |"]
    text = "\n".join(["| jobs | fresh processes: wall s | CPU s | warm process: wall s | CPU s | wall ratio, "
                      "fresh / warm | CPU ratio |", "|---|---|---|---|---|---|---|", *rows,
                      f"\nmedian (min-max) of {a.repeats}, alternating; one thread a job, one job at a time."])
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
