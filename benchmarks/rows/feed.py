"""Row 1f of benchmarks/run.py: does the loader feed `leaner train` at its own rate, whatever the
epoch's length? `leaner train` on photo-like JPEGs at ImageNet's sizes (decode: pil, 224 px, the
DeiT recipe, Pillow in the workers), its step a stand-in that costs a fixed time (a tiny model whose
loss also sleeps, so that the step leaves the cores to the workers as a GPU step does), at 2, 8 and
24 steps an epoch, against the loader alone and the step alone, each measured in the same run:

- the loader alone: from its start (its workers' start-up included) over at least 10 batches a
  worker (loading._loader_rate);
- the step alone: the same `leaner train` on the same number of images held in memory as uint8
  (no loader; the same finish on the device, the same model and sleep);
- the stand-in's sleep is the loader's batch time less the step's own, so that both bounds are
  about equal: the case where any stall of the pipeline shows.

The workers are the machine's cores less one (`num_workers: auto`), so the training process has a
core of its own, as on a GPU node. `leaner train`'s rate is read from its history between the end
of its first epoch (the start-up behind it) and its last but one (the last row's time holds the
final evaluation). The pipeline holds when that rate is at least FEED_TARGET of the slower bound."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from .common import REPO, RUN, _unpack, median_spread, table
from .image_sets import _image_manifest
from .loading import _loader_rate

FEED_TARGET = 0.9  # declared with the row: `leaner train` keeps this share of min(loader, step)
FEED_REV = "af8234e"  # the last commit whose loader was re-armed each epoch and sent float32 across processes
EPOCH_STEPS = (2, 8, 24)


def _spec(batch: int, epochs: int, workers: int) -> dict:
    from leaner.workflow.config import CONDITIONING_DEFAULTS, RECIPE_DEFAULTS

    model = {"arch": "vit", "depth": 1, "heads": 1, "width": 8, "head_dim": 8, "mlp_hidden": 8, "patch_size": 32,
             "img_size": 224, "in_chans": 3, "num_classes": 4, "qkv_bias": True, "drop_path_rate": 0.0,
             "global_pool": "token"}
    recipe = {**RECIPE_DEFAULTS, "epochs": epochs, "batch_size": batch, "augment": True, "num_workers": workers,
              "eval_every": 10_000, "checkpoint_every": 10_000_000, "checkpoint_minutes": None}
    return {"study": "feed", "variant": "v", "task": "image_classification", "dataset": "jpeg", "seed": 0,
            "model": model, "recipe": recipe, "conditioning": {**CONDITIONING_DEFAULTS, "samples": 4}}


def _in_memory(manifest: str, n: int):
    """An opener of `n` random uint8 images of the manifest's shape held in memory, finished on the
    device as the JPEGs are (tensor_augment.Normalized): the step alone, without a loader."""
    import torch

    from leaner.data import InMemorySplit, Splits
    from leaner.io import read_json

    try:
        from leaner.data.tensor_augment import Normalized
    except ImportError:  # the baseline tree's (row 1f compares against it)
        Normalized = None

    meta = read_json(manifest)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, 3, meta["img_size"], meta["img_size"]), dtype=torch.uint8, generator=g)
    y = torch.arange(n) % meta["num_classes"]
    if Normalized is None:  # a tree whose workers normalised: float32 batches, nothing finished on the device
        x = ((x.float() / 255 - 0.5) / 0.25).contiguous()

    def opener(manifest_path, spec, device):
        return Splits(train=InMemorySplit(x, y), eval=InMemorySplit(x[:64], y[:64]), meta=meta,
                      finish=Normalized(meta, spec.recipe) if Normalized else None)
    return opener


def _train_rate(manifest: str, batch: int, steps_per_epoch: int, steps: int, workers: int, step_s: float,
                out: Path, in_memory: bool = False) -> float:
    """`leaner train` on a training split of steps_per_epoch * batch images (the JPEGs, or as many
    held in memory), its loss sleeping step_s: images/s between the first epoch's row and the last
    but one."""
    import pandas as pd

    import leaner.data
    from leaner.tasks.image import ImageClassification
    from leaner.training.train import train

    plain = ImageClassification.loss

    def slow_loss(self, net, batch_):
        time.sleep(step_s)  # the stand-in step: a fixed cost that leaves the cores to the workers
        return plain(self, net, batch_)

    opener = _in_memory(manifest, steps_per_epoch * batch) if in_memory else leaner.data.open_data
    with mock.patch.object(ImageClassification, "loss", slow_loss), mock.patch.object(leaner.data, "open_data", opener):
        train(_spec(batch, steps // steps_per_epoch, workers), manifest, out, device="cpu", threads=1, progress=False)
    h = pd.read_csv(out / "history.csv")
    first, last = h.iloc[0], h.iloc[-2]  # the last row's time holds the final evaluation
    return (last["step"] - first["step"]) * batch / (last["elapsed_s"] - first["elapsed_s"])


def feed_figures(work: Path, quick: bool, steps_per_epoch: int) -> dict:
    """One measurement of the row at `steps_per_epoch`, with the package this process imports:
    {"loader", "alone", "trained"} images/s."""
    from leaner.data.splits import worker_count

    workers = max(1, worker_count("auto"))
    batch, steps = (8, 72) if quick else (32, 144)  # at least 3 epochs of the longest
    folder = work / f"feed{steps_per_epoch}"
    manifest = str(folder / "pil" / "manifest.json")
    if not Path(manifest).is_file():
        manifest = _image_manifest(folder, batch * steps_per_epoch, "imagenet", 224, "jpg", ("pil",))["pil"]
    runs = Path(tempfile.mkdtemp(dir=work))
    own = batch / _train_rate(manifest, batch, steps_per_epoch, steps, workers, 0.0, runs / "own",
                              in_memory=True)  # the step's own seconds, nothing slept
    loader = _loader_rate(manifest, workers, batch, batches=max(10 * workers, steps // 2))
    sleep = max(0.0, batch / loader - own)  # the step alone about as fast as the loader
    alone = _train_rate(manifest, batch, steps_per_epoch, steps, workers, sleep, runs / "alone", in_memory=True)
    trained = _train_rate(manifest, batch, steps_per_epoch, steps, workers, sleep, runs / "run")
    return {"loader": loader, "alone": alone, "trained": trained, "workers": workers, "batch": batch, "steps": steps}


def _figures_of(src: Path, work: Path, quick: bool, steps_per_epoch: int) -> dict:
    """feed_figures with the package of another source tree, in a process of its own."""
    env = {**os.environ, "LEANER_BENCH_SRC": str(src)}
    out = subprocess.run([sys.executable, str(RUN), "--feed-figures", str(work), str(int(quick)),
                          str(steps_per_epoch)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"row 1f with {src} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_feed(repeats: int, work: Path, quick: bool, baseline_rev: str | None) -> tuple[str, dict]:
    """The row's table (this tree and baseline_rev's, alternating in processes of their own) and its
    figures ({epoch steps: this tree's ratio of `leaner train` to the slower bound})."""
    trees = {"this tree": REPO / "src"}
    baseline, note = _unpack(baseline_rev, work / "feed-baseline")
    if baseline:
        trees[f"before ({baseline_rev})"] = baseline
    rows, ratios, last = [], {}, {}
    for steps_per_epoch in EPOCH_STEPS:
        got: dict[str, list[dict]] = {label: [] for label in trees}
        for _ in range(repeats):  # alternate: a slow spell of the machine hits both trees
            for label, src in trees.items():
                got[label].append(_figures_of(src, work, quick, steps_per_epoch))
        for label, figures in got.items():
            ratio = [f["trained"] / min(f["loader"], f["alone"]) for f in figures]
            verdict = "holds" if statistics.median(ratio) >= FEED_TARGET else f"misses {FEED_TARGET}"
            if label == "this tree":
                ratios[steps_per_epoch] = statistics.median(ratio)
            rows.append([label, steps_per_epoch, *(median_spread([f[k] for f in figures]) + " images/s"
                                                   for k in ("loader", "alone", "trained")),
                         median_spread(ratio), verdict])
            last = figures[-1]
    text = table("1f. The loader feeding `leaner train`, by the epoch's length (decode: pil, stand-in step)",
                 ["tree", "steps an epoch", "loader alone", "step alone", "`leaner train`", "train / slower",
                  "verdict"], rows)
    return text + (f"\nPhoto-like JPEGs at ImageNet's sizes, 224 px crops, the DeiT recipe with Pillow in "
                   f"{last['workers']} worker process(es) (the cores less one), batch {last['batch']}, {last['steps']} "
                   f"steps a run; the step a tiny ViT whose loss sleeps the loader's batch time less the step's own. "
                   f"Loader alone: from its start over at least 10 batches a worker; step alone: the same run on "
                   f"images held in memory; `leaner train`: images/s between its first and last-but-one history "
                   f"rows. Target: >= {FEED_TARGET} of the slower bound at every epoch length.{note}\n"), ratios
