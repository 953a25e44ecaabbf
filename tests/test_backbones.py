"""timm's own backbones as ablation families (models/backbones.py): P1's ten counts from timm's
definitions, the knobs mapped onto each family's arguments, a family without known knobs refused in
one line, and an XCiT trained end to end through Snakemake with its conditioning and tables."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from leaner.models import attention_modules, build_model, param_counts
from leaner.models.config import TimmConfig
from leaner.models.timm_families import timm_kwargs

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


# What each family's projection reads, written out from the definitions in docs/kappa.md ("timm's
# backbones"), independently of timm's forward: (B, N, C) heads side by side, head i's columns
# i*d .. (i+1)*d. q, k, v: (B, heads, N, d) from the module's own weights.
def _qkv(attn, x):
    b, n, c = x.shape
    if hasattr(attn, "qk"):  # TNT: q and k from one projection, v from another
        qk = attn.qk(x).reshape(b, n, 2, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
        return qk[0], qk[1], attn.v(x).reshape(b, n, attn.num_heads, -1).transpose(1, 2)
    qkv = attn.qkv(x).reshape(b, n, 3, attn.num_heads, c // attn.num_heads).permute(2, 0, 3, 1, 4)
    return qkv[0], qkv[1], qkv[2]


def _token_heads(attn, x):
    """Attention over tokens (TNT's inner and outer, DaViT's windows): softmax(q k^T / sqrt(d)) v."""
    q, k, v = _qkv(attn, x)
    weights = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1)
    return (weights @ v).transpose(1, 2).flatten(2)


def _xca_heads(attn, x):
    """XCiT's XCA: per head a d x d softmax over channels, of the l2-normalised (over tokens) q and k
    times the head's learned temperature, applied to v's channels: (A v^T)^T, N x d."""
    q, k, v = (t.transpose(-2, -1) for t in _qkv(attn, x))  # (B, heads, d, N)
    q, k = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
    weights = (q @ k.transpose(-2, -1) * attn.temperature).softmax(-1)  # (B, heads, d, d)
    return (weights @ v).permute(0, 3, 1, 2).flatten(2)


def _davit_channel_heads(attn, x):
    """DaViT's channel attention: per head a d x d softmax over channels of k^T v / sqrt(d) (timm's
    scale), applied to q: q A^T, N x d (the roles of q and v swapped against XCA)."""
    q, k, v = _qkv(attn, x)
    weights = (k.transpose(-2, -1) @ v / q.shape[-1] ** 0.5).softmax(-1)  # (B, heads, d, d)
    return (q @ weights.transpose(-2, -1)).transpose(1, 2).flatten(2)


FAMILY_HEADS = {
    "xcit": (config("xcit_nano_12_p8_224", 2, 4, 32, 2, img=32), {"XCA": _xca_heads}),
    "tnt": (config("tnt_s_patch16_224", 2, 4, 32, 2, img=32), {"Attention": _token_heads}),
    "davit": (config("davit_tiny", 4, 2, 32, 2, img=56),
              {"WindowAttention": _token_heads, "ChannelAttention": _davit_channel_heads}),
}


@pytest.mark.parametrize("family", list(FAMILY_HEADS))
def test_the_captured_matrix_is_what_each_familys_projection_reads(family):
    """The conditioning stage's heads_concat at every attention of a family equals that attention's
    heads recomputed by hand from its input and weights, as docs/kappa.md defines them: XCiT's
    channel attention, TNT's inner and outer attention, DaViT's windows and channel attention."""
    from leaner.measure.conditioning import capture_attention

    c, formulas = FAMILY_HEADS[family]
    torch.manual_seed(0)
    model = build_model(c).double().eval()
    for p in model.parameters():  # larger weights than timm's init, so no softmax is near-uniform
        p.data.normal_(0, 0.3)
    x = torch.randn(2, 3, c.img_size, c.img_size, dtype=torch.float64)
    with torch.no_grad(), capture_attention(model, inputs=True) as captured:
        model(x)
    kinds = []
    for layer, attn in attention_modules(model):
        (inputs, kwargs), = captured[layer]["input"]
        heads, = captured[layer]["heads_concat"]
        assert not kwargs and heads.shape[-1] == attn.proj.in_features
        expected = formulas[type(attn).__name__](attn, inputs)
        torch.testing.assert_close(heads, expected, rtol=1e-10, atol=1e-12)
        kinds.append(type(attn).__name__)
    assert set(kinds) == set(formulas) and len(kinds) == {"xcit": 2, "tnt": 4, "davit": 8}[family]


def test_the_paper_comparison_sets_p1s_backbone_row_beside_the_run():
    """A study of one of P1's five backbones gets P1's own row of it (top-1 and parameters of the
    original and the lean model) beside the run's; a backbone P1 did not run gets none."""
    from leaner.analysis.papers import paper_comparison

    rows = []
    for depth, heads, hd, params, accs in ((24, 8, 64, 84_395_752, (0.810, 0.812)),
                                           (16, 16, 32, 59_066_152, (0.820, 0.822))):
        for seed, acc in enumerate(accs):
            rows.append({"study": "xcit_m_imagenet", "task": "image_classification", "dataset": "imagenet1k",
                         "variant": f"L{depth}-H{heads}-s{seed}", "depth": depth, "heads": heads, "width": 512,
                         "head_dim": hd, "mlp_hidden": 2048, "qk_scale": 1.0, "seed": seed, "protocols": "fixed_width",
                         "status": "ok", "params_total": params, "eval_acc": acc, "steps": 500_800, "learned": True,
                         "kappa_init_gmean": 1e4 / heads, "kappa_final_gmean": 1e3 / heads,
                         "backbone": "xcit_medium_24_p16_224"})
    summary = pd.DataFrame(rows)
    table = paper_comparison(summary, {"depth": 24, "heads": 8, "width": 512, "mlp_hidden": 2048}, None)
    row, = table[table["quantity"].str.startswith("P1's XCiT-M row")].to_dict("records")
    assert row["paper"] == "81.4 -> 81.7 (84.4M -> 59.0M, -30%)"
    assert row["ours"].endswith("81.1 -> 82.1 (84.4M -> 59.1M, -30%)")
    assert row["difference"] == "-0.7 points (P1's change less ours)"
    other = paper_comparison(summary.assign(backbone="xcit_nano_12_p8_224"), {"depth": 24, "heads": 8}, None)
    assert not other["quantity"].str.startswith("P1's").any()


def test_training_flops_of_the_backbones_are_three_forwards_and_extend_exactly_in_depth():
    """leaner cost's FLOPs of a backbone: forward and backward at three times the forward (torch's
    own count makes a depthwise convolution's weight gradient C times too large: XCiT's LPI, DaViT's
    position convolutions), P1's forward counts (XCiT-M 16.2 and DaViT-B 15.5 GMACs at 224 pixels,
    their papers'), and the count measured at two depths extended to any depth as the full model
    counts it (a DaViT grows in its deepest stage)."""
    from torch.utils.flop_counter import FlopCounterMode

    from leaner.models.footprint import footprint, repeated, sample, training_flops

    for c, gmacs in ((config("xcit_medium_24_p16_224", 24, 8, 512, 4), 16.2),
                     (config("davit_base", 12, 4, 128, 4), 15.5), (config("davit_base", 8, 8, 128, 4), None)):
        with torch.device("meta"):
            model = build_model(c)
        with FlopCounterMode(display=False) as counter:
            model(sample(c, 1, "meta"))
        forward = counter.get_total_flops()
        full, _ = training_flops(model, sample(c, 1, "meta"), repeated(c)[1])
        assert full == footprint(c, "bf16").flops
        assert abs(full / (3 * forward) - 1) < 0.01, (c.backbone, full / forward)
        if gmacs:
            assert abs(forward / 2e9 / gmacs - 1) < 0.01, (c.backbone, forward / 2e9)


@pytest.mark.slow
def test_match_lists_lean_variants_of_a_backbone():
    """`leaner match` on paper.yaml's backbone studies, as for the ViT: P1's lean XCiT-M among the
    configurations that fit, and a DaViT's search starting at the fewest layers it can be built with."""
    leaner = str(REPO / ".venv" / "bin" / "leaner")
    proc = run([leaner, "match", "configs/paper.yaml", "--study", "xcit_m_imagenet", "--depths", "16,12",
                "--heads", "16", "--protocols", "fixed_width", "--reduction", "0.25"], cwd=REPO)
    assert "baseline L24-H8-D512-mlp2048: 84,395,752 parameters" in proc.stdout
    assert "59,066,152" in proc.stdout and "2 of 2 configurations" in proc.stdout
    proc = run([leaner, "match", "configs/paper.yaml", "--study", "davit_b_imagenet", "--heads", "8", "--protocols",
                "fixed_width", "--reduction", "0.25"], cwd=REPO)
    depths = [int(line.split("|")[2]) for line in proc.stdout.splitlines() if line.startswith("| fixed_width")]
    assert sorted(depths) == list(range(4, 12)) and "62,653,416" in proc.stdout
    proc = run([leaner, "match", "configs/paper.yaml", "--study", "davit_b_imagenet", "--depths", "3", "--heads", "8",
                "--reduction", "0.25"], cwd=REPO, check=False)
    assert proc.returncode != 0 and "depth 3 leaves no block in davit_base's deepest stage" in proc.stderr
