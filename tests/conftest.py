"""Shared fixtures: the repository, the tiny config, and a runner for real Snakemake runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "config" / "tiny.yaml"
BIN = Path(sys.executable).parent


def run(cmd: list[str], cwd: Path, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-4000:]}")
    return proc


def snakemake(workdir: Path, *args: str, configfile: Path | None = TINY, check: bool = True,
              timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the project's Snakefile in `workdir` (results land there, not in the repository)."""
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    if configfile is not None:  # last: --configfile takes every value that follows it
        cmd += ["--configfile", str(configfile)]
    return run(cmd, cwd=workdir, check=check, timeout=timeout)


@pytest.fixture(scope="session")
def digits_manifest(tmp_path_factory) -> Path:
    """The digits dataset prepared once for the whole session."""
    from leaner.data import prepare

    out = tmp_path_factory.mktemp("data") / "digits" / "manifest.json"
    prepare("digits", {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}, str(out))
    return out


def small_spec(**model_overrides) -> dict:
    """A variant spec for a 1-layer width-16 ViT on digits, trained for a few steps."""
    model = {"arch": "vit", "depth": 1, "heads": 2, "width": 16, "head_dim": 8, "mlp_hidden": 32,
             "patch_size": 2, "img_size": 8, "in_chans": 1, "num_classes": 10, "qkv_bias": True,
             "drop_path_rate": 0.0, "global_pool": "token"}
    model.update(model_overrides)
    from leaner.config import RECIPE_DEFAULTS

    recipe = {**RECIPE_DEFAULTS, "epochs": 1, "batch_size": 64, "lr": 2e-3, "checkpoint_every": 5}
    return {"study": "unit", "variant": "v", "task": "image_classification", "dataset": "digits", "seed": 0,
            "model": model, "recipe": recipe, "conditioning": {"samples": 32}}


# Nothing reaches a hub at test time; Hugging Face caches stay inside the test session.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HOME", str(Path(os.environ.get("PYTEST_HF_HOME", "/tmp/leaner-test-hf"))))
