"""The benchmark script runs and writes its tables (tiny sizes; no timing is asserted here)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def test_benchmark_script_writes_its_tables(tmp_path):
    out = tmp_path / "results.md"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nMachine: ")
    for title in ("1. Training loop against a bare PyTorch loop", "1b. Data loading against the step",
                  "1c. `decode: device` augmentation on", "1d. Reading the prepared data against decoding it",
                  "2a. Conditioning stage", "2b. kappa: leaner's batched float64 SVD", "3. `snakemake -n`",
                  "5. ViT-B/16 on the GPU", "6b. P2 fig1 variant on one GPU", "7. Paper-scale studies"):
        assert f"### {title}" in text, title
    ratio = next(line for line in text.splitlines() if line.startswith("| ratio"))
    assert float(ratio.split("|")[2].split()[0]) > 0  # a measured number, not a placeholder
    for label in ("224 px from 256 px JPEGs", "ImageNet-sized JPEGs (~400 x 350 px), 224 px"):
        for decode in ("pil", "device"):
            assert f"| {label}, decode: {decode} (" in text
    assert "images/s per process" in text
    vit = next(line for line in text.splitlines() if line.startswith("| vit_imagenet | 28 | 28 | "))
    assert 45 < float(vit.split("|")[5]) < 47.5  # row 7: the 28 variants weigh ~46 ViT-B/16 runs in FLOPs
    assert "| grid of 50 | 50 |" in text and "| grid of 100 | 100 |" in text
    assert "skipped: no CUDA device" in text or "MFU" in text
    assert "skipped: no CUDA device" in text or "aggregate steps/s" in text
    assert "| nearest_fig1 | 315 | 315 | " in text


def test_the_feed_row_measures_the_loader_feeding_leaner_train_at_each_epoch_length():
    """Row 1f at quick sizes (`run.py --feed --quick`, no baseline tree): the loader alone, the step
    alone and `leaner train` at 2, 8 and 24 steps an epoch, each a measured rate, and a verdict
    against the declared target."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "--feed", "--quick",
                           "--feed-baseline", ""], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| this tree |")]
    assert [int(r[1]) for r in rows] == [2, 8, 24]
    for r in rows:
        assert all(float(cell.split()[0]) > 0 for cell in r[2:6]) and r[6].strip() in ("holds", "misses 0.9")
    assert "Target: >= 0.9 of the slower bound at every epoch length." in proc.stdout


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench", REPO / "benchmarks" / "run.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_batched_augmentation_launches_fewer_image_kernels_than_the_per_image_one(tmp_path):
    """Row 1c against the commit whose augmentation went image by image, unpacked from git: both
    rates measured, and the batched path dispatches fewer operations on image-sized tensors per
    image (what a GPU launches kernels for), on the same images and seeds."""
    import pytest

    bench = _bench_module()
    known = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{bench.PER_IMAGE_REV}^{{commit}}"])
    if known.returncode != 0:
        pytest.skip(f"no git history with {bench.PER_IMAGE_REV} in this checkout")
    text = bench.bench_augment(1, tmp_path, True, bench.PER_IMAGE_REV)
    rows = {line.split("|")[1].strip(): line.split("|")[2:4] for line in text.splitlines() if line.startswith("| ")}
    batched, per_image = rows["batched (this tree)"], rows[f"per image ({bench.PER_IMAGE_REV})"]
    assert float(batched[0].split()[0]) > 0 and float(per_image[0].split()[0]) > 0
    assert float(batched[1]) < float(per_image[1]), text
    assert float(rows["ratio, batched / per image"][1]) < 1


def test_the_mfu_flop_count_matches_torch_flop_counter():
    """The GPU row's FLOPs per image (what MFU divides by), checked on the CPU against
    torch's own FLOP counter on one ViT-B/16 layer, forward and backward."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from leaner.models import build_model

    bench = _bench_module()
    model = build_model({"arch": "vit", "depth": 1, "heads": 12, "width": 768, "head_dim": 64, "mlp_hidden": 3072,
                         "patch_size": 16, "img_size": 224, "in_chans": 3, "num_classes": 1000})
    x = torch.randn(1, 3, 224, 224)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    one_layer = bench.vit_b_train_flops_per_image(depth=1)
    # the counter also sees the patch embedding and the head, which the formula leaves out
    assert 0.95 * counter.get_total_flops() < one_layer <= counter.get_total_flops()


def test_the_platform_spread_measures_moves_in_standard_errors(tmp_path):
    """benchmarks/platform_spread.py on the README's reference tables against a copy with one bound
    moved: that move, in the reference's standard errors, is the largest; the verdicts it compares."""
    import shutil

    import pandas as pd

    from leaner.analysis.stats import interval_se

    tables = REPO / "tests" / "reference" / "default_study" / "tables"
    for name in ("ref", "other"):
        (tmp_path / name / "results" / "tables").mkdir(parents=True)
        for table in ("all_studies-headline.csv", "all_studies-heads_effect.csv"):
            shutil.copy(tables / table, tmp_path / name / "results" / "tables" / table)
    effects = pd.read_csv(tables / "all_studies-heads_effect.csv", keep_default_na=False, na_values=[""])
    row = effects[effects["delta_lo"].notna()].index[0]
    n = [int(x) for x in effects.loc[row, "n"].split(", ")]
    se = interval_se(effects.loc[row, "delta_lo"], effects.loc[row, "delta_hi"], n[0], n[1], 0.95)
    effects.loc[row, "delta_hi"] += 2 * se
    effects.loc[row, "verdict"] = "moved"
    effects.to_csv(tmp_path / "other" / "results" / "tables" / "all_studies-heads_effect.csv", index=False)
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "platform_spread.py"), str(tmp_path / "ref"),
                           f"moved={tmp_path / 'other'}"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "largest 2.00 (" in proc.stdout and "delta_hi" in proc.stdout
    assert "-> moved" in proc.stdout and "largest |move| / se over every platform: 2.00" in proc.stdout


def test_the_stop_signal_benchmark_reports_exits_and_kept_steps():
    """benchmarks/stop_signal.py at its smallest: one process, one run per signal; each stops with
    status 75, within seconds, saving the step in flight."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "stop_signal.py"), "--repeats", "1", "--width",
                           "16", "--nproc", "1"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| 16 |")]
    assert [r[2] for r in rows] == ["SIGTERM", "SIGUSR1"] and all(r[3] == "75" for r in rows), proc.stdout
    for r in rows:
        came, saved = (int(x) for x in r[5].split(" -> "))
        assert 0 <= saved - came <= 1 and float(r[4].split()[0]) < 30


def test_the_loader_rate_command_prints_images_per_second_a_worker():
    """`benchmarks/run.py --loader-rate`: this machine's Pillow rate per worker at 224 px, one number
    that `leaner cost --loader-rate` takes."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "--loader-rate", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rate = int(proc.stdout.strip().splitlines()[-1])
    assert 1 <= rate < 100_000
    cost = subprocess.run([sys.executable, "-m", "leaner", "cost", str(REPO / "configs" / "paper.yaml"),
                           "--loader-rate", "-3"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert cost.returncode == 2 and "'-3' is not a number > 0" in cost.stderr
