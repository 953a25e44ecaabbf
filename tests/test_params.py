"""Parameter counts without building (models/params.py, models/timm_families.py): the closed forms
equal the built models, the timm table equals timm, every config's timm shapes are in it, and
Snakemake plans every config with torch and timm unimportable."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time

import pytest

from leaner.models import build_model, param_counts
from leaner.models.config import model_config
from leaner.models.params import model_params
from leaner.models.timm_families import FAMILIES, min_depth, shape_key, table
from leaner.workflow.plan import load_plan, timm_variants

from conftest import BIN, REPO, small_spec

pytestmark = pytest.mark.fast

CONFIGS = [REPO / "config.yaml", *sorted((REPO / "configs").glob("*.yaml"))]


def _built(model: dict) -> int:
    import torch

    with torch.device("meta"):
        return param_counts(build_model(model))["total"]


def _own_models() -> list[dict]:
    """The shallowest and the deepest of every study of every config (leaner's own architectures),
    each GLUE fine-tuning model, and the settings no config varies (positions, no qkv bias, mean
    pooling, a pad id, no classes)."""
    out = []
    for config in CONFIGS:
        for study in load_plan(config, default=REPO / "config.yaml").studies.values():
            models = sorted((v.model.to_spec() for v in study.variants.values() if v.model.arch != "timm"),
                            key=lambda m: (m["depth"], m["heads"]))
            out += models[:1] + models[-1:]
            if study.finetune:
                out.append(study.finetune_spec(next(iter(study.variants)), study.finetune["tasks"][0])["model"])
    nearest = next(m for m in out if m["arch"] == "nearest_point_encoder")
    for posn, depth, modules in itertools.product(("additive", "concatenated"), (1, 3), (1, 4)):
        out.append({**nearest, "posn": posn, "depth": depth, "modules": modules,
                    "d_model": nearest["dim"] + (nearest.get("posn_dim", 64) if posn == "concatenated" else 0)})
    vit = small_spec()["model"]
    out += [{**vit, "qkv_bias": False, "global_pool": "avg", "depth": 3}, {**vit, "num_classes": 0},
            {**vit, "heads": 3, "head_dim": 5, "mlp_hidden": 7, "patch_size": 4}]
    classifier = next(m for m in out if m["arch"] == "sequence_classifier")
    out.append({**classifier, "pad_id": 3, "qkv_bias": False})
    return out


def test_the_closed_forms_are_the_built_models_counts():
    models = _own_models()
    assert {m["arch"] for m in models} == {"vit", "nearest_point_encoder", "sequence_classifier", "causal_lm",
                                           "masked_lm"}
    assert len(models) > 40
    for model in models:
        assert model_params(model) == _built(model), model


def _timm_stages(name: str) -> list[list[int]]:
    """A DaViT's [depths, heads, widths] per stage, read from timm's own model (not the table)."""
    import timm
    import torch

    with torch.device("meta"):
        model = timm.create_model(name)
    return [[len(s.blocks) for s in model.stages], [s.blocks[0][0].attn.num_heads for s in model.stages],
            [s.blocks[0][0].attn.proj.in_features for s in model.stages]]


def test_the_timm_table_is_timms():
    """Every family's models, every DaViT's stages and every shape's two counts, asked of timm again."""
    import timm

    kept = table()
    assert kept["timm"] == timm.__version__
    assert kept["families"] == {name: f for f in FAMILIES for name in timm.list_models(module=f)}
    assert kept["stages"] == {name: _timm_stages(name) for name, f in kept["families"].items() if f == "davit"} != {}
    for key, (shallowest, per_layer) in kept["shapes"].items():
        spec = json.loads(key)
        depth = min_depth(spec["backbone"])
        model = {**spec, "depth": depth, "drop_path_rate": 0.0}
        assert _built(model) == shallowest and _built({**model, "depth": depth + 1}) == shallowest + per_layer, key


def test_every_configs_timm_shapes_are_in_the_table_and_counted_from_it():
    variants = timm_variants(REPO / "config.yaml", *CONFIGS[1:])
    assert {v.backbone.split("_")[0] for v in variants} == set(FAMILIES)
    missing = sorted({shape_key(v) for v in variants} - set(table()["shapes"]))
    assert not missing, f"run `make timm-table`: {missing}"
    deepest = max(variants, key=lambda v: (v.backbone.startswith("davit"), v.depth))
    assert model_params(deepest) == _built(deepest.to_spec())


def test_a_timm_shape_not_in_the_table_is_counted_by_timm_where_it_is_installed():
    """A backbone shape no config plans (the table lacks it) is asked of timm: equal to the build."""
    for backbone, depth, heads, width in (("xcit_nano_12_p16_224", 3, 4, 96), ("davit_tiny", 4, 6, 192),
                                          ("tnt_s_patch16_224", 2, 6, 384)):
        model = {"arch": "timm", "backbone": backbone, "depth": depth, "heads": heads, "width": width,
                 "head_dim": width // heads, "mlp_hidden": 2 * width, "img_size": 32, "in_chans": 3, "num_classes": 7,
                 "drop_path_rate": 0.0}
        assert shape_key(model_config(model)) not in table()["shapes"]
        assert model_params(model) == _built(model), backbone


def _no_torch(tmp_path):
    """A PYTHONPATH on which `import torch` and `import timm` fail, as on a login node without them."""
    for name in ("torch", "timm"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('no {name} on this node')\n")
    return {"PYTHONPATH": str(tmp_path), "PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path)}


@pytest.mark.slow
def test_snakemake_plans_every_config_without_torch_or_timm(tmp_path):
    """`snakemake -n` on each config, torch and timm unimportable and no cache: the DAG, every job's
    memory (from parameter counts) and the timm backbones' checks come from plain code."""
    env = _no_torch(tmp_path)
    took = {}
    for config in CONFIGS:
        start = time.perf_counter()
        proc = subprocess.run([str(BIN / "snakemake"), "-n", "-q", "--configfile", str(config), "--directory",
                               str(tmp_path / "run"), "--snakefile", str(REPO / "Snakefile")],
                              env=env, capture_output=True, text=True, timeout=300)
        took[config.name] = time.perf_counter() - start
        assert proc.returncode == 0, (config.name, proc.stderr[-2000:])
    print({k: round(v, 1) for k, v in took.items()})
    assert took["paper.yaml"] < 20  # ~6 s alone on 2 cores (1,635 jobs)


def test_a_timm_model_not_in_the_table_without_timm_is_one_line(tmp_path):
    code = ("from leaner.models.timm_families import family_of\n"
            "try:\n    family_of('xcit_nano_99_p16_224')\nexcept ValueError as exc:\n    print(exc)\n")
    env = _no_torch(tmp_path)
    env["PYTHONPATH"] += f":{REPO / 'src'}"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("model.timm: 'xcit_nano_99_p16_224' is not one of the timm models leaner knows "
                                  "and torch and timm are not installed here")
