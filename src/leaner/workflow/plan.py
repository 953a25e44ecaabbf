"""The plan: every study of a validated config expanded into its variants.

A *study* is a task, a dataset, a base recipe and a grid over
depth x heads x head-scaling protocol x MLP width x seeds. Each point of the grid is a *variant*
with a readable id derived from its architecture (``L4-H16-D64-hd4-mlp256-s0``). Two protocols
that give the same model (12 heads of 64 at width 768 is both ``fixed_width`` and
``fixed_head_dim``) give one variant, trained once, that belongs to both protocols' curves.

Everything here is light (no torch import): Snakemake imports it to build the DAG.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..compute.numerics import DEFAULT_MODE
from ..data.glue import GLUE_TASKS
from ..data.kinds import KINDS, implicit_kinds, kind_defaults
from ..grid import expand_image_grid, expand_nearest_grid, grid_key, image_variant, nearest_variant
from ..outputs import ACCEPTANCE_CHECKS, grid_points, study_outputs
from ..tasks import CATALOG, FINETUNE_SUFFIX, GRID_AXES, task_info
from .config import (
    CONDITIONING_DEFAULTS,
    MODEL_DEFAULTS,
    RECIPE_DEFAULTS,
    RESOURCE_DEFAULTS,
    THEORY_DEFAULTS,
    ConfigError,
    apply_every_study,
    did_you_mean,
    load_configs,
    validate_schema,
)
from .datasets import check_dataset

GLUE_NUM_LABELS = {task: labels for task, (_, labels, _, _) in GLUE_TASKS.items()}


@dataclass(frozen=True)
class Variant:
    """One trainable point of a study's grid."""

    study: str
    id: str
    task: str
    dataset: str
    seed: int
    model: dict
    recipe: dict
    conditioning: dict
    protocols: tuple[str, ...] = ()
    expect_params: dict | None = None

    def spec(self) -> dict:
        """Everything a training job needs; the `params` of its rule (protocols excluded, so
        adding a protocol to the grid does not retrain a model it shares)."""
        out = {"study": self.study, "variant": self.id, "task": self.task, "dataset": self.dataset,
               "seed": self.seed, "model": self.model, "recipe": self.recipe,
               "conditioning": self.conditioning}
        if self.expect_params:
            out["expect_params"] = self.expect_params
        return out

    def spec_json(self) -> str:
        return json.dumps(self.spec(), sort_keys=True, separators=(",", ":"))


@dataclass
class Study:
    name: str
    task: str
    dataset: str
    variants: dict[str, Variant]
    baseline: dict
    resources: dict
    acceptance: tuple[str, ...] = ACCEPTANCE_CHECKS
    finetune: dict | None = None  # glue: {dataset, tasks, recipe}
    claims: tuple[dict, ...] = ()  # declared comparisons, checked against the grid (_claims)
    claims_digest: str = ""  # claims_digest() of the study's claims block as the config declares it

    def outputs(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(figure names, table names) with something to show on this study's grid; the claims
        table where the study declares claims."""
        rows = [{**v.model, "protocols": v.protocols} for v in self.variants.values()]
        return study_outputs(self.task, grid_points(rows), self.baseline, bool(self.claims))

    def protocol_map(self) -> dict[str, list[str]]:
        return {vid: list(v.protocols) for vid, v in self.variants.items()}

    def finetune_spec(self, variant: str, glue_task: str) -> dict:
        """The spec of fine-tuning pretrained `variant` on one GLUE task (a `leaner train` job)."""
        v = self.variants[variant]
        model = {**v.model, "arch": "sequence_classifier", "num_classes": GLUE_NUM_LABELS[glue_task]}
        return {"study": self.name, "variant": f"{variant}/glue/{glue_task}", "task": f"{self.task}{FINETUNE_SUFFIX}",
                "glue_task": glue_task, "dataset": self.finetune["dataset"], "seed": v.seed, "model": model,
                "recipe": self.finetune["recipe"], "conditioning": {**v.conditioning, "steps": []},
                "init_from": f"results/{self.name}/{variant}/model.safetensors"}


@dataclass
class Plan:
    """The validated configuration: datasets, studies with their variants, theory settings."""

    datasets: dict[str, dict]
    studies: dict[str, Study]
    theory: dict
    numerics: str = DEFAULT_MODE  # what the jobs compute under (leaner.compute.numerics)

    def variant(self, study: str, variant: str) -> Variant:
        return self.studies[study].variants[variant]

    @property
    def train_retries(self) -> int | None:
        """Snakemake retries of a training job: the most `resources.attempts` of any study, less
        the first run (None where every study has one: the command line's --retries then hold)."""
        most = max((s.resources["attempts"] for s in self.studies.values()), default=1)
        return most - 1 if most > 1 else None

    def used_datasets(self) -> list[str]:
        """The datasets the studies train or fine-tune on (sorted)."""
        used = {st.dataset for st in self.studies.values()} | {
            st.finetune["dataset"] for st in self.studies.values() if st.finetune}
        return sorted(used)


def _matches(where: dict, point: dict) -> bool:
    return all(point.get(k) == v for k, v in where.items())


def build_plan(config: dict, base_dir: str | Path = ".") -> Plan:
    """Validate `config` (schema, then semantics; `every_study` laid over each study) and expand
    it. Raises ConfigError."""
    validate_schema(config)
    declared = {name: st.get("claims") or [] for name, st in config["studies"].items() if isinstance(st, dict)}
    if config.get("every_study"):  # the studies it changed are checked again
        config = apply_every_study(config)
        validate_schema(config)
    problems: list[str] = []
    base_dir = Path(base_dir)

    datasets = {n: check_dataset(n, s, problems, base_dir) for n, s in (config.get("datasets") or {}).items()}
    for implicit in implicit_kinds():  # need no settings: always available by kind name
        datasets.setdefault(implicit, {"kind": implicit, **kind_defaults(implicit)})

    studies: dict[str, Study] = {}
    for name, st in config["studies"].items():
        study = _build_study(name, st, datasets, problems, declared.get(name, []))
        if study is not None:
            studies[name] = study

    theory = {**THEORY_DEFAULTS, **(config.get("theory") or {})}
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))
    return Plan(datasets=datasets, studies=studies, theory=theory, numerics=config.get("numerics", DEFAULT_MODE))


def _model_base(name: str, st: dict, ds: dict, problems: list[str]) -> dict:
    """The model settings a study's variants share: its `model:` block over its task's defaults
    over the schema's, on its task's base."""
    task, given = st["task"], st.get("model") or {}
    info = task_info(task)
    allowed = info.model_keys
    for key in given:
        if key not in allowed:
            problems.append(f"config error: studies.{name}.model.{key}: not used by task {task} "
                            f"(allowed: {', '.join(allowed)})")
    settings = {**{k: v for k, v in MODEL_DEFAULTS.items() if k in allowed}, **info.model, **given}
    return info.model_base(settings, ds, lambda text: problems.append(f"config error: studies.{name}.{text}"))


def study_model_base(config: dict, study: str, base_dir: str | Path = ".") -> tuple[dict, dict]:
    """(the study's config block, the model settings its variants share): what `leaner match`
    builds candidate models from. Raises ConfigError."""
    validate_schema(config)
    if study not in config["studies"]:
        raise ConfigError([f"config error: studies.{study}: no such study{did_you_mean(study, config['studies'])} "
                           f"(allowed: {', '.join(config['studies'])})"])
    st, problems = config["studies"][study], []
    ds_name = st["dataset"]
    spec = (config.get("datasets") or {}).get(ds_name) or {"kind": ds_name}
    if spec["kind"] not in KINDS:
        raise ConfigError([f"config error: studies.{study}.dataset: unknown dataset {ds_name!r}"])
    ds = check_dataset(ds_name, spec, problems, Path(base_dir))
    if problems:  # a dataset without a key its kind requires builds no model
        raise ConfigError(problems)
    model_base = _model_base(study, st, ds, problems)
    if problems:
        raise ConfigError(problems)
    return st, model_base


RESERVED_STUDY_NAMES = ("data", "figures", "tables", "theory", "overview")  # folders of results/ itself


def claims_digest(claims: list[dict]) -> str:
    """The fingerprint of a study's claims block as declared (rationale included): what each run
    records when it trains, so that a table can tell a declaration changed after its runs."""
    return hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).hexdigest()[:16]


def _build_study(name: str, st: dict, datasets: dict, problems: list[str],
                 declared: list[dict] = ()) -> Study | None:
    """One study of the config, expanded and checked; None (with the problems said) when it cannot be.
    `declared`: its claims block before any `every_study` overlay."""
    task = st["task"]
    info = task_info(task)
    ds = _study_dataset(name, st, datasets, problems)
    if ds is None:
        return None
    model_base = _model_base(name, st, ds, problems)
    baseline = dict(st.get("baseline") or {})
    if ("grid" in st) == ("lean" in st):
        problems.append(f"config error: studies.{name}: give grid or lean, one of them (allowed: grid, the axes to "
                        f"sweep; lean, a baseline and a parameter budget)")
        return None
    if "lean" in st:
        lean = _lean_grid(name, st, info, model_base, problems)
        if lean is None:
            return None
        grid, base = lean
        st, baseline = {**st, "grid": grid}, baseline or base
    variants = _variants(name, st, info, _grid_points(name, st, info, model_base, problems), model_base, problems)
    finetune = _finetune(name, st, info, datasets, model_base, problems)
    res = st.get("resources") or {}
    if res.get("jobs_per_gpu", 1) > 1 and res.get("gpu", 0) != 1:
        problems.append(f"config error: studies.{name}.resources.jobs_per_gpu: {res['jobs_per_gpu']} jobs share one "
                        f"GPU, so gpu must be 1, got {res.get('gpu', 0)} (allowed: gpu: 1 with jobs_per_gpu > 1, "
                        f"or jobs_per_gpu: 1)")
    return Study(name=name, task=task, dataset=st["dataset"], variants=variants, finetune=finetune, baseline=baseline,
                 resources={**RESOURCE_DEFAULTS, **res}, acceptance=tuple(st.get("acceptance", ACCEPTANCE_CHECKS)),
                 claims=_claims(name, st, info, variants, problems, list(declared)),
                 claims_digest=claims_digest(list(declared)))


def _claims(name: str, st: dict, info, variants: dict[str, Variant], problems: list[str],
            declared: list[dict]) -> tuple[dict, ...]:
    """The study's declared claims, each point resolved to the one configuration of the grid it
    names (its axes: {depth, heads, width, ...}), the metric and which way is better filled in
    from the task, the seeds checked against the grid's. Each keeps the seeds its declaration
    names (`declared_seeds`: an `every_study` overlay may run others) and the block's digest."""
    out = []
    axes = GRID_AXES[info.grid]
    configs = {json.dumps({k: v.model[k] for k in axes}, sort_keys=True): v for v in variants.values()}
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
                resolved[role] = {k: found[0].model[k] for k in axes}
        if len(resolved) == len(points) + ("control" in claim):
            as_declared = next((c for c in declared if c.get("name") == claim["name"]), claim)
            out.append({"name": claim["name"], "metric": metric, "mode": modes[metric], "margin": claim["margin"],
                        "hypothesis": claim.get("hypothesis", "non-inferior"),
                        "seeds": sorted(claim["seeds"]), "declared_seeds": sorted(as_declared["seeds"]),
                        "baseline": resolved["baseline"],
                        "lean": [resolved[f"lean[{j}]"] for j in range(len(claim["lean"]))],
                        "control": resolved.get("control"), "declaration": claims_digest(declared),
                        "rationale": claim.get("rationale", "")})
    names = [c["name"] for c in st.get("claims") or []]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"config error: studies.{name}.claims: the name {dup!r} is declared twice "
                        f"(allowed: one claim a name)")
    return tuple(out)


def _claim_config(point: dict, configs: dict) -> list:
    """The grid's configurations (one variant each) that `point` names; mlp_ratio is mlp_hidden / width."""
    def names(m: dict) -> bool:
        return all(("mlp_hidden" in m and m["mlp_hidden"] == value * m["width"]) if key == "mlp_ratio"
                   else m.get(key) == value for key, value in point.items())

    return [v for v in configs.values() if names(v.model)]


def _config_label(v: Variant, axes) -> str:
    return ",".join(f"{k}={v.model[k]}" for k in axes)


def _study_dataset(name: str, st: dict, datasets: dict, problems: list[str]) -> dict | None:
    """The study's dataset, if the name is free, the dataset declared and of a kind its task takes."""
    if name in RESERVED_STUDY_NAMES:
        problems.append(f"config error: studies.{name}: reserved name, results/{name}/ holds other outputs "
                        f"(allowed: any name but {', '.join(RESERVED_STUDY_NAMES)})")
        return None
    if st["dataset"] not in datasets:
        problems.append(f"config error: studies.{name}.dataset: unknown dataset {st['dataset']!r} "
                        f"(allowed: {', '.join(sorted(datasets))})")
        return None
    ds, info = datasets[st["dataset"]], task_info(st["task"])
    if ds["kind"] not in info.dataset_kinds:
        fitting = sorted(n for n, d in datasets.items() if d["kind"] in info.dataset_kinds)
        problems.append(f"config error: studies.{name}.dataset: {st['dataset']!r} is a {ds['kind']} dataset, "
                        f"task {st['task']} needs one of kind {', '.join(info.dataset_kinds)} "
                        f"(allowed: {', '.join(fitting) or 'none declared'})")
        return None
    if any(req not in ds for req in KINDS[ds["kind"]].required):
        return None  # check_dataset said which key is missing; no model is built without it
    return ds


def _lean_grid(name: str, st: dict, info, model_base: dict, problems: list[str]) -> tuple[list, dict] | None:
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


def _grid_points(name: str, st: dict, info, model_base: dict, problems: list[str]) -> list[dict]:
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


def _variants(name: str, st: dict, info, points: list[dict], model_base: dict,
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
                                model=model, recipe=recipe, conditioning=conditioning,
                                expect_params=expect.get(vid))
    for i, ov in enumerate(overrides):
        if not any(_matches(ov["where"], p) for p in points):
            problems.append(f"config error: studies.{name}.overrides[{i}].where: matches no variant of the grid "
                            f"(allowed: values on the study's grid axes)")
    for vid in expect:
        if vid not in variants:
            problems.append(f"config error: studies.{name}.expect_params: no variant {vid!r} in the grid "
                            f"(allowed: ids listed by `leaner variants <config>`)")
    if not variants and not any(p.startswith(f"config error: studies.{name}.") for p in problems):
        problems.append(f"config error: studies.{name}.grid: expands to no variants")
    return {vid: Variant(**{**v.__dict__, "protocols": tuple(protocols[vid])}) for vid, v in variants.items()}


def _finetune(name: str, st: dict, info, datasets: dict, model_base: dict, problems: list[str]) -> dict | None:
    """A pretraining study's fine-tuning stage (GLUE): its dataset, tasks and recipe."""
    ft = st.get("finetune")
    kind = info.finetune_kind
    if not kind:
        if ft:
            stages = " or ".join(n for n, i in CATALOG.items() if i.finetune_kind)
            problems.append(f"config error: studies.{name}.finetune: only used by task {stages} "
                            f"(allowed: remove it, or task: {stages})")
        return None
    if not ft:
        problems.append(f"config error: studies.{name}.finetune: required by task {info.name} "
                        f"(allowed: a mapping with keys dataset, recipe)")
    elif ft["dataset"] not in datasets or datasets[ft["dataset"]]["kind"] != kind:
        fitting = sorted(n for n, d in datasets.items() if d["kind"] == kind)
        problems.append(f"config error: studies.{name}.finetune.dataset: {ft['dataset']!r} is not a {kind} dataset "
                        f"(allowed: {', '.join(fitting) or f'none declared; add one of kind {kind}'})")
    elif datasets[ft["dataset"]]["max_length"] > model_base["max_len"]:
        max_length = datasets[ft["dataset"]]["max_length"]
        problems.append(f"config error: datasets.{ft['dataset']}.max_length: {max_length} "
                        f"is longer than study {name}'s context {model_base['max_len']} (allowed: at most the "
                        f"pretraining context, model.context)")
    else:
        return {"dataset": ft["dataset"], "tasks": list(datasets[ft["dataset"]]["tasks"]),
                "recipe": {**RECIPE_DEFAULTS, **info.finetune_recipe, **(ft.get("recipe") or {})}}
    return None


def load_plan(*paths: str | Path, default: str | Path | None = None) -> Plan:
    """Load and expand config files, merged as `--configfile a b` merges them, and laid over
    `default` when they are an overlay (config.merge_cli_config); relative dataset paths resolve
    against the working directory, as they do under Snakemake."""
    return build_plan(load_configs(paths, default))
