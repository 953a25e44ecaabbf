"""Parameter-matched lean variants: `leaner match` and studies declared as `lean` variants of a baseline."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from leaner.models.params import model_params
from leaner.workflow.config import ConfigError, load_yaml
from leaner.workflow.match import match
from leaner.workflow.plan import build_plan, study_model_base

from conftest import BIN, REPO

pytestmark = pytest.mark.fast


def _vit_b_base():
    return study_model_base(load_yaml(REPO / "configs" / "paper.yaml"), "vit_imagenet")[1]


def test_counts_equal_the_built_models_and_papers_md():
    """Counts (models/params.py) equal a real build, and the ViT-B rows of papers.md 1.3."""
    from leaner.models import build_model, param_counts

    small = {**_vit_b_base(), "depth": 2, "heads": 4, "width": 64, "head_dim": 16, "mlp_hidden": 128}
    assert model_params(small) == param_counts(build_model(small))["total"]
    base, rows = match(_vit_b_base(), {"depth": 12, "heads": 12, "width": 768, "mlp_ratio": 4}, reduction=0.3,
                       depths=[8], heads=[16], mlp_ratios=[4, 2, 1.5])
    assert abs(base["params"] - 86.57e6) < 0.01e6 and base["budget"] == int(base["params"] * 0.7)
    got = {(r["protocol"], r["width"], r["mlp_hidden"]): r for r in rows}
    for key, paper in {("fixed_width", 768, 3072): 58.22e6, ("fixed_width", 768, 1536): 39.33e6,
                       ("fixed_head_dim", 1024, 1536): 60.82e6, ("fixed_head_dim", 1024, 2048): 69.22e6}.items():
        assert abs(got[key]["params"] - paper) < 0.01e6, key
        assert got[key]["fits"] == (got[key]["params"] <= base["budget"])
    assert got[("fixed_head_dim", 1024, 1536)]["fits"] is False  # 30% fewer, not 29.7%
    fits = [r["fits"] for r in rows]
    assert fits == sorted(fits, reverse=True)  # the ones that fit first


def _lean_config(lean: dict) -> dict:
    return {"datasets": {"digits": {"kind": "digits"}},
            "studies": {"lean": {"task": "image_classification", "dataset": "digits", "model": {"patch_size": 2},
                                 "lean": lean}},
            "theory": {"draws": 2, "tokens": [17], "head_dim": [8], "width": [64], "heads": [1, 2]}}


def test_a_lean_study_expands_to_the_baseline_and_every_variant_that_fits():
    lean = {"baseline": {"depth": 3, "heads": 1, "width": 64, "mlp_ratio": 2}, "reduction": 0.3,
            "heads": [4, 16], "seeds": [0, 1]}
    study = build_plan(_lean_config(lean)).studies["lean"]
    ids = sorted(study.variants)
    assert "L3-H1-D64-hd64-mlp128-s0" in ids and "L3-H1-D64-hd64-mlp128-s1" in ids
    assert study.variants["L3-H1-D64-hd64-mlp128-s0"].protocols == ("fixed_width", "fixed_head_dim")
    budget = int(model_params(study.variants["L3-H1-D64-hd64-mlp128-s0"].model) * 0.7)
    lean_ids = [v for v in ids if not v.startswith("L3-")]
    assert sorted(lean_ids) == sorted(f"L{d}-H{h}-D64-hd{64 // h}-mlp128-s{s}" for d in (1, 2) for h in (4, 16)
                                      for s in (0, 1))
    for vid in lean_ids:
        assert model_params(study.variants[vid].model) <= budget
    assert study.baseline == {"depth": 3, "heads": 1, "width": 64, "mlp_hidden": 128}
    # fixed_head_dim candidates (width 256, 1024) are over the budget: none was kept
    assert not any(v.protocols == ("fixed_head_dim",) for v in study.variants.values())


@pytest.mark.parametrize("lean,message", [
    ({"baseline": {"depth": 3, "heads": 1, "width": 64}, "reduction": 0.3, "budget": 1000},
     "config error: studies.lean.lean: give budget or reduction, one of them"),
    ({"baseline": {"depth": 3, "heads": 1, "width": 64}, "budget": 1000},
     "config error: studies.lean.lean: no configuration of fewer layers and more heads fits the budget"),
    ({"baseline": {"depth": 3, "heads": 3, "width": 64}, "reduction": 0.3},
     "config error: studies.lean.lean: baseline heads 3 do not divide its width 64"),
])
def test_bad_lean_blocks_get_one_line(lean, message):
    with pytest.raises(ConfigError) as err:
        build_plan(_lean_config(lean))
    assert str(err.value).splitlines()[0].startswith(message), str(err.value)


def test_grid_and_lean_together_are_refused():
    cfg = _lean_config({"baseline": {"depth": 3, "heads": 1, "width": 64}, "reduction": 0.3})
    cfg["studies"]["lean"]["grid"] = {"protocol": ["fixed_width"], "width": [64], "depth": [1], "heads": [1],
                                      "seeds": [0]}
    with pytest.raises(ConfigError, match="give grid or lean, one of them"):
        build_plan(cfg)


def test_the_match_command_lists_what_fits(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_lean_config({"baseline": {"depth": 3, "heads": 1, "width": 64, "mlp_ratio": 2},
                                                "reduction": 0.3})))
    proc = subprocess.run([str(BIN / "leaner"), "match", str(cfg), "--study", "lean", "--heads", "2,4",
                           "--out", str(tmp_path / "m.csv")], capture_output=True, text=True, check=True)
    assert proc.stdout.startswith("baseline L3-H1-D64-mlp128: 102,666 parameters; budget 71,866")
    assert "4 of 8 configurations of fewer layers and more heads fit" in proc.stdout
    import pandas as pd

    table = pd.read_csv(tmp_path / "m.csv")
    assert len(table) == 8 and table["fits"].sum() == 4 and (table[table["fits"]]["params"] <= 71866).all()
    bad = subprocess.run([str(BIN / "leaner"), "match", str(cfg), "--study", "lean", "--reduction", "1.5"],
                         capture_output=True, text=True)
    assert bad.returncode == 1
    assert bad.stderr.strip() == "leaner match: error: reduction 1.5 is not a fraction (allowed: 0 < reduction < 1)"
    unknown = subprocess.run([str(BIN / "leaner"), "match", str(cfg), "--study", "nope"], capture_output=True,
                             text=True)
    assert unknown.returncode == 2 and "studies.nope: no such study (allowed: lean)" in unknown.stderr
