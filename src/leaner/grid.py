"""A study's grid: the head-scaling protocols, the expansion of a grid into points, each point's
variant id and model, and a study's points as its report decides its outputs from them.
workflow/plan.py (a study's grid), workflow/match.py (lean variants of a baseline) and the report
(analysis/report.py) share these."""

from __future__ import annotations

import itertools
import math

from .models.config import AXIS_DEFAULTS, ModelConfig, model_config

SCALING = ("fixed_width", "fixed_head_dim")  # how a head-scaling curve keeps the model as heads grow
# `crossed`: width and head dim both given, so heads move the attention's inner width h*d (projected
# back to D), not the residual stream: count and rank (head dim) each move with the other held
PROTOCOLS = (*SCALING, "crossed")
ACCEPTANCE_CHECKS = ("full_rank_gap", "short_sequences", "perfect_angle")  # P2's, a study runs every one by default
POINT_AXES = ("protocol", "depth", "heads", "width", "head_dim", "mlp_hidden", "qk_scale", "modules", "dim", "tokens",
              "posn")


def join_protocols(protocols) -> str:
    """A variant's protocols as summary.csv holds them: 'fixed_width;fixed_head_dim'."""
    return ";".join(protocols)


def split_protocols(value) -> list[str]:
    """The protocols of a list, a summary.csv string ('a;b'), or a missing value (NaN: none)."""
    if isinstance(value, str):
        return [p for p in value.split(";") if p]
    return list(value) if isinstance(value, (list, tuple)) else []


def grid_points(rows) -> list[dict]:
    """A study's points from its variants' models: one per (architecture, protocol), seeds merged;
    `protocols` a list or a ';'-joined string."""
    points = {}
    for row in rows:
        for protocol in split_protocols(row.get("protocols")) or [None]:
            p = {k: row[k] for k in POINT_AXES if k in row and k != "protocol"}
            p["protocol"] = protocol
            if "width" in p and "mlp_hidden" in p:
                p["mlp_ratio"] = round(p["mlp_hidden"] / p["width"], 6)
            points[tuple(sorted(p.items(), key=lambda kv: kv[0]))] = p
    return list(points.values())


def head_shape(protocol: str, heads: int, width: int | None = None,
               head_dim: int | None = None) -> tuple[int, int] | None:
    """(model width, head dimension) of `heads` heads under `protocol`: fixed_width keeps the
    width (None when the heads do not divide it), fixed_head_dim keeps the head dimension,
    crossed keeps both."""
    if protocol == "fixed_width":
        return (width, width // heads) if width % heads == 0 else None
    if protocol == "crossed":
        return width, head_dim
    return heads * head_dim, head_dim


IMAGE_GRID_KEYS = ("depth", "heads", "protocol", "width", "head_dim", "mlp_ratio", "mlp_hidden", "qk_scale", "seeds")

NEAREST_GRID_KEYS = ("depth", "heads", "modules", "dim", "tokens", "posn", "seeds")


def grid_key(name: str, idx: int | None) -> str:
    return f"studies.{name}.grid" + (f"[{idx}]" if idx is not None else "")


def expand_image_grid(key: str, grid: dict, problems: list[str]) -> list[dict]:
    """ViT grid: depth x heads x protocol (x width | head_dim) x MLP width (x logit scale) x seeds."""
    protocols = grid.get("protocol")
    if not protocols:
        problems.append(f"config error: {key}.protocol: required by this study's task "
                        f"(allowed: {', '.join(PROTOCOLS)})")
        return []
    if "crossed" in protocols and not ("width" in grid and "head_dim" in grid):
        problems.append(f"config error: {key}: protocol crossed needs both width and head_dim (allowed: lists "
                        f"of model widths D and head dims d, e.g. width: [64], head_dim: [4, 16])")
        return []
    if "fixed_width" in protocols and "width" not in grid:
        problems.append(f"config error: {key}.width: required by protocol fixed_width (allowed: a list of fixed model "
                        f"widths D, e.g. width: [64])")
    if "fixed_head_dim" in protocols and "head_dim" not in grid:
        problems.append(f"config error: {key}.head_dim: required by protocol fixed_head_dim (allowed: a list of fixed "
                        f"head dimensions d, e.g. head_dim: [16])")
    if "mlp_ratio" in grid and "mlp_hidden" in grid:
        problems.append(f"config error: {key}: give mlp_ratio or mlp_hidden, not both "
                        f"(allowed: one of mlp_ratio, mlp_hidden)")
    mlps = [("ratio", r) for r in grid.get("mlp_ratio", [])] + [("hidden", h) for h in grid.get("mlp_hidden", [])]
    points = []
    scales = grid.get("qk_scale", [AXIS_DEFAULTS["qk_scale"]])
    for depth, heads, protocol, (mlp_kind, mlp_value), qk_scale in itertools.product(
            grid["depth"], grid["heads"], protocols, mlps or [("ratio", 4.0)], scales):
        if protocol == "fixed_width":
            shapes = []
            for width in grid.get("width", []):
                shape = head_shape(protocol, heads, width=width)
                if shape is None:
                    divisors = [h for h in range(1, width + 1) if width % h == 0]
                    problems.append(
                        f"config error: {key}.heads: {heads} does not divide width {width} under fixed_width "
                        f"(allowed: divisors of {width}: {', '.join(map(str, divisors))})")
                    continue
                shapes.append(shape)
        elif protocol == "crossed":
            shapes = [head_shape(protocol, heads, width=w, head_dim=d) for w in grid["width"] for d in grid["head_dim"]]
        else:
            shapes = [head_shape(protocol, heads, head_dim=d) for d in grid.get("head_dim", [])]
        for width, head_dim in shapes:
            hidden = mlp_value * width if mlp_kind == "ratio" else mlp_value
            if not math.isclose(hidden, round(hidden)):
                problems.append(f"config error: {key}.mlp_ratio: {mlp_value} x width {width} is not a whole "
                                f"number of MLP units (allowed: ratios giving an integer, or mlp_hidden)")
                continue
            for seed in grid["seeds"]:
                points.append({"depth": depth, "heads": heads, "width": width, "head_dim": head_dim,
                               "mlp_hidden": int(round(hidden)), "qk_scale": float(qk_scale), "seed": seed,
                               "protocol": protocol})
    return points


def expand_nearest_grid(key: str, grid: dict, problems: list[str], model: dict) -> list[dict]:
    """P2 grid: depth x heads per module x modules W x dimension d x tokens N x positions x seeds.
    Rank (head dim) = d_model / heads, d_model = d (+ posn_dim for concatenated positions)."""
    for req in ("dim", "tokens"):
        if req not in grid:
            problems.append(f"config error: {key}.{req}: required by a nearest-point grid (allowed: a list of values)")
    points = []
    for depth, heads, modules, dim, tokens, posn, seed in itertools.product(
            grid["depth"], grid["heads"], grid.get("modules", [1]), grid.get("dim", []), grid.get("tokens", []),
            grid.get("posn", ["none"]), grid["seeds"]):
        d_model = dim + (model["posn_dim"] if posn == "concatenated" else 0)
        if d_model % heads:
            problems.append(f"config error: {key}.heads: {heads} does not divide the model width {d_model} "
                            f"(allowed: divisors of {d_model})")
            continue
        points.append({"depth": depth, "heads": heads, "modules": modules, "dim": dim, "tokens": tokens,
                       "posn": posn, "rank": d_model // heads, "d_model": d_model, "seed": seed})
    return points


def variant_id(depth: int, heads: int, width: int, head_dim: int, mlp_hidden: int, seed: int,
               qk_scale: float = AXIS_DEFAULTS["qk_scale"]) -> str:
    """L1-H4-D64-hd16-mlp128-s10; a logit scale other than 1 named before the seed (-qk8)."""
    scale = f"-qk{qk_scale:g}" if qk_scale != AXIS_DEFAULTS["qk_scale"] else ""
    return f"L{depth}-H{heads}-D{width}-hd{head_dim}-mlp{mlp_hidden}{scale}-s{seed}"


def image_variant(point: dict, model_base: dict) -> tuple[str, ModelConfig]:
    """Any task on the depth x heads x protocol x MLP grid (ViT, ListOps encoder, causal LM)."""
    p = point
    scale = p.get("qk_scale", AXIS_DEFAULTS["qk_scale"])
    model = model_config({**model_base, "depth": p["depth"], "heads": p["heads"], "width": p["width"],
                          "head_dim": p["head_dim"], "mlp_hidden": p["mlp_hidden"], "qk_scale": scale})
    return variant_id(p["depth"], p["heads"], p["width"], p["head_dim"], p["mlp_hidden"], p["seed"], scale), model


def nearest_variant(point: dict, model_base: dict) -> tuple[str, ModelConfig]:
    p = point
    model = model_config({"arch": "nearest_point_encoder", **model_base, "depth": p["depth"], "heads": p["heads"],
                          "modules": p["modules"], "dim": p["dim"], "tokens": p["tokens"], "posn": p["posn"],
                          "d_model": p["d_model"], "head_dim": p["rank"]})
    vid = (f"L{p['depth']}-H{p['heads']}-W{p['modules']}-r{p['rank']}-d{p['dim']}-N{p['tokens']}"
           f"-{p['posn']}-s{p['seed']}")
    return vid, model
