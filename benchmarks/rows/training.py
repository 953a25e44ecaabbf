"""Row 1 of benchmarks/run.py: leaner.training.train.train's steps/s against a bare PyTorch loop over the same
model, data, batch order and optimiser."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from .common import median_spread, table

# ----------------------------------------------------------------------------- 1. training loop

def _spec(epochs: int, width: int, depth: int, heads: int) -> dict:
    from leaner.workflow.config import CONDITIONING_DEFAULTS, RECIPE_DEFAULTS

    model = {"arch": "vit", "depth": depth, "heads": heads, "width": width, "head_dim": width // heads,
             "mlp_hidden": 2 * width, "patch_size": 2, "img_size": 8, "in_chans": 1, "num_classes": 10,
             "qkv_bias": True, "drop_path_rate": 0.0, "global_pool": "token"}
    recipe = {**RECIPE_DEFAULTS, "epochs": epochs, "batch_size": 64, "lr": 3e-3, "eval_every": 10_000,
              "checkpoint_every": 10_000_000}
    return {"study": "bench", "variant": "v", "task": "image_classification", "dataset": "digits", "seed": 0,
            "model": model, "recipe": recipe, "conditioning": {**CONDITIONING_DEFAULTS, "samples": 256}}


def bare_loop(spec: dict, manifest: str, steps: int) -> float:
    """The same model, data, batch order and optimiser with nothing else: seconds for `steps`."""
    import torch.nn.functional as F

    from leaner.data import load_splits
    from leaner.models import build_model
    from leaner.schema import Recipe
    from leaner.training.optim import make_optimizer
    from leaner.training.resume import seed_everything

    seed_everything(0)
    model = build_model(spec["model"])
    opt = make_optimizer(model, Recipe.of(spec["recipe"]))
    train = load_splits(manifest, Recipe.of(spec["recipe"])).train
    model.train()
    done, epoch = 0, 0
    t0 = time.perf_counter()
    while done < steps:
        for x, y in train.train_batches(spec["recipe"]["batch_size"], 0, epoch):
            loss = F.cross_entropy(model(x).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            done += 1
            if done == steps:
                break
        epoch += 1
    return time.perf_counter() - t0


def bench_training(manifest: str, repeats: int, epochs: int, work: Path) -> tuple[str, dict]:
    from leaner.training.train import train

    spec = _spec(epochs, width=64, depth=2, heads=4)
    ours, bare, tput, mem = [], [], [], []
    from leaner.data import load_splits
    from leaner.schema import Recipe

    steps = spec["recipe"]["epochs"] * load_splits(manifest, Recipe.of(spec["recipe"])).train.steps_per_epoch(
        spec["recipe"]["batch_size"])
    bare_loop(spec, manifest, 20)  # warm-up: first-call allocations and kernel selection
    for r in range(repeats):  # interleaved, the first of each pair alternating: drift hits both alike
        first_bare = r % 2 == 1
        if first_bare:
            bare.append(steps / bare_loop(spec, manifest, steps))
        m = train(spec, manifest, work / f"train{r}", progress=False)
        ours.append(m["steps"] / m["wall_time_s"])
        tput.append(m["throughput_samples_per_s"])
        mem.append(m["peak_memory_mb"])
        if not first_bare:
            bare.append(steps / bare_loop(spec, manifest, steps))
    ratios = [a / b for a, b in zip(ours, bare)]
    rows = [["leaner.training.train (steps/s)", median_spread(ours)],
            ["bare PyTorch loop (steps/s)", median_spread(bare)],
            ["ratio (target >= 0.98)", median_spread(ratios)], ["images/s (leaner)", median_spread(tput)],
            ["peak RSS MB (process)", median_spread(mem)]]
    note = (f"ViT depth 2, 4 heads, width 64 on 8x8 digits (17 tokens), batch 64, {steps} steps, "
            f"{torch.get_num_threads()} threads; leaner's time includes its per-epoch history and the final "
            f"evaluation, the bare loop's does not.")
    return table("1. Training loop against a bare PyTorch loop", ["measure", "median (min-max)"], rows) + \
        f"\n{note}\n", {"ratio": statistics.median(ratios), "train_s": steps / statistics.median(ours), "steps": steps,
                        "spec": spec, "out": work / "train0"}
