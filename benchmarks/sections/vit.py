"""gpu-check's vit and vitdevice sections: vit_imagenet's ViT-B/16 through `leaner train` on JPEGs of
ImageNet's sizes, against its step alone and its input pipeline alone (the functions of
benchmarks/run.py rows 1b and 5): vit with Pillow in the loader's workers (`decode: pil`, what
configs/paper.yaml runs), vitdevice with nvJPEG and the batched augmentation on the GPU (`decode:
device`, on a side stream the step waits for by an event)."""

from __future__ import annotations

from pathlib import Path

from .common import DEVICE, ON_CPU, REPO

LOADER_OVERLAP = 0.9  # declared before the run: `leaner train` keeps this share of min(step, input path alone)
PART_BATCHES = 4  # batches the vitdevice section times part by part


def section_vit(work: Path) -> dict:
    """vit_imagenet's ViT-B/16 at its recipe's per-GPU batch (1024 over 8 GPUs: 128), compiled,
    bf16, through `leaner train` on JPEGs of ImageNet's sizes read by the real loader (Pillow
    workers, `num_workers: auto`, the DeiT augmentation), against the same step on data held on the
    GPU and against the loader alone: images/s each. `leaner cost` prices such a job at the slower
    of its step and its loader (cost.loader_feed); it passes when the run ends finite and keeps at
    least LOADER_OVERLAP of that rate (the loader overlaps the step). `--cpu`: eager, batch 4, the
    loader at the cores less one, the step on one thread."""
    return vit_through_leaner(work, "pil")


def section_vitdevice(work: Path) -> dict:
    """The same with `decode: device`: the workers read the bytes, the training process decodes
    (nvJPEG) and augments each batch on the GPU, on a side stream the step waits for by an event
    (compute/side_stream.py). Its input pipeline alone is decode and augmentation without training;
    `leaner cost` takes the images/s of the run as the device path's rate. The same rule passes it."""
    return vit_through_leaner(work, "device")


def vit_through_leaner(work: Path, decode: str) -> dict:
    import math

    import pandas as pd
    from rows.gpu import _bare_vit
    from rows.image_sets import _image_manifest
    from rows.loading import _loader_rate

    from leaner.data.splits import worker_count
    from leaner.training.train import train
    from leaner.workflow.plan import load_plan

    study = load_plan(REPO / "configs" / "paper.yaml").studies["vit_imagenet"]
    spec = study.variants["L12-H12-D768-hd64-mlp3072-s0"].spec()
    batch = 4 if ON_CPU else spec["recipe"]["batch_size"] // max(1, study.resources["gpu"])
    # the cores less one, as `num_workers: auto` gives; on the CPU the step keeps one core (one thread)
    # to itself, so that the rehearsal measures the pipeline, not two workers and a step on two cores
    workers = max(1, worker_count("auto"))
    if ON_CPU:
        import torch

        torch.set_num_threads(1)
    steps_per_epoch, epochs = (2, 4) if ON_CPU else (8, 5)  # steady: epochs 2 to the last but one
    manifest = _image_manifest(work / "jpeg", batch * steps_per_epoch, "imagenet", 224, "jpg", (decode,))[decode]
    feed = _loader_rate(manifest, workers, batch, DEVICE)  # from its start, >= 10 batches a worker
    parts = device_parts(manifest, workers, batch, DEVICE) if decode == "device" else None
    step = _bare_vit(batch, 6, False, "cpu")[0] if ON_CPU else _bare_vit(batch, 20, True)[0]
    recipe = {**spec["recipe"], "batch_size": batch, "epochs": epochs, "eval_every": 10_000, "repeat_aug": 1,
              "checkpoint_every": 10_000_000, "checkpoint_minutes": None, "num_workers": workers,
              "compile": not ON_CPU, "precision": "fp32" if ON_CPU else "bf16"}
    run = {**spec, "dataset": "jpeg", "model": {**spec["model"], "num_classes": 4}, "recipe": recipe}
    run.pop("expect_params", None)  # 4 classes, not 1000
    metrics = train(run, manifest, work / "run", device=DEVICE, threads=1 if ON_CPU else None, progress=False)
    h = pd.read_csv(work / "run" / "history.csv")
    a, b = h.iloc[1], h.iloc[-2]
    ours = (b["step"] - a["step"]) * batch / (b["elapsed_s"] - a["elapsed_s"])
    bound = min(feed, step)
    ok = math.isfinite(metrics["final"]["train_loss"]) and ours >= LOADER_OVERLAP * bound
    fed = "input-bound" if feed < step else "step-bound"
    what = (f"loader alone {feed:.0f} ({workers} workers, {feed / workers:.0f} a worker)" if decode == "pil" else
            f"decode and augmentation on the {DEVICE} alone {feed:.0f} ({workers} workers reading)")
    largest = "" if parts is None else ("; per image, " + ", ".join(f"{k} {v:.3f} ms" for k, v in parts.items())
                                        + f" (largest: {max(parts, key=parts.get)})")
    return {"status": "pass" if ok else "fail",
            "summary": f"ViT-B/16 batch {batch}{', compiled' if not ON_CPU else ''}, decode: {decode}, ImageNet-sized "
                       f"JPEGs: `leaner train` {ours:.0f} images/s; step alone {step:.0f}, {what}: {fed}, "
                       f"{ours / bound:.2f} x the slower (>= {LOADER_OVERLAP} to pass){largest}",
            "images_per_s": round(ours, 1), "step_images_per_s": round(step, 1), "decode": decode,
            "input_images_per_s": round(feed, 1), "workers": workers, "batch": batch,
            **({"ms_per_image": {k: round(v, 4) for k, v in parts.items()}} if parts else {})}


def device_parts(manifest: str, workers: int, batch: int, device: str) -> dict[str, float]:
    """`decode: device`'s input path part by part, in milliseconds per image over PART_BATCHES
    batches (after one to warm up): the wait for the loader's next batch of encoded bytes (its
    workers read ahead meanwhile, so this is what reading costs beyond that, not what it takes),
    then decode, crop, flip, RandAugment, normalise and erase on `device` (tensor_augment.
    DeviceTransforms.train's parts, the device synchronised at each part's end)."""
    import itertools
    import time

    import torch

    from leaner.data import load_splits
    from leaner.schema import Recipe

    splits = load_splits(manifest, Recipe.of({"augment": True, "num_workers": workers}))
    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    it = itertools.chain.from_iterable(splits.train.train_batches(batch, seed=0, epoch=e) for e in itertools.count())
    splits.finish.train(*next(it), dev, 0)  # warm: lazy imports, nvJPEG's handle, first allocations
    times: dict[str, float] = {}
    last = [0.0]

    def clock(part: str) -> None:
        sync()
        now = time.perf_counter()
        times[part] = times.get(part, 0.0) + now - last[0]
        last[0] = now

    images = 0
    for k in range(PART_BATCHES):
        last[0] = time.perf_counter()
        x, y = next(it)
        clock("wait for read")
        images += len(splits.finish.train(x, y, dev, k + 1, clock=clock)[0])
    return {part: 1e3 * t / images for part, t in times.items()}
