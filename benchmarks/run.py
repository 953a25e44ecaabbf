"""The pipeline's cost, measured side by side against baselines in one run.

    .venv/bin/python benchmarks/run.py            # full sizes (about 10 minutes on 2 cores)
    .venv/bin/python benchmarks/run.py --quick    # tiny sizes, a smoke run (the tests use it)
    .venv/bin/python benchmarks/run.py --e2e      # add the default study end to end (+9 minutes)

Prints each table and writes benchmarks/results.md (or --out) with the machine it ran on. Every
number is the median of --repeats runs with its spread (min-max). Rows:

1. training loop: steps/s of leaner.train.train against a bare PyTorch loop over the same timm
   model, data tensors, batch order and fused AdamW, alternating in one process (target >= 0.98).
   1b: data loading against the step it feeds; the image loader's rate per worker process, with
   Pillow in workers (`decode: pil`) and decoded/augmented in the training process (`decode: device`).
   1c: `decode: device`'s batched augmentation against the per-image one it replaced (commit
   PER_IMAGE_REV), the same images: images/s and image-sized tensor ops (GPU kernels) per image.
   1d: the read path (Arrow rows, tar shards) against decoding. 1e: what each stage's job imports
   before it works, against STARTUP_REV's tree.
2. conditioning: the conditioning stage of one trained variant as a fraction of its training
   time (target <= 5%); batched float64 SVD against a per-sample loop; cost vs tokens and width.
3. DAG resolution: `snakemake -n` for generated grids of 100-2000 variants, and the paper config.
4. end to end (--e2e): the default study from a clean folder, wall time and CPU use.
5. GPU: ViT-B/16 through `leaner train` against a bare loop on the same GPU, eager and compiled:
   steady images/s and MFU, the start (compile) apart; the loader processes that would feed it, and
   the whole `decode: device` input pipeline (read, nvJPEG, batched augmentation) against the step.
6. GPU machines: (a, --e2e) the default study with the GPU visible against the same machine's CPU
   alone; (b) P2's fig1 variant through `leaner train` (eager, CUDA graph, compile reduce-overhead)
   against a bare loop, alone and 4 and 8 processes sharing one GPU.
7. The paper-scale studies of configs/paper.yaml priced by `leaner cost` on an H100: training FLOPs
   from the built models, GPU-hours, one 8-GPU node's hours, the largest job's memory against the card.
Rows 5-6 need a GPU; without one the tables say so. Row 7 needs none.
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
# 1c times another tree: the package is imported inside the functions, so that this script runs
# with an older tree's as well
sys.path.insert(0, os.environ.get("LEANER_BENCH_SRC", str(REPO / "src")))


def median_spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{statistics.median(values):.4g} ({min(values):.4g}-{max(values):.4g})"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
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
    from leaner.optim import make_optimizer
    from leaner.resume import seed_everything

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


def _image_manifest(root: Path, n: int, stored: int, img_size: int, fmt: str, decodes=("pil", "device")) -> dict:
    """A local ImageFolder of n images per split, stored at `stored` px, prepared for each decode
    path: {decode: manifest path}."""
    from leaner.data import prepare

    _write_images(root / "imgs", n, stored, fmt)
    meta = {"kind": "imagefolder", "path": str(root / "imgs"), "train_split": "train", "eval_split": "validation",
            "image_key": "image", "label_key": "label", "num_classes": 4, "img_size": img_size, "in_chans": 3,
            "mean": [0.5] * 3, "std": [0.25] * 3}
    manifests = {}
    for decode in decodes:
        manifests[decode] = str(root / decode / "manifest.json")
        prepare(root.name, {**meta, "decode": decode}, manifests[decode])
    return manifests


def _loader_rate(manifest: str, workers: int, batch: int, device: str = "cpu") -> float:
    """Images per second out of the training loader (read, decode, DeiT augmentation, collate), as
    model input on `device` (for `decode: device`, decoded and augmented there); from the second
    batch on, so that the workers' start is not in it."""
    from leaner.data import load_splits

    splits = load_splits(manifest, {"augment": True, "num_workers": workers})
    dev = torch.device(device)
    t0, n = None, 0
    for x, y in splits.train.train_batches(batch, seed=0, epoch=0):
        if splits.finish is not None:
            x, y = splits.finish.train(x, y, dev)
        if t0 is None:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        else:
            n += len(x)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def loader_rate_per_worker(repeats: int, workers: int = 2, images: int = 256) -> float:
    """Images/s one Pillow worker gives at 224 px from 256 px JPEGs with the DeiT augmentation (row
    1b's ImageNet-like case at `workers` workers, the best of `repeats`, divided by the workers):
    what `leaner cost --loader-rate` takes."""
    with tempfile.TemporaryDirectory() as tmp:
        manifest = _image_manifest(Path(tmp), images, 256, 224, "jpg", ("pil",))["pil"]
        return max(_loader_rate(manifest, workers, 32) for _ in range(repeats)) / workers


def bench_loading(manifest: str, repeats: int, trained: dict, work: Path, quick: bool) -> tuple[str, float]:
    """In-memory batches against the step they feed; the image loader's throughput per worker at
    CIFAR (32 px, PNG) and ImageNet (224 px from 256 px JPEG) sizes with the DeiT augmentation."""
    from leaner.data import load_splits

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
    rates_224: dict[str, float] = {}
    n = 32 if quick else 256
    worker_counts = [0] if quick else sorted({0, 1, os.cpu_count() or 1})
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for label, size, fmt in (("CIFAR-like 32 px PNG", 32, "png"), ("ImageNet-like 224 px (256 px JPEG)", 224, "jpg")):
        manifests = _image_manifest(work / f"images{size}", n, 256 if size == 224 else size, size, fmt)
        for decode, manifest_path in manifests.items():
            # decode: device does its work in the training process: its rate is that process's
            for workers in (worker_counts if decode == "pil" else [0]):
                rates = [_loader_rate(manifest_path, workers, 32, device) for _ in range(repeats)]
                per_proc = statistics.median(rates) / max(1, workers)
                if size == 224:
                    rates_224[decode] = max(rates_224.get(decode, 0.0), per_proc)
                where = "Pillow in workers" if decode == "pil" else f"on {device} in the training process"
                rows.append([f"{label}, decode: {decode} ({where})", workers, median_spread(rates) + " images/s", "-",
                             f"{per_proc:.0f} images/s per process"])
    text = table("1b. Data loading against the step it feeds", ["data", "workers", "loading", "training step",
                                                              "loading / step"], rows)
    text += (f"\nIn-memory batches (digits, P2's points, token windows) cost a fraction of the step above. "
             f"Image datasets go through a torch DataLoader with `recipe.num_workers` processes (pinned memory on "
             f"CUDA); {n} images per split, batch 32, DeiT training transform (RandomResizedCrop, flip, "
             f"RandAugment m9, random erasing). `decode: device`: the workers read the encoded bytes, the "
             f"training process decodes each batch (nvJPEG on a GPU) and runs the same recipe on tensors. Row 5 "
             f"divides a GPU's images/s by the per-process rate at 224 px to give the processes it needs.\n")
    return text, rates_224


# ----------------------------------------------------------------------------- 1c. device augmentation

PER_IMAGE_REV = "cf78aec"  # the last commit whose `decode: device` augmented image by image


def _augment_rate(manifest: str, batch: int, n_batches: int, repeats: int, device: str) -> dict:
    """Images/s of `decode: device`'s work in the training process (decode, crop, flip, RandAugment,
    normalise, erase) on batches read beforehand, so that the workers' reading is not in it; and the
    operations on image-sized tensors (>= 1024 elements, views aside) it dispatches per image:
    each is a kernel launch on a GPU, what launch overhead scales with."""
    import itertools
    import random

    from torch.utils._python_dispatch import TorchDispatchMode

    from leaner.data import load_splits

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            first = out[0] if isinstance(out, (tuple, list)) and out else out
            view = any(r.alias_info is not None for r in func._schema.returns)
            Count.ops += isinstance(first, torch.Tensor) and first.numel() >= 1024 and not view
            return out

    splits = load_splits(manifest, {"augment": True, "num_workers": 0})
    batches = list(itertools.islice(splits.train.train_batches(batch, seed=0, epoch=0), n_batches))
    dev, rates = torch.device(device), []
    splits.finish.train(*batches[0], dev)  # warm: lazy imports, first allocations
    for _ in range(repeats):
        torch.manual_seed(0)
        random.seed(0)
        t0, n = time.perf_counter(), 0
        for x, y in batches:
            n += len(splits.finish.train(x, y, dev)[0])
        if dev.type == "cuda":
            torch.cuda.synchronize()
        rates.append(n / (time.perf_counter() - t0))
    torch.manual_seed(0)
    random.seed(0)
    with Count():
        for x, y in batches:
            splits.finish.train(x, y, dev)
    return {"rates": rates, "ops_per_image": Count.ops / n}


def _unpack(rev: str | None, dest: Path) -> tuple[Path | None, str]:
    """(the src/ of commit `rev`, unpacked from git into `dest` with its schemas, or None; a note
    saying why not)."""
    if not rev:
        return None, ""
    dest.mkdir(parents=True)
    archive = subprocess.run(f"git -C {REPO} archive {rev} src schemas | tar -x -C {dest}", shell=True,
                             capture_output=True, text=True)
    if archive.returncode:
        return None, f" The baseline {rev} could not be unpacked: {archive.stderr.strip()[:200]}"
    return dest / "src", ""


def _augment_rates_of(src: Path, manifest: str, batch: int, n_batches: int, repeats: int, device: str) -> dict:
    """_augment_rate with the package of another source tree, in a process of its own."""
    env = {**os.environ, "LEANER_BENCH_SRC": str(src)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--augment-rate", manifest, str(batch),
                          str(n_batches), str(repeats), device], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"row 1c with {src} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_augment(repeats: int, work: Path, quick: bool, baseline_rev: str | None) -> str:
    """The batched device augmentation against the per-image one it replaced (baseline_rev's
    source, unpacked from git), the same encoded images, one thread each, in alternating processes."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch, n_batches = (64, 1) if quick else (128, 4)  # 128: a GPU's share of the paper's 1024
    root = work / "augment"
    manifest = _image_manifest(root, batch * n_batches, 256, 224, "jpg", ("device",))["device"]
    trees = {"batched (this tree)": REPO / "src"}
    baseline, note = _unpack(baseline_rev, root / "baseline")
    if baseline:
        trees[f"per image ({baseline_rev})"] = baseline
    rates: dict[str, list[float]] = {label: [] for label in trees}
    ops: dict[str, float] = {}
    for _ in range(repeats):  # alternate, so that a slow spell of the machine hits both
        for label, src in trees.items():
            measured = _augment_rates_of(src, manifest, batch, n_batches, 1, device)
            rates[label] += measured["rates"]
            ops[label] = measured["ops_per_image"]
    rows = [[label, median_spread(r) + " images/s", f"{ops[label]:.1f}"] for label, r in rates.items()]
    if len(rates) == 2:
        (batched, per_image), (ops_b, ops_p) = rates.values(), ops.values()
        rows.append(["ratio, batched / per image", median_spread([a / b for a, b in zip(batched, per_image)]),
                     f"{ops_b / ops_p:.3f}"])
    text = table(f"1c. `decode: device` augmentation on {device}: batched against per image",
                 ["path", "rate", "image-sized tensor ops per image (kernels on a GPU)"], rows)
    return text + (f"\n{batch * n_batches} JPEGs of 256 px, batch {batch}, 224 px crops, the DeiT training recipe "
                   f"(RandAugment m9, erasing 0.25); read beforehand, timed from decode to the normalised, erased "
                   f"batch; one thread.{note}\n")


# ----------------------------------------------------------------------------- 1d. read path

def bench_read(repeats: int, work: Path, quick: bool) -> str:
    """Reading the prepared data as the loader's workers do, against decoding it (libjpeg-turbo,
    one thread), per core, the same images: a hub dataset's Arrow file (a row's encoded bytes,
    memory-mapped, `decode: device`'s dataset) in the epoch's random order and in file order, and
    webdataset tar shards read in sequence (kind webdataset)."""
    import datasets
    import numpy as np
    from torchvision.io import ImageReadMode, decode_jpeg

    from leaner.data.images import EncodedImageDataset
    from leaner.data.shards import _samples, write_shard

    n, size = (64, 384) if quick else (1024, 384)
    root = work / "read"
    _write_images(root / "imgs", n, size, "jpg")
    files = sorted((root / "imgs" / "train").rglob("*.jpg"))
    images = [f.read_bytes() for f in files]
    labels = [int(f.parent.name[1:]) for f in files]
    ds = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": f.name} for b, f in zip(images, files)],
                                     "label": labels},
                                    features=datasets.Features({"image": datasets.Image(),
                                                                "label": datasets.Value("int64")}))
    ds.save_to_disk(str(root / "arrow"))  # the bytes inside the Arrow file, as a hub dataset's are
    reader = EncodedImageDataset(datasets.load_from_disk(str(root / "arrow")), "image", "label", 3)
    per_shard = max(1, n // 8)
    shards = []
    for k in range(0, n, per_shard):
        shards.append(root / f"read-train-{k // per_shard:04d}.tar")
        write_shard(shards[-1], ((f"{i:06d}", {"jpg": images[i], "cls": str(labels[i]).encode()})
                                 for i in range(k, min(n, k + per_shard))))
    order = np.random.default_rng(0).permutation(n)
    rates: dict[str, list[float]] = {"Arrow rows, random order": [], "Arrow rows, file order": [],
                                     "tar shards, in sequence": [], "decode (libjpeg-turbo)": []}
    for _ in range(repeats):
        for label, idx in (("Arrow rows, random order", order), ("Arrow rows, file order", range(n))):
            t0 = time.perf_counter()
            encoded = [reader[int(i)][0][0] for i in idx]
            rates[label].append(n / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        read = sum(1 for f in shards for _ in _samples(f, "jpg", "cls"))
        rates["tar shards, in sequence"].append(read / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for data in encoded:
            decode_jpeg(data, mode=ImageReadMode.RGB)
        rates["decode (libjpeg-turbo)"].append(n / (time.perf_counter() - t0))
    decode = statistics.median(rates["decode (libjpeg-turbo)"])
    rows = [[label, median_spread(r) + " images/s", f"{statistics.median(r) / decode:.2f}"]
            for label, r in rates.items()]
    mean_kb = statistics.mean(len(b) for b in images) / 1024
    return table("1d. Reading the prepared data against decoding it, per core", ["step", "rate", "/ decode"], rows) + \
        (f"\n{n} JPEGs of {size} px ({mean_kb:.0f} KiB each on average; ImageNet's are about 110 KiB), from the page "
         f"cache; one process, one thread. Arrow rows through the loader's dataset for `decode: device` (the bytes "
         f"inside the Arrow file, as a hub dataset's are); shards of {per_shard} samples read as kind webdataset's "
         f"workers read them.\n")


# ----------------------------------------------------------------------------- 1e. job start-up

STARTUP_REV = "05f4347"  # the tree before the workflow layer and the catalogues (issue 26)
# What a job of each stage of the default study imports before it works: the CLI, then the modules
# its command and its task's classes load (the same modules in both trees).
STARTUP_STAGES = {
    "prepare-data (digits)": ("leaner.cli", "leaner.data", "leaner.data.digits", "sklearn.datasets"),
    "train (P2, nearest_point)": ("leaner.cli", "leaner.train", "leaner.tasks.nearest", "leaner.models.nearest"),
    "train (ViT, digits)": ("leaner.cli", "leaner.train", "leaner.tasks.image", "leaner.models.vit",
                            "leaner.data.digits"),
    "train (ListOps)": ("leaner.cli", "leaner.train", "leaner.tasks.sequence", "leaner.models.sequence"),
    "conditioning (P2)": ("leaner.cli", "leaner.conditioning", "leaner.tasks.nearest", "leaner.models.nearest"),
    "summary": ("leaner.cli", "leaner.analysis.summary"),
    "figures": ("leaner.cli", "leaner.analysis.study_figures", "matplotlib.pyplot"),
    "tables": ("leaner.cli", "leaner.analysis.study_tables"),
    "overview": ("leaner.cli", "leaner.analysis.overview", "matplotlib.pyplot"),
}


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
                measured = _startup_of(src, modules)
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
                     median_spread([1e3 * t / batch for t in loop]),
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


# ----------------------------------------------------------------------------- 5. GPU

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}
VIT_B = {"arch": "vit", "depth": 12, "heads": 12, "width": 768, "head_dim": 64, "mlp_hidden": 3072,
         "patch_size": 16, "img_size": 224, "in_chans": 3, "num_classes": 1000, "qkv_bias": True,
         "drop_path_rate": 0.0, "global_pool": "token"}


def vit_b_train_flops_per_image(tokens: int = 197, width: int = 768, depth: int = 12, mlp: int = 3072) -> float:
    """Forward matmul FLOPs x 3 (forward + backward) for ViT-B/16 at 224 px."""
    per_layer = 2 * tokens * (4 * width * width + 2 * width * mlp) + 2 * 2 * tokens * tokens * width
    return 3 * depth * per_layer


def _mfu(images_per_s: float) -> str:
    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    achieved = vit_b_train_flops_per_image() * images_per_s / 1e12
    return f"{achieved:.0f} TFLOP/s, " + (f"{100 * achieved / peak:.1f}%" if peak else "unknown peak")


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
    """ViT-B/16 through leaner.train.train on the synthetic set: (steady images/s from the per-epoch
    history, after the first two epochs and before the final evaluation; seconds of the first epoch)."""
    import pandas as pd

    from leaner.train import train
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
        rows.append([f"bare loop, {label}", f"{bare:.0f}", _mfu(bare), f"{bare_warm:.1f} s (5 steps)", "-"])
        rows.append([f"`leaner train`, {label}", f"{ours:.0f}", _mfu(ours), f"{first_epoch:.1f} s (first 4 steps)",
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


def _p2_bare(spec_file: str, steps: int) -> None:
    """Run inside a subprocess (`--p2-bare`): the P2 variant's step with nothing else (points drawn
    on the GPU, no per-step sync); prints steps/s."""
    from leaner.data.nearest_point import PointStream
    from leaner.models import build_model
    from leaner.optim import make_optimizer
    from leaner.tasks.nearest import nearest_point_mse

    spec = json.loads(Path(spec_file).read_text())
    dev = torch.device("cuda")
    recipe = spec["recipe"]
    torch.backends.cuda.matmul.allow_tf32 = recipe["tf32"]  # the recipe's precision, as `leaner train` runs it
    model = build_model(spec["model"]).to(dev)
    opt = make_optimizer(model, spec["recipe"])
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
    from leaner.devices import SHARE_UNITS

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
        bare_out = _concurrently([[sys.executable, __file__, "--p2-bare", str(spec_file), str(steps)]] * k, env)
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


def _hours(hours: float) -> str:
    return f"{hours:,.1f}" if hours >= 1 else f"{hours:.2g}"


def bench_projection() -> str:
    """Each paper-scale study of configs/paper.yaml priced by `leaner cost` on an H100 (leaner/cost.py):
    training FLOPs from the built models, so variants weigh by their work instead of counting as
    equal; GPU-hours at the measured or stated MFU, P2 at its measured step rates; and the largest
    job's memory against the card."""
    from leaner.cost import CARDS, plan_cost
    from leaner.workflow.plan import load_plan

    gpu = CARDS["h100"]
    t0 = time.perf_counter()
    costs = plan_cost(load_plan(REPO / "configs" / "paper.yaml"), gpu)
    seconds = time.perf_counter() - t0
    rows = []
    for c in costs:
        base = next((r for r in c.rows if r["job"] == c.baseline), None)
        flops, hours, big = c.total("train_flops"), c.total("gpu_hours"), c.largest()
        k = big["jobs_per_gpu"]
        rows.append([c.name, len({r["job"].split("/")[0] for r in c.rows}), len(c.rows), f"{flops:.3g}",
                     f"{flops / base['train_flops']:.1f}" if base else "-", _hours(hours), _hours(hours / 8),
                     f"{big['job']}: {'' if k == 1 else f'{k} x '}{big['memory_gb']:.1f}",
                     "yes" if k * big["memory_gb"] <= gpu.memory_gb else "no",
                     ", ".join(sorted({r["priced_by"].split(" (")[0] for r in c.rows}))])
    hours = sum(c.total("gpu_hours") for c in costs)
    rows.append(["total", sum(r[1] for r in rows), sum(r[2] for r in rows),
                 f"{sum(c.total('train_flops') for c in costs):.3g}", "", _hours(hours), _hours(hours / 8), "", "", ""])
    text = table("7. Paper-scale studies: `leaner cost configs/paper.yaml` on an H100", [
        "study", "variants", "jobs", "training FLOP", "x its baseline", "GPU-hours", "8-GPU node (h)",
        "largest job: GB per GPU", "fits 80 GB", "priced by"], rows)
    return text + (f"\nPlanned in {seconds:.0f} s. FLOPs counted from each built model (x its baseline: the study's "
                   "FLOPs over its baseline variant's); GPU-hours at 36% MFU for the ViTs (measured, ViT-B/16 "
                   "compiled on an H200), 30% for the other P1 models (assumed), P2 by its measured step rates "
                   "(launch-bound, else attention- or FLOP-bound; k jobs sharing a GPU split its hours). 8-GPU node: "
                   "GPU-hours / 8, perfectly packed. `leaner cost` prints how each study is priced.\n")


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


# ----------------------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    p.add_argument("--e2e", action="store_true", help="also run the default study end to end")
    p.add_argument("--gpu-only", action="store_true", help="only the GPU rows (5, 6b) and the projection (7)")
    p.add_argument("--repeats", type=int, default=None, help="runs per measurement (default 7, quick 1)")
    p.add_argument("--augment-baseline", default=PER_IMAGE_REV,
                   help=f"commit whose per-image augmentation row 1c compares against (default {PER_IMAGE_REV}; "
                        "'' for none)")
    p.add_argument("--augment-rate", nargs=5, help=argparse.SUPPRESS)  # a row 1c process
    p.add_argument("--p2-bare", nargs=2, metavar=("SPEC", "STEPS"), help=argparse.SUPPRESS)  # a row 6b process
    p.add_argument("--loader-rate", action="store_true",
                   help="only this machine's Pillow loader rate per worker at 224 px (decode: pil, row 1b's "
                        "ImageNet-like images), for `leaner cost --loader-rate`")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results.md"))
    a = p.parse_args(argv)
    if a.augment_rate:
        torch.set_num_threads(1)
        manifest, batch, n_batches, repeats, device = a.augment_rate
        print(json.dumps(_augment_rate(manifest, int(batch), int(n_batches), int(repeats), device)))
        return 0
    if a.p2_bare:
        _p2_bare(a.p2_bare[0], int(a.p2_bare[1]))
        return 0
    repeats = a.repeats or (1 if a.quick else 7)
    if a.loader_rate:
        torch.set_num_threads(1)
        print(f"{loader_rate_per_worker(repeats if a.repeats else 3):.0f}")
        return 0
    torch.set_num_threads(1)  # as the pipeline runs each job (threads: 1 per job on the default study)
    from leaner.data import prepare

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        manifest = str(work / "data" / "manifest.json")
        prepare("digits", {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}, manifest)
        command = " ".join(["benchmarks/run.py", *(argv or sys.argv[1:])])
        parts = [f"# Benchmarks\n\nMachine: {machine()}\nCommand: `{command}`"
                 f", {repeats} run(s) per measurement, {time.strftime('%Y-%m-%d %H:%M')}\n"]
        loader_rates = {}
        if not a.gpu_only:
            text, trained = bench_training(manifest, repeats, 2 if a.quick else 24, work)
            parts.append(text)
            print(text, flush=True)
            text, loader_rates = bench_loading(manifest, repeats, trained, work, a.quick)
            parts.append(text)
            print(text, flush=True)
            for text in (bench_augment(repeats, work, a.quick, None if a.quick else a.augment_baseline or None),
                         bench_read(repeats, work, a.quick),
                         bench_startup(min(repeats, 5), work, a.quick, None if a.quick else STARTUP_REV),
                         bench_conditioning(manifest, repeats, trained, a.quick), bench_dag(repeats, work, a.quick),
                         *([bench_e2e(work / "e2e")] if a.e2e else [])):
                parts.append(text)
                print(text, flush=True)
        text = bench_gpu(5 if a.quick else 30, loader_rates, work / "vit", a.quick)[0]
        parts.append(text)
        print(text, flush=True)
        gpu_e2e = [bench_gpu_e2e(work / "gpu_e2e")] if a.e2e else []
        # at least 4 epochs of 100 steps: the steady rate is read between history rows
        p2_text = bench_gpu_p2(work / "p2", 500 if a.quick else 1500, (1, 2) if a.quick else (1, 4, 8),
                               a.quick)[0]
        for text in (*gpu_e2e, p2_text, bench_projection()):
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
