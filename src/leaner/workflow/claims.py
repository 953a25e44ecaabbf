"""A study's claims, as declared before its runs (config `claims`): each point resolved to the one
configuration of the grid it names, its margin, seeds and hypothesis, and the fingerprint of the
declaration that each run records (the tables judge a claim "as declared" only where its runs
recorded the same)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from ..models.config import AXIS_DEFAULTS
from ..tasks import GRID_AXES

if TYPE_CHECKING:
    from ..models.config import ModelConfig
    from .variants import Variant


def claims_digest(claims: list[dict]) -> str:
    """The fingerprint of a study's claims block as declared (rationale included): what each run
    records when it trains, so that a table can tell a declaration changed after its runs. A
    claim's `seen` is left out: it records which of its runs were made before it (checked against
    the runs the project keeps, workflow/kept.py), a fact about the past that moves no verdict."""
    bare = [{k: v for k, v in c.items() if k != "seen"} if isinstance(c, dict) else c for c in claims]
    return hashlib.sha256(json.dumps(bare, sort_keys=True).encode()).hexdigest()[:16]


def resolve_claims(name: str, st: dict, info, variants: dict[str, Variant], problems: list[str],
            declared: list[dict]) -> tuple[dict, ...]:
    """The study's declared claims, each point resolved to the one configuration of the grid it
    names (its axes: {depth, heads, width, ...}), the metric and which way is better filled in
    from the task, the seeds checked against the grid's. Each keeps the seeds its declaration
    names (`declared_seeds`: an `every_study` overlay may run others) and the block's digest."""
    out = []
    axes = GRID_AXES[info.grid]
    configs = {json.dumps({k: getattr(v.model, k) for k in axes}, sort_keys=True): v for v in variants.values()}
    seeds = sorted({v.seed for v in variants.values()})
    modes = dict([info.metric, info.train_metric])  # metric -> max or min
    labels = sorted({_config_label(c, axes) for c in configs.values()})
    options = "; ".join(labels[:8]) + (f"; ... {len(labels)} in all, see `leaner variants`" if len(labels) > 8 else "")
    for i, claim in enumerate(st.get("claims") or []):
        where = f"config error: studies.{name}.claims[{i}]"
        metric = claim.get("metric", info.metric[0])
        if metric not in modes:
            problems.append(f"{where}.metric: {metric!r} is not a metric of task {st['task']} "
                            f"(allowed: {', '.join(modes)})")
            continue
        missing = sorted(set(claim["seeds"]) - set(seeds))
        if missing:
            problems.append(f"{where}.seeds: {missing} not in the study's grid (allowed: {seeds})")
        resolved = {}
        points = [("baseline", claim["baseline"])] + [(f"lean[{j}]", p) for j, p in enumerate(claim["lean"])]
        for role, point in points + ([("control", claim["control"])] if "control" in claim else []):
            found = _claim_config(point, configs)
            if len(found) != 1:
                problems.append(f"{where}.{role}: {json.dumps(point)} matches {len(found) or 'no'} configurations of "
                                f"the grid{', name more axes' if found else ''} (allowed: {options})")
            else:
                resolved[role] = {k: getattr(found[0].model, k) for k in axes}
        seen = _seen_runs(claim, where, configs, axes, list(resolved.values()), problems)
        if len(resolved) == len(points) + ("control" in claim):
            as_declared = next((c for c in declared if c.get("name") == claim["name"]), claim)
            out.append({"name": claim["name"], "metric": metric, "mode": modes[metric], "margin": claim["margin"],
                        "hypothesis": claim.get("hypothesis", "non-inferior"),
                        "seeds": sorted(claim["seeds"]), "declared_seeds": sorted(as_declared["seeds"]),
                        "seen_runs": seen,
                        "baseline": resolved["baseline"],
                        "lean": [resolved[f"lean[{j}]"] for j in range(len(claim["lean"]))],
                        "control": resolved.get("control"), "declaration": claims_digest(declared),
                        "rationale": claim.get("rationale", "")})
    names = [c["name"] for c in st.get("claims") or []]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"config error: studies.{name}.claims: the name {dup!r} is declared twice "
                        f"(allowed: one claim a name)")
    return tuple(out)


def _seen_runs(claim: dict, where: str, configs: dict, axes, points: list[dict], problems: list[str]) -> list[dict]:
    """The claim's `seen` resolved: [{"point": the configuration's axes, or None for every arm,
    "seeds": [...]}]; a seed not the claim's, or a configuration not one of its arms, is a problem."""
    out = []
    for j, item in enumerate(claim.get("seen") or []):
        entry = {"point": None, "seeds": [item]} if isinstance(item, int) else {
            "point": {k: v for k, v in item.items() if k != "seeds"}, "seeds": sorted(item["seeds"])}
        stray = sorted(set(entry["seeds"]) - set(claim["seeds"]))
        if stray:
            problems.append(f"{where}.seen[{j}]: {stray} are not seeds of the claim "
                            f"(allowed: {sorted(claim['seeds'])})")
        if entry["point"] is not None:
            found = _claim_config(entry["point"], configs)
            arm = {k: getattr(found[0].model, k) for k in axes} if len(found) == 1 else None
            if arm not in points:
                problems.append(f"{where}.seen[{j}]: {json.dumps(entry['point'])} is not one of the claim's "
                                f"configurations (allowed: its baseline, lean and control points)")
                continue
            entry["point"] = arm
        out.append(entry)
    return out


def _claim_config(point: dict, configs: dict) -> list:
    """The grid's configurations (one variant each) that `point` names; mlp_ratio is mlp_hidden / width."""
    def names(m: ModelConfig) -> bool:
        return all((hasattr(m, "mlp_hidden") and m.mlp_hidden == value * m.width) if key == "mlp_ratio"
                   else getattr(m, key, None) == value for key, value in point.items())

    return [v for v in configs.values() if names(v.model)]


def _config_label(v: Variant, axes) -> str:
    """depth=1,heads=4,...: the configuration's axes, a logit scale named only where it is not 1."""
    return ",".join(f"{k}={getattr(v.model, k)}" for k in axes if AXIS_DEFAULTS.get(k, object()) != getattr(v.model, k))
