"""The pipeline's cost, measured side by side against baselines in one run.

    .venv/bin/python benchmarks/run.py            # full sizes (about 10 minutes on 2 cores)
    .venv/bin/python benchmarks/run.py --quick    # tiny sizes, a smoke run (the tests use it)
    .venv/bin/python benchmarks/run.py --e2e      # add the default study end to end (+9 minutes)

Prints each table and writes benchmarks/results.md (or --out) with the machine it ran on. Every
number is the median of --repeats runs with its spread (min-max). Rows:

1. training loop: steps/s of leaner.train.train against a bare PyTorch loop over the same timm
   model, data tensors, batch order and fused AdamW, alternating in one process (target >= 0.98).
   1b: data loading against the step it feeds; the image loader's rate per worker process.
2. conditioning: the conditioning stage of one trained variant as a fraction of its training
   time (target <= 5%); batched float64 SVD against a per-sample loop; cost vs tokens and width.
3. DAG resolution: `snakemake -n` for generated grids of 100-2000 variants, and the paper config.
4. end to end (--e2e): the default study from a clean folder, wall time and CPU use.
5. GPU: ViT-B/16 training throughput and MFU with bf16 autocast and fused attention (optionally
   torch.compile); skipped, and said so, without a GPU.
6. GPU machines: (a, --e2e) the default study with the GPU visible against the same machine's CPU
   alone; (b) k P2 variants sharing one GPU (seats) against one alone. Skipped without a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from leaner.config import CONDITIONING_DEFAULTS, RECIPE_DEFAULTS  # noqa: E402


def median_spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{statistics.median(values):.4g} ({min(values):.4g}-{max(values):.4g})"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((l.split(":", 1)[1].strip() for l in fh if l.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {gpu}; Python {platform.python_version()}, "
            f"torch {torch.__version__}")


def table(title: str, header: list[str], rows: list[list]) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- 1. training loop

def _spec(epochs: int, width: int, depth: int, heads: int) -> dict:
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
    from leaner.train import make_optimizer, seed_everything

    seed_everything(0)
    model = build_model(spec["model"])
    opt = make_optimizer(model, spec["recipe"])
    train = load_splits(manifest, spec["recipe"]).train
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
    from leaner.train import train

    spec = _spec(epochs, width=64, depth=2, heads=4)
    ours, bare, tput, mem = [], [], [], []
    from leaner.data import load_splits

    steps = spec["recipe"]["epochs"] * load_splits(manifest, spec["recipe"]).train.steps_per_epoch(
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
    rows = [["leaner.train (steps/s)", median_spread(ours)], ["bare PyTorch loop (steps/s)", median_spread(bare)],
            ["ratio (target >= 0.98)", median_spread(ratios)], ["images/s (leaner)", median_spread(tput)],
            ["peak RSS MB (process)", median_spread(mem)]]
    note = (f"ViT depth 2, 4 heads, width 64 on 8x8 digits (17 tokens), batch 64, {steps} steps, "
            f"{torch.get_num_threads()} threads; leaner's time includes its per-epoch history and the final "
            f"evaluation, the bare loop's does not.")
    return table("1. Training loop against a bare PyTorch loop", ["measure", "median (min-max)"], rows) + \
        f"\n{note}\n", {"ratio": statistics.median(ratios), "train_s": steps / statistics.median(ours), "steps": steps,
                        "spec": spec, "out": work / "train0"}


# ----------------------------------------------------------------------------- 1b. data loading

def _write_images(root: Path, n: int, size: int, fmt: str) -> None:
    """A local ImageFolder (train/validation, 4 classes) of n textured images per split."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "validation"):
        for i in range(n):
            folder = root / split / f"c{i % 4}"
            folder.mkdir(parents=True, exist_ok=True)
            base = rng.integers(0, 255, (size // 8 + 1, size // 8 + 1, 3), dtype=np.uint8)
            pixels = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))[:size, :size]
            Image.fromarray(pixels).save(folder / f"{i}.{fmt}", quality=90)


def _loader_rate(manifest: str, workers: int, batch: int) -> float:
    """Images per second out of the training loader (decode + DeiT augmentation + collate)."""
    from leaner.data import load_splits

    split = load_splits(manifest, {"augment": True, "num_workers": workers}).train
    t0, n = time.perf_counter(), 0
    for x, _ in split.train_batches(batch, seed=0, epoch=0):
        n += len(x)
    return n / (time.perf_counter() - t0)


def bench_loading(manifest: str, repeats: int, trained: dict, work: Path, quick: bool) -> tuple[str, float]:
    """In-memory batches against the step they feed; the image loader's throughput per worker at
    CIFAR (32 px, PNG) and ImageNet (224 px from 256 px JPEG) sizes with the DeiT augmentation."""
    from leaner.data import load_splits, prepare

    spec = trained["spec"]
    split = load_splits(manifest, spec["recipe"]).train
    fetch = []
    for _ in range(repeats):
        t0, steps = time.perf_counter(), 0
        for _batch in split.train_batches(spec["recipe"]["batch_size"], 0, 0):
            steps += 1
        fetch.append((time.perf_counter() - t0) / steps)
    step_s = trained["train_s"] / trained["steps"]
    rows = [["digits in memory (index lookup)", "-", median_spread([1e3 * f for f in fetch]) + " ms/batch",
             f"{1e3 * step_s:.3g} ms", median_spread([100 * f / step_s for f in fetch]) + " %"]]
    rate_224 = None
    n = 32 if quick else 256
    worker_counts = [0] if quick else sorted({0, 1, os.cpu_count() or 1})
    for label, size, fmt in (("CIFAR-like 32 px PNG", 32, "png"), ("ImageNet-like 224 px (256 px JPEG)", 224, "jpg")):
        root = work / f"images{size}"
        _write_images(root / "imgs", n, 256 if size == 224 else size, fmt)
        meta = {"kind": "imagefolder", "path": str(root / "imgs"), "train_split": "train", "eval_split": "validation",
                "image_key": "image", "label_key": "label", "num_classes": 4, "img_size": size, "in_chans": 3,
                "mean": [0.5] * 3, "std": [0.25] * 3}
        prepare(f"images{size}", meta, str(root / "manifest.json"))
        for workers in worker_counts:
            rates = [_loader_rate(str(root / "manifest.json"), workers, 32) for _ in range(repeats)]
            per_proc = statistics.median(rates) / max(1, workers)
            if size == 224:
                rate_224 = max(rate_224 or 0.0, per_proc)
            rows.append([label, workers, median_spread(rates) + " images/s", "-", f"{per_proc:.0f} images/s per process"])
    text = table("1b. Data loading against the step it feeds", ["data", "workers", "loading", "training step",
                                                              "loading / step"], rows)
    text += (f"\nIn-memory batches (digits, P2's points, token windows) cost a fraction of the step above. "
             f"Image datasets go through a torch DataLoader with `recipe.num_workers` processes (pinned memory on "
             f"CUDA); {n} images per split, batch 32, DeiT training transform (RandomResizedCrop, flip, "
             f"RandAugment m9, random erasing). Row 5 divides a GPU's images/s by the per-process rate at 224 px "
             f"to give the workers it needs.\n")
    return text, rate_224 or 0.0


# ----------------------------------------------------------------------------- 2. conditioning

def bench_conditioning(manifest: str, repeats: int, trained: dict, quick: bool) -> str:
    from leaner.conditioning import kappa, write_conditioning

    out = trained["out"]
    cond = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        write_conditioning(str(out / "metrics.json"), str(out / "init.safetensors"), str(out / "model.safetensors"),
                           manifest, str(out / "conditioning.csv"))
        cond.append(time.perf_counter() - t0)
    frac = [c / trained["train_s"] for c in cond]
    text = table("2a. Conditioning stage of the trained variant of row 1",
                 ["measure", "median (min-max)"],
                 [["conditioning s (256 probe images, init + final; the Jacobian on 4)", median_spread(cond)],
                  ["training s", f"{trained['train_s']:.4g}"],
                  ["fraction of training (target <= 5%)", median_spread([100 * f for f in frac]) + " %"]])
    rows = []
    sizes = [(17, 64), (65, 128)] if quick else [(17, 64), (65, 256), (197, 256), (197, 768), (577, 768), (256, 64)]
    batch = 16 if quick else 64
    for tokens, cols in sizes:
        mats = torch.randn(batch, tokens, cols, dtype=torch.float64)
        batched, loop = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            kappa(mats)
            batched.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for m in mats:
                s = torch.linalg.svdvals(m)
                _ = s[0] / s[-1]
            loop.append(time.perf_counter() - t0)
        rows.append([tokens, cols, median_spread([1e3 * b / batch for b in batched]),
                     median_spread([1e3 * l / batch for l in loop]),
                     f"{statistics.median(loop) / statistics.median(batched):.2f}x"])
    text += "\n" + table(f"2b. kappa: leaner's batched float64 SVD against a naive per-sample loop ({batch} matrices)",
                         ["tokens N", "width h*d", "batched ms/matrix", "loop ms/matrix", "speed-up"], rows)
    text += ("\nThe naive loop calls svdvals on each (N, C) matrix as captured. leaner.conditioning.kappa batches "
             "them and hands LAPACK the tall orientation (the transposed view of a wide matrix is already "
             "column-major: no copy); on CPU, batching alone saves little, since LAPACK still runs one matrix at "
             "a time. The SVD of an N x C matrix costs O(N C min(N, C)): linear in the larger side, quadratic in "
             "the smaller; ViT-B/16 (N 197, C 768) is the paper-scale point.\n")
    return text


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

    from leaner.config import build_plan

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


# ----------------------------------------------------------------------------- 5. GPU

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


def vit_b_train_flops_per_image(tokens: int = 197, width: int = 768, depth: int = 12, mlp: int = 3072) -> float:
    """Forward matmul FLOPs x 3 (forward + backward) for ViT-B/16 at 224 px."""
    per_layer = 2 * tokens * (4 * width * width + 2 * width * mlp) + 2 * 2 * tokens * tokens * width
    return 3 * depth * per_layer


def bench_gpu(steps: int, compile_model: bool, loader_rate_224: float) -> str:
    if not torch.cuda.is_available():
        return table("5. GPU path (ViT-B/16, bf16, fused attention)", ["result"],
                     [["skipped: no CUDA device on this machine"]])
    from leaner.models import build_model

    spec = {"arch": "vit", "depth": 12, "heads": 12, "width": 768, "head_dim": 64, "mlp_hidden": 3072,
            "patch_size": 16, "img_size": 224, "in_chans": 3, "num_classes": 1000}
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    model = build_model(spec).to(dev).to(memory_format=torch.channels_last)
    if compile_model:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    batch = 256
    x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / steps
    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    achieved = vit_b_train_flops_per_image() * batch / dt / 1e12
    mfu = f"{100 * achieved / peak:.1f}%" if peak else "unknown peak"
    workers = f"{math.ceil(batch / dt / loader_rate_224)}" if loader_rate_224 else "-"
    return table("5. GPU path (ViT-B/16, bf16, fused attention" + (", torch.compile)" if compile_model else ")"),
                 ["device", "images/s", "TFLOP/s", "MFU (target >= 50% on H100)", "peak memory GB",
                  "loader workers to feed it (row 1b)"],
                 [[name, f"{batch / dt:.0f}", f"{achieved:.0f}", mfu,
                   f"{torch.cuda.max_memory_allocated() / 2**30:.1f}", workers]])


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


def _p2_variant(work: Path, steps: int) -> tuple[dict, str]:
    """P2's fig1 variant of configs/paper.yaml (L1, d 64, N 16, ff 2048, batch 256), cut to `steps`."""
    from leaner.config import load_plan
    from leaner.data import prepare

    plan = load_plan(REPO / "configs" / "paper.yaml")
    study = plan.studies["nearest_fig1"]
    variant = next(v for vid, v in study.variants.items() if vid.startswith("L1-H1-W1-"))
    spec = json.loads(variant.spec_json())
    spec["recipe"]["max_steps"] = steps
    manifest = work / "np" / "manifest.json"
    prepare(study.dataset, plan.datasets[study.dataset], str(manifest))
    return spec, str(manifest)


def bench_gpu_sharing(work: Path, steps: int, ks=(1, 4, 8)) -> str:
    """k `leaner train` processes of a P2 variant on one GPU at once, each on a seat (2 threads):
    the aggregate steps/s against one process alone."""
    title = "6b. Small variants sharing one GPU (P2 fig1 variant, `leaner train --gpu-share`)"
    if not torch.cuda.is_available():
        return table(title, ["result"], [["skipped: no CUDA device on this machine"]])
    from leaner.devices import SHARE_UNITS

    spec, manifest = _p2_variant(work, steps)
    rows, alone = [], None
    for k in ks:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0],
               "LEANER_GPU_LOCK_DIR": str(work / f"locks{k}")}
        env.pop("LEANER_DEVICE", None)
        outs = [work / f"k{k}" / str(i) for i in range(k)]
        procs = [subprocess.Popen([sys.executable, "-m", "leaner", "train", "--spec", json.dumps(spec), "--data",
                                   manifest, "--out", str(o), "--threads", "2", "--no-progress",
                                   "--gpu-share", str(SHARE_UNITS // k)], env=env, stderr=subprocess.DEVNULL)
                 for o in outs]
        if any(p.wait() for p in procs):
            raise RuntimeError(f"a shared training run failed (k={k})")
        runs = [json.loads((o / "metrics.json").read_text()) for o in outs]
        span = max(m["run"]["finished_unix"] for m in runs) - min(m["run"]["gpu_claim"]["at_unix"] for m in runs)
        each = [m["steps"] / m["wall_time_s"] for m in runs]
        total = sum(m["steps"] for m in runs) / span
        alone = alone or total
        rows.append([k, f"{min(each):.0f}-{max(each):.0f}", f"{total:.0f}", f"{total / alone:.2f}x"])
    return table(title, ["jobs on the GPU", "steps/s each", "aggregate steps/s", "vs one job"], rows)


# ----------------------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    p.add_argument("--e2e", action="store_true", help="also run the default study end to end")
    p.add_argument("--repeats", type=int, default=None, help="runs per measurement (default 7, quick 1)")
    p.add_argument("--compile", action="store_true", help="GPU row with torch.compile")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results.md"))
    a = p.parse_args(argv)
    repeats = a.repeats or (1 if a.quick else 7)
    torch.set_num_threads(1)  # as the pipeline runs each job (threads: 1 per job on the default study)
    from leaner.data import prepare

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        manifest = str(work / "data" / "manifest.json")
        prepare("digits", {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}, manifest)
        parts = [f"# Benchmarks\n\nMachine: {machine()}\nCommand: `{' '.join(['benchmarks/run.py', *(argv or sys.argv[1:])])}`"
                 f", {repeats} run(s) per measurement, {time.strftime('%Y-%m-%d %H:%M')}\n"]
        text, trained = bench_training(manifest, repeats, 2 if a.quick else 24, work)
        parts.append(text)
        print(text, flush=True)
        text, rate_224 = bench_loading(manifest, repeats, trained, work, a.quick)
        parts.append(text)
        print(text, flush=True)
        for text in (bench_conditioning(manifest, repeats, trained, a.quick), bench_dag(repeats, work, a.quick),
                     *([bench_e2e(work / "e2e")] if a.e2e else []), bench_gpu(5 if a.quick else 30, a.compile, rate_224),
                     *([bench_gpu_e2e(work / "gpu_e2e")] if a.e2e else []),
                     bench_gpu_sharing(work / "sharing", 100 if a.quick else 1500)):
            parts.append(text)
            print(text, flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".md.tmp")
    tmp_out.write_text("\n".join(parts))
    tmp_out.replace(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
