"""Shared fixtures: the repository, the tiny config, and a runner for real Snakemake runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "demo.yaml"  # the demo (make demo) is the tiny study the tests run
BIN = Path(sys.executable).parent


def run(cmd: list[str], cwd: Path, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-4000:]}")
    return proc


def snakemake(workdir: Path, *args: str, configfile: Path | None = TINY, check: bool = True,
              timeout: int = 600, sourced: Path | None = None) -> subprocess.CompletedProcess:
    """Run the project's Snakefile in `workdir` (results land there, not in the repository);
    `sourced`: from a bash that has sourced that script first (a venv's `activate`, say)."""
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    if configfile is not None:  # last: --configfile takes every value that follows it
        cmd += ["--configfile", str(configfile)]
    if sourced is not None:
        cmd = ["bash", "-c", '. "$0" && exec "$@"', str(sourced), *cmd]
    return run(cmd, cwd=workdir, check=check, timeout=timeout)


def planned_outputs(study) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(figure names, table names) the report gives a planned study (a plan.Study), before its runs."""
    import pandas as pd

    from leaner.analysis.report import StudyData, study_outputs

    d = study.declared()
    figs, tabs = study_outputs(StudyData(study.name, pd.DataFrame({"task": [study.task]}), d["baseline"],
                                         tuple(d["checks"]), d["claims"], points=d["points"]))
    return tuple(name for name, *_ in figs), tuple(name for name, _ in tabs)


def fault_env(env: dict | None = None, **faults) -> dict:
    """`env` (default: this process's) with the faults of tests/faults/sitecustomize.py put into every
    Python process started with it (stall=[step, s], slow_step=s, slow_rename=[name, s], stall_floor_s=s)."""
    import json

    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "tests" / "faults"), env.get("PYTHONPATH")]))
    env["LEANER_TEST_FAULTS"] = json.dumps(faults)
    return env


def venv_activate(folder: Path) -> Path:
    """A venv's `activate` as users source it: this venv's own, else (the tests run by a Python
    that is no venv's) a new venv's from the standard library, made in `folder`."""
    own = BIN / "activate"
    if own.exists():
        return own
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(folder / "venv")],
                   check=True)
    return folder / "venv" / "bin" / "activate"


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
    from leaner.workflow.config import CONDITIONING_DEFAULTS, RECIPE_DEFAULTS

    recipe = {**RECIPE_DEFAULTS, "epochs": 1, "batch_size": 64, "lr": 2e-3, "checkpoint_every": 5}
    return {"study": "unit", "variant": "v", "task": "image_classification", "dataset": "digits", "seed": 0,
            "model": model, "recipe": recipe, "conditioning": {**CONDITIONING_DEFAULTS, "samples": 32}}


# The suite's tiers (every test module names its own by `pytestmark`; a test may name another):
#   fast       units and one tiny workflow through Snakemake: `make test-fast`, the inner loop
#   slow       every other behaviour through the path users run: with fast, `make test` (CI)
#   reproduce  the default study against its committed reference, byte for byte: `make reproduce`
TIERS = ("fast", "slow", "reproduce")


def pytest_addoption(parser):
    parser.addoption("--tier", default="fast,slow",
                     help=f"the tiers to run, comma-separated (of {', '.join(TIERS)}; all: every one); default "
                          "fast,slow: what `make test` runs")


def tier_of(item) -> str | None:
    """The test's tier: its own marker, else its class's or module's (the closest one)."""
    return next((m.name for m in item.iter_markers() if m.name in TIERS), None)


def pytest_collection_modifyitems(config, items):
    wanted = config.getoption("--tier").split(",")
    wanted = list(TIERS) if wanted == ["all"] else wanted
    unknown = sorted(set(wanted) - set(TIERS))
    if unknown:
        raise pytest.UsageError(f"--tier {','.join(unknown)}: unknown (allowed: {', '.join(TIERS)} or all)")
    untiered = sorted({item.module.__name__ for item in items if tier_of(item) is None})
    if untiered:
        raise pytest.UsageError(f"test modules without a tier (pytestmark = pytest.mark.<{'|'.join(TIERS)}>): "
                                f"{', '.join(untiered)}")
    kept = [item for item in items if tier_of(item) in wanted]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if tier_of(item) not in wanted])
        items[:] = kept

    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _cpu_unless_a_gpu_test(request, monkeypatch):
    """Pin the CPU, explicitly, for every test and every process it starts: the tests compare
    numbers (bit-identical resume, equal local and cluster runs) that only the CPU gives exactly.
    Tests marked `gpu` and tests of device choice (`devices`) pick their own devices."""
    if request.node.get_closest_marker("gpu") is None and request.node.get_closest_marker("devices") is None:
        monkeypatch.setenv("LEANER_DEVICE", "cpu")


# Nothing reaches a hub at test time; Hugging Face caches stay inside the test session.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HOME", str(Path(os.environ.get("PYTEST_HF_HOME", "/tmp/leaner-test-hf"))))


def parquet_image_dataset(root: Path, name: str = "pictures", rows: int = 12) -> Path:
    """A dataset folder of parquet files as the hub serves one (8x8 grey images, 3 classes, train
    and validation): `datasets` loads a local folder given as a hub name, with no network."""
    import datasets
    import numpy as np
    from PIL import Image

    folder = root / name
    (folder / "data").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split in ("train", "validation"):
        images = [Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)) for _ in range(rows)]
        ds = datasets.Dataset.from_dict({"image": images, "label": [i % 3 for i in range(rows)]})
        ds = ds.cast_column("image", datasets.Image()).cast_column("label", datasets.ClassLabel(names=["a", "b", "c"]))
        ds.to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))
    return folder


def image_folder(root: Path, classes=("cat", "dog", "owl"), splits=("train", "validation")) -> Path:
    """An ImageFolder: one small PNG per class in each split's class folder."""
    import numpy as np
    from PIL import Image

    for split in splits:
        for c, name in enumerate(classes):
            (root / split / name).mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full((8, 8, 3), 60 * c, np.uint8)).save(root / split / name / "0.png")
    return root


def kill_after_checkpoint(proc: subprocess.Popen, ckpt: Path, timeout_s: float = 120.0) -> None:
    """SIGKILL a training process shortly after its first resume checkpoint appears."""
    import signal
    import time

    deadline = time.time() + timeout_s
    while not ckpt.exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def nearest_setup(root: Path, model: dict | None = None, recipe: dict | None = None, seed: int = 3,
                  stream: str = "fresh"):
    """P2's task at toy size: (spec, manifest) with the generator's manifest written under root."""
    from leaner.data import prepare
    from leaner.tasks import task_info
    from leaner.workflow.config import RECIPE_DEFAULTS

    manifest = root / "np" / "manifest.json"
    prepare("nearest_point", {"kind": "nearest_point", "stream": stream, "streams": 7, "eval_samples": 512,
                              "eval_seed": 1}, str(manifest))
    m = {"arch": "nearest_point_encoder", "depth": 1, "heads": 1, "modules": 1, "dim": 8, "tokens": 4,
         "posn": "none", "d_model": 8, "head_dim": 8, "ff": 16, "posn_dim": 64, **(model or {})}
    r = {**RECIPE_DEFAULTS, **task_info("nearest_point").recipe, "epochs": 8, "steps_per_epoch": 25,
         "batch_size": 64, "lr": 0.02, **(recipe or {})}
    spec = {"study": "unit", "variant": "v", "task": "nearest_point", "dataset": "nearest_point", "seed": seed,
            "model": m, "recipe": r, "conditioning": {"samples": 16}}
    return spec, manifest


def saved_checkpoint(ckpt: Path) -> Path | None:
    """The resume checkpoint a killed run left: state.pt, or state.prev.pt if the kill landed
    between the rotation of the old one and the rename of the new one."""
    from leaner.training.resume import PREVIOUS_FILE

    for path in (ckpt, ckpt.with_name(PREVIOUS_FILE)):
        if path.exists():
            return path
    return None
