"""Commands around a run: `leaner run` (Snakemake, resuming a run that died) and `leaner status`
(every variant's state)."""

from __future__ import annotations

import argparse

from .args import CONFIG_FILES, plan_of


def cmd_status(a):
    from ..running.status import STATES, show

    unknown = [s for s in a.state if s not in STATES]
    if unknown:
        raise ValueError(f"--state {','.join(unknown)}: unknown (allowed: {', '.join(STATES)})")
    show(plan_of(a.config or run_config(a.root)), a.root, a.watch, a.state)


def run_config(root: str) -> list[str]:
    """The config a run folder was made with: the one it resolved (results/overview/config.yaml),
    else its own config.yaml, else ./config.yaml."""
    from pathlib import Path

    folder = Path(root)
    if not folder.is_dir():
        raise ValueError(f"--root {root}: no such folder (give the folder a run wrote results/ and logs/ in)")
    for path in (folder / "results" / "overview" / "config.yaml", folder / "config.yaml"):
        if path.is_file():
            return [str(path)]
    if not (folder / "results").is_dir() and folder.resolve() != Path.cwd().resolve():
        raise ValueError(f"--root {root}: holds no results/ and no config.yaml: not a run's folder")
    return ["config.yaml"]


def cmd_run(a):
    from ..running.launch import run_snakemake

    return run_snakemake(a.snakemake_args)


def status_parser(sub) -> None:
    s = sub.add_parser("status", help="every variant of every study: pending, running (step, loss), done (metric), "
                                      "diverged or failed (why)")
    s.add_argument("config", **{**CONFIG_FILES, "default": [], "help": CONFIG_FILES["help"] + " (default: the config "
                                "the run in --root resolved, results/overview/config.yaml, else its config.yaml)"})
    s.add_argument("--root", default=".", help="the folder holding results/ and logs/ (default: here)")
    s.add_argument("--watch", type=float, nargs="?", const=10.0, default=None, metavar="SECONDS",
                   help="refresh every SECONDS (default 10) until Ctrl-C")
    s.add_argument("--state", type=lambda t: t.split(","), default=[], help="only these states, e.g. running,failed")
    s.set_defaults(func=cmd_status)


def run_parser(sub) -> None:
    s = sub.add_parser("run", help="snakemake in this folder, resuming a run that died (stale lock, incomplete files)")
    s.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="passed to snakemake, e.g. --cores all")
    s.set_defaults(func=cmd_run)
