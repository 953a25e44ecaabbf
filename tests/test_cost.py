"""`leaner cost`: training FLOPs and parameters from the built model, GPU-hours that add up, each
job's GPU memory against peaks measured on an H100, and the onstart check that stops a run whose
jobs cannot fit their GPU (through real Snakemake, the card given by LEANER_GPU_MEM_GB)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import yaml

from leaner.models import build_model, param_counts
from leaner.models.footprint import footprint, sample, saved_tensors, training_flops
from leaner.planning.cards import CARDS, Card, card
from leaner.planning.cost import plan_cost, training_rows
from leaner.planning.cost_report import format_cost, write_cost_csv
from leaner.planning.fit import fit_cards, fit_problems, memory_problems
from leaner.runspec import RunSpec
from leaner.workflow.plan import build_plan, load_plan

from conftest import REPO, TINY, image_folder, snakemake

pytestmark = pytest.mark.fast

VIT_B16 = {"arch": "vit", "depth": 12, "heads": 12, "width": 768, "head_dim": 64, "mlp_hidden": 3072, "patch_size": 16,
           "img_size": 224, "in_chans": 3, "num_classes": 1000, "qkv_bias": True, "drop_path_rate": 0.0,
           "global_pool": "token"}


def p2(depth, heads, modules, tokens=16, dim=64, posn="none"):
    d_model = dim + (64 if posn == "concatenated" else 0)
    return {"arch": "nearest_point_encoder", "ff": 2048, "posn_dim": 64, "depth": depth, "heads": heads,
            "modules": modules, "dim": dim, "tokens": tokens, "posn": posn, "d_model": d_model,
            "head_dim": d_model // heads}


def test_vit_b16_flops_and_parameters_from_the_built_model():
    """ViT-B/16 at 224 px: 86.57M parameters (papers.md 1.3) and 17.6 G multiply-adds forward
    (35.1 GFLOP), about three times that to train."""
    fp = footprint(VIT_B16, "bf16")
    assert abs(fp.params - 86_567_656) < 1000
    forward_macs = fp.flops / 3 / 2
    assert abs(forward_macs - 17.6e9) / 17.6e9 < 0.03, forward_macs
    with torch.device("meta"):
        model = build_model(VIT_B16)
    assert fp.params == param_counts(model)["total"]  # the depth-12 model, counted whole
    assert fp.flops == training_flops(model, sample(VIT_B16, 1, "meta"))[0]


@pytest.mark.parametrize("spec", [
    {**VIT_B16, "depth": 4, "width": 64, "heads": 4, "head_dim": 16, "mlp_hidden": 128, "img_size": 32,
     "drop_path_rate": 0.1},
    p2(4, 8, 8, posn="additive"),
    {"arch": "causal_lm", "depth": 3, "heads": 2, "width": 32, "head_dim": 16, "mlp_hidden": 64, "vocab_size": 260,
     "max_len": 64, "qkv_bias": True, "drop_path_rate": 0.0},
    {"arch": "sequence_classifier", "depth": 3, "heads": 2, "width": 32, "head_dim": 16, "mlp_hidden": 64,
     "vocab_size": 20, "max_len": 100, "num_classes": 10, "pad_id": 0},
])
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_a_footprint_measured_on_two_blocks_is_exact_at_any_depth(spec, precision):
    """Blocks 2.. are copies of the second: parameters, FLOPs and saved bytes measured at depth 2
    and extended equal those of the deeper model measured whole (drop-path rates differ per block)."""
    fp = footprint(spec, precision)
    with torch.device("meta"):
        model = build_model(spec)
    assert fp.params == param_counts(model)["total"]
    assert fp.flops == pytest.approx(training_flops(model, sample(spec, 1, "meta"))[0], rel=1e-9)
    whole = saved_tensors(model, spec, precision)
    assert fp.saved == pytest.approx(sum(whole["saved"]), rel=1e-9)
    assert fp.fixed == pytest.approx(sum(whole["fixed"]), rel=1e-9, abs=1)
    assert (fp.fixed > 0) == (precision == "bf16")  # autocast's bf16 copies of the weights, once per step


# GPU memory above the model's weights and AdamW state at the peak of a training step (so its gradients
# and the activations), one H100, torch 2.11, fp32 without TF32, fused AdamW, batch 256 (P2) or 128 (ViT-B/16,
# bf16 autocast, eager): (model, precision, batch, measured GB, how much may be measured (GB) when a range).
MEASURED_H100 = [
    # given with the task (P2's attention kernels chosen on these measurements, models/nearest.py)
    (p2(5, 64, 64), 9.3), (p2(5, 1, 64), 1.8), (p2(2, 1, 64, tokens=256), 13.7), (p2(2, 8, 64, tokens=256), 21.0),
    (p2(2, 64, 64, tokens=64), (30.0, 43.0)), (p2(3, 128, 8, posn="concatenated"), 1.75), (p2(2, 16, 8, dim=256), 0.6),
    # measured for this check (a bare training loop of NearestPointEncoder and timm's vit_base_patch16_224)
    (p2(1, 1, 1), 0.111), (p2(3, 4, 8), 0.313), (p2(5, 64, 64), 10.03), (p2(5, 1, 64), 1.99), (p2(5, 8, 64), 2.58),
    (p2(2, 64, 64, tokens=64), 32.1), (p2(2, 16, 64, tokens=64), 7.89), (p2(2, 8, 64, tokens=256), 22.5),
    (p2(2, 1, 64, tokens=256), 14.7), (p2(2, 4, 64, tokens=256), 18.0), (p2(2, 16, 8, dim=256), 0.596),
    (p2(3, 128, 8, posn="concatenated"), 1.89), (VIT_B16, 9.03),
]


def _name(spec):
    if spec["arch"] == "vit":
        return "ViT-B/16 bf16 b128"
    return f"L{spec['depth']}-H{spec['heads']}-W{spec['modules']}-d{spec['dim']}-N{spec['tokens']}-{spec['posn']}"


@pytest.mark.parametrize("spec, measured", MEASURED_H100, ids=[_name(s) for s, _ in MEASURED_H100])
def test_memory_estimate_against_peaks_measured_on_an_h100(spec, measured, monkeypatch):
    """Within 30% of the measured peak, never below it by more (activations and gradients), under
    the attention forms those runs took (before CUDA took the low-rank kernel for rank <= 2)."""
    from leaner.models import nearest

    monkeypatch.setattr(nearest, "LOWRANK_ON_CUDA", False)
    arch_vit = spec["arch"] == "vit"
    fp = footprint(spec, "bf16" if arch_vit else "fp32", flops=False)
    estimate = (fp.activation_bytes(128 if arch_vit else 256) + 4 * fp.params) / 1e9
    low, high = measured if isinstance(measured, tuple) else (measured, measured)
    assert 0.7 * high <= estimate <= 1.3 * low, (estimate, measured)


def test_a_job_measured_not_to_fit_an_h100_is_estimated_not_to(monkeypatch):
    """figN L2-H64-W64 at N 256 did not fit in 80 GB under the fused kernel (its backward workspace
    alone: one 64 x 64 fp32 tile per 64 queries and sample-head, 4096 heads x 256 samples x 4 x 16 KB)."""
    from leaner.models import nearest
    from leaner.models.memory import training_gpu_bytes

    monkeypatch.setattr(nearest, "LOWRANK_ON_CUDA", False)

    spec = RunSpec.of({"study": "figN", "variant": "v", "task": "nearest_point", "dataset": "points", "seed": 0,
                       "model": p2(2, 64, 64, tokens=256), "recipe": {"batch_size": 256, "eval_batch_size": 1024}})
    fp = footprint(spec.model, "fp32", flops=False)
    assert training_gpu_bytes(fp, spec.recipe, 1) / 1e9 > CARDS["h100"].memory_gb


def _config(tmp_path, studies: dict, datasets: dict | None = None):
    cfg = {"datasets": datasets or {}, "studies": studies,
           "theory": {"draws": 2, "seed": 0, "tokens": [17], "head_dim": [8], "width": [64], "heads": [1, 2]}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, cfg


FIGN_BIG = {"task": "nearest_point", "dataset": "nearest_point", "model": {"ff": 2048},
            "recipe": {"epochs": 2, "lr": 0.005},
            "grid": {"depth": [2], "heads": [1, 64], "modules": [64], "dim": [64], "tokens": [256], "seeds": [0]},
            "resources": {"gpu": 1, "threads": 1, "runtime": 5, "mem_mb": 1000}}


def test_the_memory_check_names_the_job_that_cannot_fit(tmp_path):
    # 64 heads of rank 1 at batch 2048: past 80 GB whatever attention form CUDA takes (~16 GB at 256)
    big = {**FIGN_BIG, "recipe": {**FIGN_BIG["recipe"], "batch_size": 2048},
           "grid": {**FIGN_BIG["grid"], "heads": [64]}}
    _, cfg = _config(tmp_path, {"big": big,
                                "shared": {**FIGN_BIG, "grid": {**FIGN_BIG["grid"], "heads": [16], "tokens": [64]},
                                           "resources": {**FIGN_BIG["resources"], "jobs_per_gpu": 8}}})
    plan = build_plan(cfg)
    problems = memory_problems(plan, {"big": CARDS["h100"], "shared": CARDS["h100"]})
    assert problems[0] == ("study big: job L2-H64-W64-r1-d64-N256-none-s0 needs ~126 GB of GPU memory, an H100 SXM "
                           "has 80 GB (allowed: a smaller batch_size, more GPUs per variant (resources.gpu), or a "
                           "larger card)")
    assert problems[1].startswith("study shared: 8 jobs share a GPU (jobs_per_gpu) and need ~")
    assert "(allowed: jobs_per_gpu <= 8," not in problems[1] and "(allowed: jobs_per_gpu <= " in problems[1]
    assert memory_problems(plan, {"shared": CARDS["h200"]}) == []  # 141 GB hold 8 of them
    assert len(problems) == 2


def test_which_card_a_study_is_checked_against(tmp_path, monkeypatch):
    _, cfg = _config(tmp_path, {"big": {**FIGN_BIG, "resources": {**FIGN_BIG["resources"], "gpu_model": "h200"}},
                                "cpu": {**FIGN_BIG, "resources": {"gpu": 0}}})
    plan = build_plan(cfg)
    assert fit_cards(plan, "cluster", {}) == {"big": CARDS["h200"]}  # gpu_model names a card; gpu: 0 never checked
    assert fit_cards(plan, "local", {"LEANER_DEVICE": "cpu"}) == {}
    assert fit_cards(plan, "local", {"LEANER_GPU_MEM_GB": "24"})["big"].memory_gb == 24
    if not torch.cuda.is_available():
        assert fit_cards(plan, "local", {}) == {}  # no card known: nothing to check
    assert fit_problems(plan, "local", {"LEANER_GPU_MEM_GB": "lots"}) == [
        "LEANER_GPU_MEM_GB=lots: not a GPU memory in GB (allowed: a number > 0, e.g. 80)"]
    assert fit_problems(plan, "local", {"LEANER_GPU_MEM_GB": "200"}) == []


@pytest.mark.workflow
def test_onstart_stops_a_run_whose_job_cannot_fit_its_gpu(tmp_path, monkeypatch):
    """Before any job: one line, no traceback, nothing written; a dry run is not stopped."""
    # 64 heads of rank 1 at batch 2048: past 80 GB whatever attention form CUDA takes (~16 GB at 256)
    big = {**FIGN_BIG, "recipe": {**FIGN_BIG["recipe"], "batch_size": 2048},
           "grid": {**FIGN_BIG["grid"], "heads": [64]}}
    config, _ = _config(tmp_path, {"big": big})
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("LEANER_GPU_MEM_GB", "80")
    dry = snakemake(work, "-n", "--cores", "2", configfile=config, check=False)
    assert dry.returncode == 0, dry.stderr[-2000:]
    proc = snakemake(work, "--cores", "2", configfile=config, check=False)
    assert proc.returncode != 0
    line = ("study big: job L2-H64-W64-r1-d64-N256-none-s0 needs ~126 GB of GPU memory, the GPU of "
            "LEANER_GPU_MEM_GB=80 has 80 GB (allowed: a smaller batch_size, more GPUs per variant (resources.gpu), "
            "or a larger card)")
    assert line in proc.stderr.splitlines(), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not (work / "results").exists() and not (work / "logs").exists()


def test_plan_totals_add_up_from_their_rows(tmp_path):
    """GPU-hours are FLOPs over the peak at the MFU (DDP: the same GPU-hours, 1/g of the wall time);
    shared P2 jobs split their GPU's hours; the printed total is the sum of the studies'."""
    _, cfg = _config(tmp_path, {
        "vit": {"task": "image_classification", "dataset": "digits", "model": {"patch_size": 2},
                "recipe": {"epochs": 3, "batch_size": 64, "lr": 1e-2},
                "grid": {"protocol": ["fixed_width"], "width": [64], "depth": [1, 3], "heads": [1, 4],
                         "mlp_ratio": [2], "seeds": [0]},
                "baseline": {"depth": 3, "heads": 1}, "resources": {"gpu": 2, "threads": 2}},
        "p2": {**FIGN_BIG, "grid": {"depth": [1, 3], "heads": [1, 8], "modules": [1, 8], "dim": [16], "tokens": [8],
                                    "seeds": [0, 1]}, "resources": {"gpu": 1, "jobs_per_gpu": 4, "threads": 1}}},
        {"digits": {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}})
    plan, gpu = build_plan(cfg), card("a100")
    costs = {c.name: c for c in plan_cost(plan, gpu, mfu=0.4, root=tmp_path)}
    assert [len(c.rows) for c in costs.values()] == [4, 16]
    steps = 3 * math.ceil((1797 - round(1797 * 0.2)) / 64)  # digits: 1438 training images
    for r in costs["vit"].rows:
        assert r["steps"] == steps and r["precision"] == "bf16" and r["gpus"] == 2
        assert r["gpu_hours"] == pytest.approx(r["flops_per_sample"] * 64 * steps / (312e12 * 0.4) / 3600)
        assert r["wall_hours"] == pytest.approx(r["gpu_hours"] / 2)
    for r in costs["p2"].rows:
        assert r["steps"] == 2 * 100 and r["precision"] == "fp32"
        assert r["gpu_hours"] == pytest.approx(r["wall_hours"] / 4)
    for c in costs.values():
        assert c.total("gpu_hours") == pytest.approx(sum(r["gpu_hours"] for r in c.rows))
        assert c.total("train_flops") == pytest.approx(sum(r["flops_per_sample"] * r["batch_size"] * r["steps"]
                                                           for r in c.rows))
    text = format_cost(list(costs.values()), gpu, "config.yaml")
    total = next(line for line in text.splitlines() if line.startswith("total"))
    assert f"{sum(c.total('gpu_hours') for c in costs.values()):.2f}" in total
    assert "x the FLOPs of its baseline L3-H1-D64-hd64-mlp128-s0" in text
    out = tmp_path / "cost.csv"
    write_cost_csv(out, list(costs.values()))
    import pandas as pd

    frame = pd.read_csv(out)
    assert len(frame) == 20 and frame["gpu_hours"].sum() == pytest.approx(sum(c.total("gpu_hours")
                                                                             for c in costs.values()))
    assert not list(tmp_path.glob(".cost.csv.*"))  # written through a temporary file


def test_the_paper_vit_grid_is_46_vit_b_in_flops():
    """configs/paper.yaml's 28 ViT variants cost ~46 ViT-B/16 runs, L12-H32-D2048 alone ~6.9."""
    plan = load_plan(REPO / "configs" / "paper.yaml")
    plan.studies = {"vit_imagenet": plan.studies["vit_imagenet"]}
    (vit,) = plan_cost(plan, CARDS["h100"])
    base = next(r for r in vit.rows if r["job"] == "L12-H12-D768-hd64-mlp3072-s0")
    big = next(r for r in vit.rows if r["job"] == "L12-H32-D2048-hd64-mlp8192-s0")
    assert 45 < vit.total("train_flops") / base["train_flops"] < 47.5
    assert 6.7 < big["train_flops"] / base["train_flops"] < 7.1
    assert base["steps"] == 300 * math.ceil(1_281_167 / 1024)  # ImageNet-1k's training set, known without a download
    assert base["mfu"] == 0.36
    # at its step, a GPU would take more images/s than 7 Pillow workers give: priced at its loader
    assert base["images_per_s_needed"] > base["images_per_s_fed"]
    assert base["priced_by"] == "loader (decode: pil, 7 workers a GPU)"
    assert all(r["fits"] for r in vit.rows)  # 128 images per GPU (1024 over 8)


def test_a_prepared_manifest_gives_the_training_set_size(tmp_path):
    _, cfg = _config(tmp_path, {"imgs": {"task": "image_classification", "dataset": "local",
                                         "recipe": {"epochs": 1, "batch_size": 10},
                                         "grid": {"protocol": ["fixed_width"], "width": [32], "depth": [1],
                                                  "heads": [2], "mlp_ratio": [2], "seeds": [0]}}},
                     {"local": {"kind": "imagefolder", "path": str(image_folder(tmp_path / "imgs")), "num_classes": 3,
                                "img_size": 32}})
    plan = build_plan(cfg)
    spec = RunSpec.of(next(iter(plan.studies["imgs"].variants.values())).spec())
    assert training_rows(plan, spec, tmp_path) is None
    (cost,) = plan_cost(plan, CARDS["h100"], root=tmp_path)
    text = format_cost([cost], CARDS["h100"], "config.yaml")
    assert ("training-set size unknown, GPU-hours left out: imgs L1-H2-D32-hd16-mlp64-s0 (prepare its dataset "
            "first: snakemake results/data/<dataset>/manifest.json)") in text
    manifest = tmp_path / "results" / "data" / "local" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"n_train": 95}))
    assert training_rows(plan, spec, tmp_path) == 95
    (cost,) = plan_cost(plan, CARDS["h100"], root=tmp_path)
    assert cost.rows[0]["steps"] == 10


def _leaner(*args, env=None):
    return subprocess.run([sys.executable, "-m", "leaner", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


@pytest.mark.parametrize("args, env, line", [
    (["--gpu", "x100"], {}, "leaner cost: error: --gpu x100: unknown card (allowed: h100, h200, a100, l40s, a10)"),
    (["--mfu", "45"], {}, "leaner cost: error: --mfu 45: not a fraction of the peak (allowed: a number in (0, 1], "
                          "e.g. 0.3)"),
    (["--check", "local"], {"LEANER_GPU_MEM_GB": "-1"},
     "LEANER_GPU_MEM_GB=-1: not a GPU memory in GB (allowed: a number > 0, e.g. 80)"),
    # a mistyped study, with or without --wall-budget, is refused (it once printed an empty table, or
    # priced every study)
    (["--study", "tiny_nearst"], {}, f"leaner cost: error: --study tiny_nearst: no such study in {TINY} (did you "
                                     "mean 'tiny_nearest'?) (studies: tiny, tiny_nearest)"),
    (["--wall-budget", "4", "--study", "tny"], {}, f"leaner cost: error: --study tny: no such study in {TINY} "
                                                   "(did you mean 'tiny'?) (studies: tiny, tiny_nearest)"),
])
def test_bad_input_is_one_line_naming_what_is_allowed(args, env, line):
    config = TINY if "--check" not in args else REPO / "configs" / "paper.yaml"
    proc = _leaner("cost", str(config), *args, env=env)
    assert proc.returncode != 0
    assert proc.stderr.strip() == line


def test_study_prices_only_the_studies_named():
    proc = _leaner("cost", str(TINY), "--study", "tiny_nearest")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split()[0] for line in proc.stdout.splitlines()[3:] if line.strip()]
    assert "tiny_nearest" in rows and "tiny" not in rows, proc.stdout


def test_the_cli_prints_the_plan(tmp_path):
    proc = _leaner("cost", str(TINY), "--gpu", "h200", "--out", str(tmp_path / "plan.csv"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"Cost of {TINY} on an H200: 141 GB;")
    header = lines[2].split()
    assert header[:3] == ["study", "variants", "jobs"]
    for study in ("tiny", "tiny_nearest", "total"):
        assert any(line.startswith(study + " ") for line in lines), study
    assert len((tmp_path / "plan.csv").read_text().splitlines()) == 1 + 8  # a header, a row per job


def test_one_table_of_cards_names_each_device_torch_reports():
    """The planner and the benchmarks read one table: a CUDA device's name (as torch gives it)
    finds its card, A100 before A10, and an unknown one none; each card's peaks rise from fp64 to
    bf16, and an MFU is a share of the peak at the run's arithmetic."""
    from leaner.planning.cards import card_named

    assert set(CARDS) == {"h100", "h200", "a100", "l40s", "a10"}
    for name, key in [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-80GB", "a100"),
                      ("NVIDIA L40S", "l40s"), ("NVIDIA A10", "a10")]:
        assert card_named(name) is CARDS[key], name
    assert card_named("Tesla V100-SXM2-16GB") is None
    for c in CARDS.values():
        assert isinstance(c, Card) and c.memory_gb >= 24
        assert c.peak_flops("fp64") <= c.peak_flops("fp32") <= c.peak_flops("tf32") <= c.peak_flops("bf16")
    assert CARDS["h100"].mfu(0.36 * 989e12, "bf16") == pytest.approx(0.36)


def test_conditioning_is_priced_in_memory_and_hours_from_its_probe():
    """nearest_figN's L2-H64-W64 at N 256: one probe input takes ~6.4 GB in float64, so an H100
    measures 8 at a time (~52 GB with the model and context), where 64 at once would need ~412 GB;
    its hours are bound by memory traffic, not FLOPs. ViT-B's conditioning is FLOP-bound."""
    from leaner.models.footprint import footprint
    from leaner.models.memory import probe_bytes, probe_shape
    from leaner.planning.cost import conditioning_price, jobs

    plan = load_plan(REPO / "configs" / "paper.yaml")
    fig_n = next(j for j in jobs(plan.studies["nearest_figN"]) if j.name.startswith("L2-H64-W64-r1-d64-N256"))
    assert probe_shape(fig_n.spec.model) == (256, 4096, 4096)
    per = probe_bytes(4096, 256, 4096, 2)
    fp = footprint(fig_n.spec.model, "fp32")
    gb, hours = conditioning_price(fig_n.spec, fp, CARDS["h100"])
    assert gb == pytest.approx((8.0 * fp.params + 8 * per) / 1e9 + 1.0, rel=0.01) and gb < CARDS["h100"].memory_gb
    checkpoints = 2 + len(fig_n.spec.conditioning["steps"])
    traffic_h = checkpoints * fig_n.spec.conditioning["samples"] * 2 * per / 3.35e12 / 3600
    assert hours == pytest.approx(traffic_h, rel=1e-9)
    vit = next(iter(jobs(plan.studies["vit_imagenet"])))
    gb, hours = conditioning_price(vit.spec, footprint(vit.spec.model, "bf16"), CARDS["h100"])
    assert probe_shape(vit.spec.model)[0] == 197 and 0 < gb < 80 and hours > 0


def test_a_cuda_graph_step_is_priced_faster_only_where_launches_bound_it():
    """P2 at L1-H1-W1 (launch-bound): recipe.cuda_graph divides its step by the measured speed-up;
    at figN's H64 N 256 (attention-bound) the graph changes nothing."""
    from leaner.models.config import NearestConfig
    from leaner.planning.cost import P2_GRAPH_SPEEDUP, p2_step_seconds

    small = NearestConfig(depth=1, heads=1, modules=1, dim=64, tokens=16, posn="none", d_model=64, head_dim=64)
    eager, how = p2_step_seconds(small, 256, 0.0, 1)
    graphed, how_g = p2_step_seconds(small, 256, 0.0, 1, graphed=True)
    assert (how, how_g) == ("launches", "launches (CUDA graph)")
    # gpu-check's p2train (fig1 L1-H4-W8, one H200): 728.8 against 207.9 steps/s
    assert graphed == pytest.approx(eager / P2_GRAPH_SPEEDUP) and P2_GRAPH_SPEEDUP == pytest.approx(3.51, abs=0.01)
    big = NearestConfig(depth=2, heads=64, modules=64, dim=64, tokens=256, posn="none", d_model=64, head_dim=1)
    assert p2_step_seconds(big, 256, 0.0, 1) == p2_step_seconds(big, 256, 0.0, 1, graphed=True)
    assert p2_step_seconds(big, 256, 0.0, 1)[1].startswith("attention scores")


def test_an_image_job_is_priced_at_the_slower_of_its_step_and_its_input_path():
    """vit_imagenet's smallest variant on an H100 asks more images/s a GPU than 7 Pillow workers
    (64 cores over 8 processes, less one each) at LOADER_RATE a worker give: it is priced at
    the loader's pace; with a loader fast enough, at its FLOPs again; with decode: device, at the
    device path's measured rate. timm's backbones go through the same input path; a P2 job has none."""
    from pathlib import Path

    from leaner.planning.cost import DEVICE_INPUT_RATE, LOADER_RATE, jobs, loader_feed, price

    assert LOADER_RATE == 100.0 and DEVICE_INPUT_RATE == 1534.0  # the H200 host's, gpu-check 2026-12-04
    plan = load_plan(REPO / "configs" / "paper.yaml")
    study = plan.studies["vit_imagenet"]
    job = min(jobs(study), key=lambda j: j.spec.model.depth * j.spec.model.width)
    slow = price(job, plan, CARDS["h100"], None, Path("."))
    assert loader_feed(plan, job.spec, 8, LOADER_RATE) == (7 * LOADER_RATE, 7, "decode: pil")
    assert slow["priced_by"] == "loader (decode: pil, 7 workers a GPU)"
    assert slow["images_per_s_needed"] > slow["images_per_s_fed"] == 7 * LOADER_RATE
    assert slow["gpu_hours"] == pytest.approx(slow["steps"] * slow["batch_size"] / (7 * LOADER_RATE) / 3600)
    fast = price(job, plan, CARDS["h100"], None, Path("."), loader_rate=10_000.0)
    assert fast["priced_by"].startswith("FLOPs") and fast["gpu_hours"] < slow["gpu_hours"]
    plan.datasets["imagenet1k"]["decode"] = "device"
    device = price(job, plan, CARDS["h100"], None, Path("."))
    assert device["priced_by"] == "loader (decode: device, 7 workers a GPU)"
    assert device["gpu_hours"] == pytest.approx(device["steps"] * device["batch_size"] / DEVICE_INPUT_RATE / 3600)
    assert fast["gpu_hours"] < device["gpu_hours"] < slow["gpu_hours"]
    plan.datasets["imagenet1k"]["decode"] = "pil"
    xcit = next(iter(jobs(plan.studies["xcit_m_imagenet"])))
    assert loader_feed(plan, xcit.spec, 8, LOADER_RATE) == (7 * LOADER_RATE, 7, "decode: pil")
    p2 = next(iter(jobs(plan.studies["nearest_fig1"])))
    assert loader_feed(plan, p2.spec, 1, LOADER_RATE) is None


@pytest.mark.slow
def test_the_authors_four_hours_a_job_reach_what_the_plans_step_times_allow():
    """`leaner cost --wall-budget 4 --study nearest_figN` (P2's figN regime: 4 h a job, one V100, no
    requeue): each configuration's epochs within 4 h are its 2,000 x 4 h / its priced wall hours,
    on the H100 and on a V100 3.7-4.3 x slower (memory bandwidth, fp32 peak), all of them where the
    job fits; the longest (L2-H8-W64-r8 N256, ~25 h on an H100) reaches about 80 epochs on a V100,
    and the configurations that end early are counted."""
    from leaner.planning.reach import card_ratios, epochs_within

    fewer, more = card_ratios(card("h100"))
    assert (round(fewer, 2), round(more, 2)) == (3.72, 4.27)
    assert epochs_within(2.0, 2000, 4.0) == 2000 and epochs_within(8.0, 2000, 4.0) == 1000
    assert epochs_within(2.0, 2000, 4.0, slower=4.0) == 1000 and epochs_within(None, 2000, 4.0) is None
    proc = subprocess.run([sys.executable, "-m", "leaner", "cost", str(REPO / "configs" / "paper.yaml"),
                           "--wall-budget", "4", "--study", "nearest_figN"], capture_output=True, text=True,
                          check=True)
    rows = {line.split()[1]: line.split() for line in proc.stdout.splitlines() if line.startswith("nearest_figN")}
    plan = load_plan(REPO / "configs" / "paper.yaml")
    priced = {r["job"].rsplit("-s", 1)[0]: r["wall_hours"] for c in plan_cost(plan, card("h100"))
              if c.name == "nearest_figN" for r in c.rows}
    assert set(rows) == set(priced) and len(rows) == 20
    cut = 0
    for config, hours in priced.items():
        on_card = rows[config][4]
        assert on_card == ("all" if hours <= 4 else f"{2000 * 4 / hours:.0f}"), (config, rows[config])
        cut += 2000 * 4 / (hours * more) < 2000
    # the longest is now rank 8 (the fused form: ~25 h on an H100); rank 1 takes the low-rank kernel
    # (1.9 ps a score: ~15 h, against ~197 h in the fused form before a GPU measured the kernel)
    longest = max(priced, key=priced.get)
    assert longest == "L2-H8-W64-r8-d64-N256-none" and 20 < priced[longest] < 30
    assert rows[longest][6] == f"{2000 * 4 / (priced[longest] * more):.0f}"
    assert 12 < priced["L2-H64-W64-r1-d64-N256-none"] < 17
    assert f"{cut} of 20 configurations end before their schedule on a V100 within 4 h" in proc.stdout
