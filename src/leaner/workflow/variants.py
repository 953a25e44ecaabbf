"""A study's grid expanded into its variants: the points of its grid (or of its `lean` search), one
variant per distinct model (its protocols merged), each with its recipe (the schema's defaults,
its task's, the study's, then the overrides whose `where` matches) and conditioning settings.
Light (no torch, unless a `lean` block counts parameters on the meta device)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from ..grid import expand_image_grid, expand_nearest_grid, grid_key, image_variant, nearest_variant
from ..models.config import ModelConfig
from ..schema import Recipe, recipe_spec
from ..tasks import CATALOG
from .config import CONDITIONING_DEFAULTS, RECIPE_DEFAULTS


@dataclass(frozen=True)
class Variant:
    """One trainable point of a study's grid: its model and recipe typed, built once here."""

    study: str
    id: str
    task: str
    dataset: str
    seed: int
    model: ModelConfig
    recipe: Recipe
    conditioning: dict
    protocols: tuple[str, ...] = ()
    expect_params: dict | None = None

    def spec(self) -> dict:
        """Everything a training job needs; the `params` of its rule (protocols excluded, so
        adding a protocol to the grid does not retrain a model it shares)."""
        out = {"study": self.study, "variant": self.id, "task": self.task, "dataset": self.dataset,
               "seed": self.seed, "model": self.model.to_spec(), "recipe": recipe_spec(self.recipe),
               "conditioning": self.conditioning}
        if self.expect_params:
            out["expect_params"] = self.expect_params
        return out

    def spec_json(self) -> str:
        return json.dumps(self.spec(), sort_keys=True, separators=(",", ":"))


def _matches(where: dict, point: dict) -> bool:
    return all(point.get(k) == v for k, v in where.items())


def lean_grid(name: str, st: dict, info, model_base: dict, problems: list[str]) -> tuple[list, dict] | None:
    """(the grids of a `lean:` study - its baseline and every configuration that fits the budget -,
    the baseline's settings)."""
    if info.grid != "arch":
        arch_tasks = [n for n, i in CATALOG.items() if i.grid == "arch"]
        problems.append(f"config error: studies.{name}.lean: not for task {st['task']} (allowed: "
                        f"{', '.join(arch_tasks)})")
        return None
    if ("budget" in st["lean"]) == ("reduction" in st["lean"]):
        problems.append(f"config error: studies.{name}.lean: give budget or reduction, one of them (allowed: "
                        f"budget, a parameter count; reduction, a fraction in (0, 1))")
        return None
    from .match import baseline_point, lean_grids  # builds models on the meta device: imports torch

    try:
        grid = lean_grids(model_base, st["lean"])
    except ValueError as exc:
        problems.append(f"config error: studies.{name}.lean: {exc}")
        return None
    if len(grid) == 1:
        problems.append(f"config error: studies.{name}.lean: no configuration of fewer layers and more heads "
                        f"fits the budget (allowed: a larger budget or reduction; `leaner match` lists them)")
    base = baseline_point(st["lean"]["baseline"])
    return grid, {k: base[k] for k in ("depth", "heads", "width", "mlp_hidden")}


def grid_points_of(name: str, st: dict, info, model_base: dict, problems: list[str]) -> list[dict]:
    """Every point of the study's grid (or list of grids), checked against its task's grid keys."""
    grids = st["grid"] if isinstance(st["grid"], list) else [st["grid"]]
    points: list[dict] = []
    for i, g in enumerate(grids):
        key = grid_key(name, i if isinstance(st["grid"], list) else None)
        unused = [k for k in g if k not in info.grid_keys]
        for k in unused:
            problems.append(f"config error: {key}.{k}: not used by task {st['task']} "
                            f"(allowed: {', '.join(info.grid_keys)})")
        if unused:
            continue
        if info.grid == "nearest":
            points += expand_nearest_grid(key, g, problems, model_base)
        else:
            points += expand_image_grid(key, g, problems)
    return points


def _recipe_problems(name: str, st: dict, info, problems: list[str]) -> None:
    """A recipe key that only other tasks read (TaskInfo.recipe_keys: images' augmentation),
    set in the study's recipe or an override's, is one line: it would do nothing here."""
    from ..tasks import CATALOG

    owners: dict[str, list[str]] = {}
    for task in CATALOG.values():
        for key in task.recipe_keys:
            owners.setdefault(key, []).append(task.name)
    recipes = [("recipe", st.get("recipe") or {})]
    recipes += [(f"overrides[{i}].recipe", ov.get("recipe") or {}) for i, ov in enumerate(st.get("overrides") or [])]
    for where, recipe in recipes:
        for key in recipe:
            if key in owners and key not in info.recipe_keys:
                problems.append(f"config error: studies.{name}.{where}.{key}: not used by task {st['task']} "
                                f"(allowed: leave it out; it is for task {', '.join(owners[key])})")


def _independent_init(name: str, recipe: dict, given: dict[str, dict], problems: list[str]) -> dict:
    """`replicates: independent` (P2): every run starts from its own seed, so the recipe's init seed
    (P2's 613 by default) becomes null, the variant's seed (training/train.py); one the study sets itself
    would be ignored, so it is one line."""
    if recipe.get("replicates") != "independent":
        return recipe
    for where, block in given.items():
        line = (f"config error: studies.{name}.{where}.init_seed: {block.get('init_seed')} with replicates: "
                f"independent (allowed: leave it out, each run starts from its own seed; or replicates: paper)")
        if block.get("init_seed") is not None and line not in problems:
            problems.append(line)
    return {**recipe, "init_seed": None}


def variants_of(name: str, st: dict, info, points: list[dict], model_base: dict,
              problems: list[str]) -> dict[str, Variant]:
    """One variant per distinct model of the points (its protocols merged), each with its recipe
    (the task's defaults, the study's recipe, then the overrides whose `where` matches)."""
    _recipe_problems(name, st, info, problems)
    recipe_base = {**RECIPE_DEFAULTS, **info.recipe, **(st.get("recipe") or {})}
    conditioning = {**CONDITIONING_DEFAULTS, **(st.get("conditioning") or {})}
    make_variant = nearest_variant if info.grid == "nearest" else image_variant
    variants: dict[str, Variant] = {}
    protocols: dict[str, list[str]] = {}
    overrides = st.get("overrides") or []
    expect = {e["variant"]: {"params": e["params"], "tolerance": e["tolerance"]}
              for e in st.get("expect_params") or []}
    for p in points:
        vid, model = make_variant(p, model_base)
        protocols.setdefault(vid, [])
        if "protocol" in p and p["protocol"] not in protocols[vid]:
            protocols[vid].append(p["protocol"])
        if vid in variants:
            continue
        recipe, given = dict(recipe_base), {"recipe": st.get("recipe") or {}}
        for i, ov in enumerate(overrides):
            if _matches(ov["where"], p):
                recipe = {**recipe, **ov["recipe"]}
                given[f"overrides[{i}].recipe"] = ov["recipe"]
        recipe = _independent_init(name, recipe, given, problems)
        variants[vid] = Variant(study=name, id=vid, task=st["task"], dataset=st["dataset"], seed=p["seed"],
                                model=model, recipe=Recipe.of(recipe), conditioning=conditioning,
                                expect_params=expect.get(vid))
    for i, ov in enumerate(overrides):
        if not any(_matches(ov["where"], p) for p in points):
            problems.append(f"config error: studies.{name}.overrides[{i}].where: matches no variant of the grid "
                            f"(allowed: values on the study's grid axes)")
    for vid in expect:
        if vid in variants:
            continue
        # an overlay's seeds (every_study) left the id out: the configuration's first seed carries the check
        same = sorted((v.seed, v.id) for v in variants.values() if v.id.rpartition("-s")[0] == vid.rpartition("-s")[0])
        if same:
            variants[same[0][1]] = dataclasses.replace(variants[same[0][1]], expect_params=expect[vid])
        else:
            problems.append(f"config error: studies.{name}.expect_params: no variant {vid!r} in the grid "
                            f"(allowed: ids listed by `leaner variants <config>`)")
    if not variants and not any(p.startswith(f"config error: studies.{name}.") for p in problems):
        problems.append(f"config error: studies.{name}.grid: expands to no variants")
    return {vid: Variant(**{**v.__dict__, "protocols": tuple(protocols[vid])}) for vid, v in variants.items()}
