"""Rows 5 and 6b of benchmarks/run.py, training on a GPU against bare loops: ViT-B/16 through `leaner
train`, eager and compiled, with the loaders that would feed it; P2's fig1 variant alone and k
processes sharing one GPU (`--p2-bare` runs its bare loop in a process of its own)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from .common import REPO, RUN, table
from .image_sets import _image_manifest
from .loading import _loader_rate

# ----------------------------------------------------------------------------- 5. GPU

VIT_B = {"arch": "vit", "depth": 12, "heads": 12, "width": 768, "head_dim": 64, "mlp_hidden": 3072,
         "patch_size": 16, "img_size": 224, "in_chans": 3, "num_classes": 1000, "qkv_bias": True,
         "drop_path_rate": 0.0, "global_pool": "token"}


def vit_b_train_flops_per_image(tokens: int = 197, width: int = 768, depth: int = 12, mlp: int = 3072) -> float:
    """Forward matmul FLOPs x 3 (forward + backward) for ViT-B/16 at 224 px."""
    per_layer = 2 * tokens * (4 * width * width + 2 * width * mlp) + 2 * 2 * tokens * tokens * width
    return 3 * depth * per_layer


def _mfu_text(images_per_s: float) -> str:
    """ViT-B/16's TFLOP/s at `images_per_s`, and the share of this GPU's bf16 peak (planning/cards.py)."""
    from leaner.planning.cards import card_named

    card = card_named(torch.cuda.get_device_name(0))
    achieved = vit_b_train_flops_per_image() * images_per_s
    return f"{achieved / 1e12:.0f} TFLOP/s, " + (f"{100 * card.mfu(achieved, 'bf16'):.1f}%" if card else "unknown peak")


def _bare_vit(batch: int, steps: int, compile_model: bool, device: str = "cuda") -> tuple[float, float]:
    """ViT-B/16 with data already on the device, no per-step sync: (steady images/s, seconds of the
    first 5 steps, compile included); bf16 autocast on CUDA, fp32 on the CPU."""
    from leaner.models import build_model

    dev = torch.device(device)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = build_model(VIT_B).to(dev)
    net = torch.compile(model) if compile_model else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x = torch.randn(batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            loss = torch.nn.functional.cross_entropy(net(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    t0 = time.perf_counter()
    for _ in range(5):
        step()
    sync()
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return batch * steps / (time.perf_counter() - t0), warm


def _synthetic_images(work: Path, n: int, size: int, classes: int) -> str:
    """An in-memory image dataset of random pixels in the digits format (arrays + manifest): what
    `leaner train` reads when the data must cost nothing (held on the GPU, gathered per batch)."""
    import numpy as np

    from leaner.io import sha256_file, write_json

    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 3, size, size), dtype=np.float32)
    y = rng.integers(0, classes, n).astype(np.int64)
    arrays = work / "synthetic.npz"
    np.savez(arrays, x_train=x, y_train=y, x_test=x[:256], y_test=y[:256])
    manifest = work / "manifest.json"
    write_json(manifest, {"dataset": "synthetic", "kind": "digits", "n_train": n, "n_eval": 256,
                          "num_classes": classes, "img_size": size, "in_chans": 3, "arrays": arrays.name,
                          "sha256": sha256_file(arrays)})
    return str(manifest)


def _leaner_vit(manifest: str, batch: int, epochs: int, compile_model: bool, work: Path) -> tuple[float, float]:
    """ViT-B/16 through leaner.training.train.train on the synthetic set: (steady images/s from the per-epoch
    history, after the first two epochs and before the final evaluation; seconds of the first epoch)."""
    import pandas as pd

    from leaner.training.train import train
    from leaner.workflow.config import CONDITIONING_DEFAULTS, RECIPE_DEFAULTS

    recipe = {**RECIPE_DEFAULTS, "epochs": epochs, "batch_size": batch, "lr": 1e-3, "eval_every": 10_000,
              "checkpoint_every": 10_000_000, "compile": compile_model}
    spec = {"study": "bench", "variant": "vit_b", "task": "image_classification", "dataset": "synthetic",
            "seed": 0, "model": VIT_B, "recipe": recipe, "conditioning": {**CONDITIONING_DEFAULTS}}
    out = work / ("compiled" if compile_model else "eager")
    train(spec, manifest, out, device="cuda", progress=False)
    h = pd.read_csv(out / "history.csv")
    a, b = h.iloc[1], h.iloc[-2]
    return (b["step"] - a["step"]) * batch / (b["elapsed_s"] - a["elapsed_s"]), float(h.iloc[0]["elapsed_s"])


def bench_gpu(steps: int, loader_rates: dict, work: Path, quick: bool = False) -> tuple[str, dict]:
    """ViT-B/16 at 224 px, bf16, fused attention: `leaner train` against a bare loop on the same
    GPU, eager and compiled; steady state, with the first steps (compile) apart. quick: batch 32,
    eager only (a smoke run of the row, minutes less)."""
    title = "5. ViT-B/16 on the GPU: `leaner train` against a bare loop (bf16, fused attention)"
    if not torch.cuda.is_available():
        return table(title, ["result"], [["skipped: no CUDA device on this machine"]]), {}
    batch = 32 if quick else 256
    manifest = _synthetic_images(work / "synthetic", 4 * batch, 224, 1000)
    epochs = max(4, math.ceil(steps / 4) + 3)
    rows, rates = [], {}
    for compiled in (False,) if quick else (False, True):
        bare, bare_warm = _bare_vit(batch, steps, compiled)
        ours, first_epoch = _leaner_vit(manifest, batch, epochs, compiled, work)
        label = "torch.compile" if compiled else "eager"
        rows.append([f"bare loop, {label}", f"{bare:.0f}", _mfu_text(bare), f"{bare_warm:.1f} s (5 steps)", "-"])
        rows.append([f"`leaner train`, {label}", f"{ours:.0f}", _mfu_text(ours), f"{first_epoch:.1f} s (first 4 steps)",
                     f"{ours / bare:.3f}"])
        rates["vit_compiled" if compiled else "vit_eager"] = ours
    for decode, rate in loader_rates.items():
        rows.append([f"loader, decode: {decode} (row 1b), per process", f"{rate:.0f}", "-", "-",
                     f"{math.ceil(max(rates.values()) / rate)} processes to feed the fastest run"])
    from leaner.data.splits import worker_count

    workers = worker_count("auto")  # what `recipe.num_workers: auto` gives one training process here
    manifest = _image_manifest(work / "jpeg", 2 * batch if quick else 12 * batch, 256, 224, "jpg", ("device",))
    pipeline = _loader_rate(manifest["device"], workers, batch, "cuda")
    rows.append([f"input pipeline, decode: device ({workers} workers read the JPEGs; nvJPEG and the batched "
                 f"DeiT augmentation on the GPU)", f"{pipeline:.0f}", "-", "-",
                 f"{pipeline / max(rates.values()):.2f} x the fastest run (target >= 1.2)"])
    text = table(title, ["run", "images/s", "MFU (target >= 45% through leaner, stretch 50%)",
                         "start (compile)", "leaner / bare"], rows)
    text += (f"\n{torch.cuda.get_device_name(0)}, batch {batch}, AdamW fused, data on the GPU (leaner: an in-memory "
             f"set held on the GPU, gathered per batch; bare: one fixed batch). Steady state: leaner's from its "
             f"per-epoch history (epochs 2 to the last but one), the bare loop's over {steps} steps after 5.\n")
    return text, rates


# ----------------------------------------------------------------------------- 6b. P2 on one GPU

def _p2_bare(spec_file: str, steps: int) -> None:
    """Run inside a subprocess (`--p2-bare`): the P2 variant's step with nothing else (points drawn
    on the GPU, no per-step sync); prints steps/s."""
    from leaner.data.point_stream import PointStream
    from leaner.models import build_model
    from leaner.schema import Recipe
    from leaner.tasks.nearest import nearest_point_mse
    from leaner.training.optim import make_optimizer

    spec = json.loads(Path(spec_file).read_text())
    dev = torch.device("cuda")
    recipe = spec["recipe"]
    torch.backends.cuda.matmul.allow_tf32 = recipe["tf32"]  # the recipe's precision, as `leaner train` runs it
    model = build_model(spec["model"]).to(dev)
    opt = make_optimizer(model, Recipe.of(spec["recipe"]))
    m = spec["model"]
    stream = PointStream(m["dim"], m["tokens"], spec["recipe"]["batch_size"], spec["seed"], device=dev)

    def step(k):
        x, y = stream.batch(k)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=recipe["precision"] == "bf16"):
            loss = nearest_point_mse(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for k in range(20):
        step(k)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for k in range(steps):
        step(20 + k)
    torch.cuda.synchronize()
    print(json.dumps({"steps_per_s": steps / (time.perf_counter() - t0)}))


def _concurrently(cmds: list[list[str]], env: dict) -> list[str]:
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for c in cmds]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a concurrent benchmark run failed: {cmds[0][:6]}")
    return outs


def bench_gpu_p2(work: Path, steps: int, ks=(1, 4, 8), quick: bool = False) -> tuple[str, dict]:
    """P2's fig1 variant: `leaner train` (eager, step as a CUDA graph, compile reduce-overhead)
    against a bare loop, alone and k processes sharing one GPU (each on a seat, 2 threads).
    quick: no compile (its start-up alone is minutes)."""
    title = "6b. P2 fig1 variant on one GPU: `leaner train` against a bare loop, alone and sharing"
    if not torch.cuda.is_available():
        return table(title, ["result"], [["skipped: no CUDA device on this machine"]]), {}
    from leaner.compute.devices import SHARE_UNITS

    spec, manifest = _p2_variant(work, steps)
    modes = {"eager": {}, "cuda_graph": {"cuda_graph": True},
             **({} if quick else {"compile reduce-overhead": {"compile": "reduce-overhead"}})}
    rows, aggregate = [], {}
    for k in ks:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0],
               "LEANER_GPU_LOCK_DIR": str(work / f"locks{k}"), "OMP_NUM_THREADS": "2"}
        env.pop("LEANER_DEVICE", None)
        spec_file = work / "bare_spec.json"
        spec_file.write_text(json.dumps(spec))
        bare_out = _concurrently([[sys.executable, str(RUN), "--p2-bare", str(spec_file), str(steps)]] * k, env)
        bare = [json.loads(o.strip().splitlines()[-1])["steps_per_s"] for o in bare_out]
        rows.append([k, "bare loop", f"{min(bare):.0f}-{max(bare):.0f}", f"{sum(bare):.0f}", "-"])
        for mode, recipe in modes.items():
            run = {**spec, "recipe": {**spec["recipe"], **recipe}}
            outs = [work / f"k{k}-{mode.split()[0]}" / str(i) for i in range(k)]
            _concurrently([[sys.executable, "-m", "leaner", "train", "--spec", json.dumps(run), "--data", manifest,
                            "--out", str(o), "--threads", "2", "--no-progress", "--gpu-share", str(SHARE_UNITS // k)]
                           for o in outs], env)
            runs = [json.loads((o / "metrics.json").read_text()) for o in outs]
            # steady rate: the last epochs' history (start-up and compile excluded)
            each = []
            for o in outs:
                import pandas as pd

                h = pd.read_csv(o / "history.csv")
                a, b = h.iloc[len(h) // 3], h.iloc[-2]
                each.append((b["step"] - a["step"]) / (b["elapsed_s"] - a["elapsed_s"]))
            start = min(m["wall_time_s"] - m["steps"] / e for m, e in zip(runs, each))
            rows.append([k, f"`leaner train`, {mode}", f"{min(each):.0f}-{max(each):.0f}", f"{sum(each):.0f}",
                         f"{sum(each) / sum(bare):.2f} (start {start:.0f} s)"])
            aggregate[(k, mode)] = sum(each)
    text = table(title, ["processes on the GPU", "loop", "steps/s each", "aggregate steps/s",
                         "leaner / bare (target >= 0.95)"], rows)
    text += (f"\nL1-H1-W1 of `nearest_fig1` (d 64, N 16, ff 2048, batch 256, {spec['recipe']['precision']}, TF32 "
             f"{'on' if spec['recipe']['tf32'] else 'off'}), {steps} steps per run; leaner's "
             f"steady rate from its per-epoch history (start-up and compilation apart).\n")
    return text, aggregate


def _p2_variant(work: Path, steps: int) -> tuple[dict, str]:
    """P2's fig1 variant of configs/paper.yaml (L1, d 64, N 16, ff 2048, batch 256), cut to `steps`."""
    from leaner.data import prepare
    from leaner.workflow.plan import load_plan

    plan = load_plan(REPO / "configs" / "paper.yaml")
    study = plan.studies["nearest_fig1"]
    variant = next(v for vid, v in study.variants.items() if vid.startswith("L1-H1-W1-"))
    spec = json.loads(variant.spec_json())
    spec["recipe"]["max_steps"] = steps
    manifest = work / "np" / "manifest.json"
    prepare(study.dataset, plan.datasets[study.dataset], str(manifest))
    return spec, str(manifest)
