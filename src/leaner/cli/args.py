"""What several subcommands' arguments share: the argument types, the help texts, the config
files a planning command takes and the plan they make."""

from __future__ import annotations

import argparse
import json
import os

from ..compute.devices import SHARE_UNITS


def json_arg(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at position {exc.pos})") from None


GPU_SHARE_HELP = (f"GPUs this job declared, in 1/{SHARE_UNITS} of a GPU (the rule's gpu_share resource): 0 runs "
                  f"on the CPU, {SHARE_UNITS}*g on g whole GPUs, {SHARE_UNITS}//k on a seat of a GPU shared by k "
                  "jobs (default: one GPU when CUDA is present)")


NUMERICS_HELP = ("pinned (default): the same bits on every x86-64 CPU with AVX2 (ATen's AVX2 kernels, MKL's "
                 "COMPATIBLE branch, oneDNN off, these threads); native: the machine's own (docs/numerics.md)")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0")
    return value


def nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return value


CONFIG_FILES = dict(nargs="*", default=["config.yaml"], help="config files, merged in order as --configfile merges "
                    "them; an overlay (no studies of its own) is laid over ./config.yaml")


def plan_of(configs: list[str]):
    """The plan of config files given as `--configfile` takes them: an overlay is laid over
    ./config.yaml (config.merge_cli_config)."""
    from ..workflow.plan import load_plan

    return load_plan(*configs, default="config.yaml" if os.path.exists("config.yaml") else None)
