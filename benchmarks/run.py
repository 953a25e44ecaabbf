"""The pipeline's cost, measured side by side against baselines in one run.

    .venv/bin/python benchmarks/run.py            # full sizes (about 10 minutes on 2 cores)
    .venv/bin/python benchmarks/run.py --quick    # tiny sizes, a smoke run (the tests use it)
    .venv/bin/python benchmarks/run.py --e2e      # add the default study end to end (+9 minutes)

Prints each table and writes benchmarks/results.md (or --out) with the machine it ran on. Every
number is the median of --repeats runs with its spread (min-max). Rows:

1. training loop: steps/s of leaner.training.train.train against a bare PyTorch loop over the same timm
   model, data tensors, batch order and fused AdamW, alternating in one process (target >= 0.98).
   1b: data loading against the step it feeds; the image loader's rate per worker process, with
   Pillow in workers (`decode: pil`) and decoded/augmented in the training process (`decode: device`).
   1c: `decode: device`'s batched augmentation against the per-image one it replaced (commit
   PER_IMAGE_REV), the same images: images/s and image-sized tensor ops (GPU kernels) per image.
   1d: the read path (Arrow rows, tar shards) against decoding. 1e: what each stage's job imports
   before it works, against STARTUP_REV's tree. 1f: the loader feeding `leaner train` at 2, 8 and 24
   steps an epoch (a stand-in step as fast as the loader) against the loader alone and the step
   alone, this tree against FEED_REV's (--feed: this row alone).
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
import sys
import tempfile
import time
from pathlib import Path

import torch

# the rows (benchmarks/rows/), also where this file is imported by its path (the tests)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rows.common import REPO, machine  # noqa: E402
from rows.conditioning import bench_conditioning  # noqa: E402
from rows.feed import FEED_REV, bench_feed, feed_figures  # noqa: E402
from rows.gpu import (  # noqa: E402
    _p2_bare,
    bench_gpu,
    bench_gpu_p2,
    vit_b_train_flops_per_image,  # noqa: F401 (the tests take it from here)
)
from rows.kernel_sass import bench_kernel_sass  # noqa: E402
from rows.loading import (  # noqa: E402
    PER_IMAGE_REV,
    _augment_rate,
    bench_augment,
    bench_loading,
    bench_read,
    loader_rate_per_worker,
)
from rows.pipeline import STARTUP_REV, bench_dag, bench_e2e, bench_gpu_e2e, bench_startup  # noqa: E402
from rows.projection import bench_projection  # noqa: E402
from rows.training import bench_training  # noqa: E402

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
    p.add_argument("--feed-figures", nargs=3, help=argparse.SUPPRESS)  # a row 1f process
    p.add_argument("--feed", action="store_true", help="only row 1f: the loader feeding `leaner train` by the "
                                                       "epoch's length, against --feed-baseline's tree")
    p.add_argument("--feed-baseline", default=FEED_REV,
                   help=f"commit whose loader row 1f compares against (default {FEED_REV}; '' for none)")
    p.add_argument("--loader-rate", action="store_true",
                   help="only this machine's Pillow loader rate per worker at 224 px (decode: pil, row 1b's "
                        "ImageNet-sized JPEGs), for `leaner cost --loader-rate`")
    p.add_argument("--kernel-sass", action="store_true",
                   help="only row 20b: P2's low-rank attention kernels compiled for sm_90 here (no GPU needed): "
                        "registers, spills, SASS, a static estimate a score")
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
    if a.feed_figures:
        torch.set_num_threads(1)
        work, quick, steps = a.feed_figures
        print(json.dumps(feed_figures(Path(work), quick == "1", int(steps))))
        return 0
    repeats = a.repeats or (1 if a.quick else 7)
    if a.kernel_sass:
        print(bench_kernel_sass())
        return 0
    if a.loader_rate:
        torch.set_num_threads(1)
        print(f"{loader_rate_per_worker(repeats if a.repeats else 3):.0f}")
        return 0
    if a.feed:
        with tempfile.TemporaryDirectory() as tmp:
            text = bench_feed(repeats, Path(tmp), a.quick, a.feed_baseline or None)[0]
        print(text)
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
            if not a.quick:  # minutes: its own smoke test runs it at quick sizes (--feed --quick)
                text = bench_feed(repeats, work, False, a.feed_baseline or None)[0]
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
