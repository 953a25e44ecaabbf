"""Parameter-matched lean variants: fewer layers, more heads, within a parameter budget.

P1's recipe is "cut depth, add heads, keep accuracy at fewer parameters". Given a baseline
architecture (depth, heads, width, MLP) and a budget (an absolute parameter count, or a reduction
against the baseline), this lists every configuration with fewer layers and more heads, under
either head-scaling protocol and any MLP ratio asked for, with its exact parameter count
(models/params.py: the built model's, without building it), and says which fit.

    leaner match config.yaml --study vit_digits --baseline depth=3,heads=1,width=64,mlp_ratio=2 --reduction 0.3

A study can also declare itself as the lean variants of a baseline (key ``lean`` instead of
``grid``); the config expansion then trains the baseline and every configuration that fits.
"""

from __future__ import annotations

import math

from ..grid import SCALING, head_shape
from ..models.config import ModelConfig, model_config
from ..models.params import model_params
from ..models.timm_families import min_depth


def baseline_point(baseline: dict) -> dict:
    """The baseline as a grid point: depth, heads, width, head_dim, mlp_hidden."""
    missing = [k for k in ("depth", "heads", "width") if k not in baseline]
    if missing:
        raise ValueError(f"baseline needs {', '.join(missing)} (allowed keys: depth, heads, width, mlp_ratio or "
                         f"mlp_hidden)")
    width, heads = int(baseline["width"]), int(baseline["heads"])
    if width % heads:
        raise ValueError(f"baseline heads {heads} do not divide its width {width}")
    hidden = baseline.get("mlp_hidden") or round(float(baseline.get("mlp_ratio", 4.0)) * width)
    return {"depth": int(baseline["depth"]), "heads": heads, "width": width, "head_dim": width // heads,
            "mlp_hidden": int(hidden)}


def candidates(base: dict, depths=None, heads=None, protocols=SCALING, mlp_ratios=None) -> list[dict]:
    """Every (protocol, depth < base, heads > base, MLP ratio) configuration; under fixed_width the
    heads must divide the width. Defaults: every shallower depth, powers of two above the
    baseline's heads up to the width, the baseline's MLP ratio."""
    depths = depths or list(range(1, base["depth"]))
    heads = heads or [h for h in (2 ** k for k in range(12)) if base["heads"] < h <= base["width"]]
    ratios = mlp_ratios or [base["mlp_hidden"] / base["width"]]
    out = []
    for protocol in protocols:
        for depth in sorted(set(depths), reverse=True):
            for h in sorted(set(heads)):
                if depth >= base["depth"] or h <= base["heads"]:
                    continue
                shape = head_shape(protocol, h, width=base["width"], head_dim=base["head_dim"])
                if shape is None:
                    continue
                width, head_dim = shape
                for ratio in ratios:
                    hidden = ratio * width
                    if not math.isclose(hidden, round(hidden)):
                        continue
                    out.append({"protocol": protocol, "depth": depth, "heads": h, "width": width,
                                "head_dim": head_dim, "mlp_hidden": int(round(hidden))})
    return out


def shallowest(model_base: dict) -> int:
    """The fewest layers the study's model can be built with: 1, or a DaViT's other stages' blocks
    and one (models/timm_families.py)."""
    return 1 if model_base.get("arch") != "timm" else min_depth(model_base["backbone"])


def _spec(model_base: dict, point: dict) -> ModelConfig:
    return model_config({**model_base, **{k: point[k] for k in ("depth", "heads", "width", "head_dim", "mlp_hidden")}})


def match(model_base: dict, baseline: dict, budget: int | None = None, reduction: float | None = None,
          depths=None, heads=None, protocols=SCALING, mlp_ratios=None) -> tuple[dict, list[dict]]:
    """(baseline with its params and the budget, candidate rows with params, ratio and fits),
    candidates ordered by params, the largest that fits first."""
    if (budget is None) == (reduction is None):
        raise ValueError("give a budget (parameters) or a reduction (a fraction in (0, 1)), one of them")
    if reduction is not None and not 0 < reduction < 1:
        raise ValueError(f"reduction {reduction} is not a fraction (allowed: 0 < reduction < 1)")
    base = baseline_point(baseline)
    base_params = model_params(_spec(model_base, base))
    depths = depths or list(range(shallowest(model_base), base["depth"]))
    limit = int(budget) if budget is not None else int(base_params * (1 - reduction))
    rows = []
    for point in candidates(base, depths, heads, protocols, mlp_ratios):
        params = model_params(_spec(model_base, point))
        rows.append({**point, "params": params, "vs_baseline": params / base_params, "fits": params <= limit})
    rows.sort(key=lambda r: (not r["fits"], -r["params"] if r["fits"] else r["params"]))
    return {**base, "params": base_params, "budget": limit}, rows


LEAN_SEARCH_KEYS = ("depths", "heads", "protocols", "mlp_ratios")  # a lean block's search space (match's)


def match_lean(model_base: dict, lean: dict) -> tuple[dict, list[dict]]:
    """match() as a `lean` block asks (its baseline; its budget or reduction; its depths, heads,
    protocols and MLP ratios, each absent one at match's default): the one reading of the block,
    for the plan (lean_grids) and for `leaner match`."""
    return match(model_base, lean["baseline"], lean.get("budget"), lean.get("reduction"),
                 lean.get("depths"), lean.get("heads"), lean.get("protocols") or SCALING, lean.get("mlp_ratios"))


def lean_grids(model_base: dict, lean: dict) -> list[dict]:
    """A study's `lean` block -> grid entries: the baseline (under the protocol its shape has)
    and every configuration that fits the budget."""
    base, rows = match_lean(model_base, lean)
    seeds = lean.get("seeds", [0])
    protocols = list(lean.get("protocols") or SCALING)  # the baseline is a point of each protocol's curve
    grids = [{"protocol": protocols, "width": [base["width"]], "head_dim": [base["head_dim"]],
              "depth": [base["depth"]], "heads": [base["heads"]], "mlp_hidden": [base["mlp_hidden"]], "seeds": seeds}]
    for r in rows:
        if not r["fits"]:
            continue
        shape = {"width": [r["width"]]} if r["protocol"] == "fixed_width" else {"head_dim": [r["head_dim"]]}
        grids.append({"protocol": [r["protocol"]], **shape, "depth": [r["depth"]], "heads": [r["heads"]],
                      "mlp_hidden": [r["mlp_hidden"]], "seeds": seeds})
    return grids
