"""timm's own backbones as ablation families (models/backbones.py): P1's ten counts from timm's
definitions, the knobs mapped onto each family's arguments, a family without known knobs refused in
one line, and an XCiT trained end to end through Snakemake with its conditioning and tables."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from leaner.models import attention_modules, build_model, param_counts
from leaner.models.backbones import timm_kwargs
from leaner.models.config import TimmConfig

from conftest import REPO, run, snakemake

pytestmark = pytest.mark.fast

# P1's clean rows (papers.md 1.4): (timm model, depth, heads, width, MLP ratio) -> P1's count, in
# millions; the lean settings back-solved there (XCiT-M's lean model is 16 layers; TNT-B's halves
# its MLP; DaViT's depth is the stages' total, 1-1-9-1 -> 1-1-5-1, heads and width the first stage's).
P1_ROWS = [
    ("xcit_medium_24_p16_224", 24, 8, 512, 4, 84.4), ("xcit_medium_24_p16_224", 16, 16, 512, 4, 59.0),
    ("xcit_large_24_p16_224", 24, 16, 768, 4, 189.1), ("xcit_large_24_p16_224", 12, 24, 768, 4, 103.8),
    ("tnt_b_patch16_224", 12, 10, 640, 4, 65.4), ("tnt_b_patch16_224", 8, 16, 640, 2, 30.9),
    ("davit_base", 12, 4, 128, 4, 88.0), ("davit_base", 8, 4, 128, 4, 62.0),
    ("davit_large", 12, 6, 192, 4, 196.8), ("davit_large", 8, 6, 192, 4, 140.0),
]
# DaViT-B's lean count is 62.65M against P1's 62.0M (+1.05%): heads per stage do not change it, and
# no other knob of timm's DaViT gives 62.0M with the stages 1-1-5-1 (an MLP ratio of 3.9 gives
# 61.66M); unexplained, so it is held to 1.1% and said so. Every other count is within 0.12%.
UNEXPLAINED = {("davit_base", 8): 0.011}


def config(name: str, depth: int, heads: int, width: int, ratio: float, img: int = 224, chans: int = 3,
           classes: int = 1000) -> TimmConfig:
    return TimmConfig(backbone=name, depth=depth, heads=heads, width=width, head_dim=width // heads,
                      mlp_hidden=int(ratio * width), img_size=img, in_chans=chans, num_classes=classes)


@pytest.mark.parametrize("row", P1_ROWS, ids=[f"{r[0]}-L{r[1]}" for r in P1_ROWS])
def test_p1_counts_from_timm(row):
    name, depth, heads, width, ratio, reported = row
    with torch.device("meta"):
        model = build_model(config(name, depth, heads, width, ratio))
    counts = param_counts(model)
    tolerance = UNEXPLAINED.get((name, depth), 0.0012)
    assert abs(counts["total"] / (reported * 1e6) - 1) <= tolerance, (name, depth, counts["total"], reported)
    assert sum(counts[k] for k in ("attention", "mlp", "embedding", "head", "norm")) == counts["total"]
    assert counts["attention"] > 0.2 * counts["total"] and counts["mlp"] > 0.2 * counts["total"]


def test_knobs_are_the_familys_own_arguments():
    """Each family's depth and heads land on its own constructor's arguments, and the built model
    has them: XCiT's blocks, TNT's outer heads (its inner ones the model's own), DaViT's stages
    (the change in the deepest, heads doubling stage by stage)."""
    with torch.device("meta"):
        xcit = build_model(config("xcit_medium_24_p16_224", 16, 16, 512, 4))
        tnt = build_model(config("tnt_b_patch16_224", 8, 16, 640, 2))
        davit = build_model(config("davit_base", 8, 8, 128, 4))
    assert len(xcit.blocks) == 16 and {b.attn.num_heads for b in xcit.blocks} == {16}
    assert len(tnt.blocks) == 8 and tnt.blocks[0].attn_out.num_heads == 16 and tnt.blocks[0].attn_in.num_heads == 4
    assert tnt.blocks[0].mlp.fc1.out_features == 1280
    kw = timm_kwargs(config("davit_base", 8, 8, 128, 4))
    assert kw["depths"] == (1, 1, 5, 1) and kw["num_heads"] == (8, 16, 32, 64)
    assert kw["embed_dims"] == (128, 256, 512, 1024)
    assert [len(s.blocks) for s in davit.stages] == [1, 1, 5, 1]
    assert [s.blocks[0][0].attn.num_heads for s in davit.stages] == [8, 16, 32, 64]
    # the attention the conditioning reads: every XCA (not the class attention), TNT's inner and outer,
    # DaViT's window and channel attention
    assert len(attention_modules(xcit)) == 16
    assert len(attention_modules(tnt)) == 16
    assert len(attention_modules(davit)) == 16
    with pytest.raises(ValueError, match=r"depth 3 leaves no block in davit_base's deepest stage .*depth 4 or more"):
        timm_kwargs(config("davit_base", 3, 4, 128, 4))


def _plan(tmp_path, model: dict, grid: str = "width: [32], depth: [1], heads: [2]"):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""datasets:
  digits32: {{kind: digits, img_size: 32}}
studies:
  s:
    task: image_classification
    dataset: digits32
    model: {json.dumps(model)}
    grid: {{protocol: [fixed_width], {grid}, mlp_ratio: [2], seeds: [0]}}
""")
    return run([str(REPO / ".venv" / "bin" / "leaner"), "variants", str(cfg)], cwd=tmp_path, check=False)


def test_refusals_name_what_is_allowed(tmp_path):
    proc = _plan(tmp_path, {"timm": "resnet18"})
    assert proc.returncode != 0
    line = next(x for x in proc.stderr.splitlines() if "model.timm" in x)
    assert "resnet18 (resnet) has no depth/heads knobs" in line and "its arguments: block, layers" in line
    assert "allowed: a model of the families xcit, tnt, davit" in line
    proc = _plan(tmp_path, {"timm": "xcit_nano_12_p8_224", "patch_size": 4})
    assert "model.patch_size: 4 is a setting of leaner's own ViT" in proc.stderr
    proc = _plan(tmp_path, {"timm": "not_a_model"})
    assert "'not_a_model' is not a timm model" in proc.stderr
    proc = _plan(tmp_path, {"timm": "xcit_nano_12_p8_224"})
    assert proc.returncode == 0 and "L1-H2-D32-hd16-mlp64-s0" in proc.stdout


def test_digits_repeated_to_a_larger_side(digits_manifest, tmp_path):
    from leaner.data.digits import load_digits_splits, prepare_digits

    manifest = prepare_digits("d32", {"test_fraction": 0.2, "split_seed": 0, "img_size": 32}, str(tmp_path / "m.json"))
    big, small = load_digits_splits(str(tmp_path / "m.json")), load_digits_splits(str(digits_manifest))
    assert manifest["img_size"] == 32 and big.train.x.shape[-2:] == (32, 32)
    assert torch.equal(big.train.x[:, :, ::4, ::4], small.train.x) and torch.equal(big.eval.y, small.eval.y)
    with pytest.raises(ValueError, match="img_size: 12 is not a multiple of the digits' 8 pixels"):
        prepare_digits("d12", {"test_fraction": 0.2, "split_seed": 0, "img_size": 12}, str(tmp_path / "n.json"))


@pytest.mark.slow
def test_xcit_trains_end_to_end(tmp_path):
    """The user's path: Snakemake over a study of timm's XCiT (tests/config/tiny_backbones.yaml),
    every run trained, its count the built model's, kappa measured on every XCA layer, the study's
    tables and the overview written."""
    snakemake(tmp_path, "--cores", "2", configfile=REPO / "tests" / "config" / "tiny_backbones.yaml", timeout=900)
    summary = pd.read_csv(tmp_path / "results" / "tiny_xcit" / "summary.csv")
    assert sorted(summary["variant"]) == ["L1-H2-D32-hd16-mlp64-s0", "L1-H4-D32-hd8-mlp64-s0",
                                          "L2-H2-D32-hd16-mlp64-s0", "L2-H4-D32-hd8-mlp64-s0"]
    assert (summary["status"] == "ok").all() and (summary["eval_acc"] > 0.3).all()  # chance is 0.1
    for _, r in summary.iterrows():
        with torch.device("meta"):
            built = build_model(config("xcit_nano_12_p8_224", int(r["depth"]), int(r["heads"]), 32, 2, 32, 1, 10))
        assert r["params_total"] == sum(p.numel() for p in built.parameters())
        cond = pd.read_csv(tmp_path / "results" / "tiny_xcit" / r["variant"] / "conditioning.csv")
        heads = cond[cond["matrix"] == "heads_concat"]
        assert sorted(set(heads["layer"])) == list(range(1, r["depth"] + 1))
        assert set(heads["checkpoint"]) >= {"init", "final"}
        assert (heads["tokens"] == 16).all()  # XCA over the 16 patches
        assert heads["kappa_median"].between(1, float("inf"), inclusive="left").all()
    assert len(pd.read_csv(tmp_path / "results" / "tables" / "tiny_xcit-by_config.csv")) == 4
    assert (tmp_path / "results" / "overview" / "findings.md").exists()
