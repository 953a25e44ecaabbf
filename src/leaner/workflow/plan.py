"""The plan: every study of a validated config expanded into its variants.

A *study* is a task, a dataset, a base recipe and a grid over
depth x heads x head-scaling protocol x MLP width x seeds. Each point of the grid is a *variant*
with a readable id derived from its architecture (``L4-H16-D64-hd4-mlp256-s0``). Two protocols
that give the same model (12 heads of 64 at width 768 is both ``fixed_width`` and
``fixed_head_dim``) give one variant, trained once, that belongs to both protocols' curves.

Everything here is light (no torch import): Snakemake imports it to build the DAG.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..compute.numerics import DEFAULT_MODE
from ..data.glue import GLUE_TASKS
from ..data.kinds import dataset_kind, every_kind, implicit_kinds, kind_defaults
from ..grid import ACCEPTANCE_CHECKS, grid_points
from ..models.config import model_config
from ..schema import Recipe, recipe_spec
from ..tasks import CATALOG, FINETUNE_SUFFIX, task_info
from .claims import claims_digest, resolve_claims
from .config import (
    MODEL_DEFAULTS,
    RECIPE_DEFAULTS,
    RESOURCE_DEFAULTS,
    THEORY_DEFAULTS,
    ConfigError,
    apply_every_study,
    did_you_mean,
    load_configs,
    schema_check,
    validate_schema,
)
from .datasets import check_dataset
from .kept import repeat_problems
from .variants import Variant, grid_points_of, lean_grid, variants_of

GLUE_NUM_LABELS = {task: labels for task, (_, labels, _, _) in GLUE_TASKS.items()}


@dataclass
class Study:
    name: str
    task: str
    dataset: str
    variants: dict[str, Variant]
    baseline: dict
    resources: dict
    acceptance: tuple[str, ...] = ACCEPTANCE_CHECKS
    finetune: dict | None = None  # glue: {dataset, tasks, recipe (a Recipe)}
    claims: tuple[dict, ...] = ()  # declared comparisons, checked against the grid (_claims)
    claims_digest: str = ""  # claims_digest() of the study's claims block as the config declares it

    def points(self) -> list[dict]:
        """The grid's points (grid.grid_points): what the report decides the study's outputs from."""
        return grid_points({**v.model.to_spec(), "protocols": v.protocols} for v in self.variants.values())

    def declared(self) -> dict:
        """What the report needs of the study (analysis/report.py read_study), as JSON would carry it."""
        return {"baseline": json.loads(json.dumps(self.baseline, sort_keys=True)), "checks": list(self.acceptance),
                "claims": json.loads(json.dumps(self.claims, sort_keys=True)), "points": self.points(),
                "variants": list(self.variants)}

    def protocol_map(self) -> dict[str, list[str]]:
        return {vid: list(v.protocols) for vid, v in self.variants.items()}

    def job_declaration(self) -> dict:
        """What the study's jobs read of its declarations, from results/{study}/declared.json (the
        rule `declare` writes it): the claims digest a training run records as it trains, the
        protocols each variant's summary row carries. A file, not the train spec: a changed claim
        or a protocol added retrains nothing (the training rule's input is `ancient`)."""
        return {"study": self.name, "claims_digest": self.claims_digest, "protocols": self.protocol_map()}

    def finetune_spec(self, variant: str, glue_task: str) -> dict:
        """The spec of fine-tuning pretrained `variant` on one GLUE task (a `leaner train` job)."""
        v = self.variants[variant]
        model = model_config({**v.model.to_spec(), "arch": "sequence_classifier",
                              "num_classes": GLUE_NUM_LABELS[glue_task]})
        return {"study": self.name, "variant": f"{variant}/glue/{glue_task}", "task": f"{self.task}{FINETUNE_SUFFIX}",
                "glue_task": glue_task, "dataset": self.finetune["dataset"], "seed": v.seed,
                "model": model.to_spec(), "recipe": recipe_spec(self.finetune["recipe"]),
                "conditioning": {**v.conditioning, "steps": []},
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


def build_plan(config: dict, base_dir: str | Path = ".") -> Plan:
    """Validate `config` (schema, then semantics; `every_study` laid over each study) and expand
    it. Raises ConfigError."""
    early, cleaned = schema_check(config)
    if early:  # the studies still wrong less their unknown keys are left out; the others are checked
        remaining, _ = schema_check(cleaned)  # on, so that every mistake of a file is said at once
        broken = {m.group(1) for line in remaining if (m := re.match(r"config error: studies\.(\w+)\b", line))}
        if config.get("every_study") or not isinstance(cleaned.get("studies"), dict) or any(
                not line.startswith("config error: studies.") for line in remaining):
            raise ConfigError(early)
        config = {**cleaned, "studies": {k: v for k, v in cleaned["studies"].items()
                                         if k not in broken and isinstance(v, dict)}}
    declared = {name: st.get("claims") or [] for name, st in config["studies"].items() if isinstance(st, dict)}
    if config.get("every_study"):  # the studies it changed are checked again
        config = apply_every_study(config)
        validate_schema(config)
    problems: list[str] = list(early)
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
    plan = Plan(datasets=datasets, studies=studies, theory=theory, numerics=config.get("numerics", DEFAULT_MODE))
    if not problems:
        problems += repeat_problems(plan)  # a claim's runs are new data, or named as seen
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))
    return plan


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
    used = {k: v for k, v in given.items() if k in allowed}  # a key of another task's is one line above
    settings = {**{k: v for k, v in MODEL_DEFAULTS.items() if k in allowed}, **info.model, **used}
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
    if spec["kind"] not in every_kind():
        raise ConfigError([f"config error: studies.{study}.dataset: unknown dataset {ds_name!r}"])
    ds = check_dataset(ds_name, spec, problems, Path(base_dir))
    if problems:  # a dataset without a key its kind requires builds no model
        raise ConfigError(problems)
    model_base = _model_base(study, st, ds, problems)
    if problems:
        raise ConfigError(problems)
    return st, model_base


RESERVED_STUDY_NAMES = ("data", "figures", "tables", "theory", "overview")  # folders of results/ itself


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
        lean = lean_grid(name, st, info, model_base, problems)
        if lean is None:
            return None
        grid, base = lean
        st, baseline = {**st, "grid": grid}, baseline or base
    variants = variants_of(name, st, info, grid_points_of(name, st, info, model_base, problems), model_base, problems)
    finetune = _finetune(name, st, info, datasets, model_base, problems)
    res = st.get("resources") or {}
    if res.get("jobs_per_gpu", 1) > 1 and res.get("gpu", 0) != 1:
        problems.append(f"config error: studies.{name}.resources.jobs_per_gpu: {res['jobs_per_gpu']} jobs share one "
                        f"GPU, so gpu must be 1, got {res.get('gpu', 0)} (allowed: gpu: 1 with jobs_per_gpu > 1, "
                        f"or jobs_per_gpu: 1)")
    return Study(name=name, task=task, dataset=st["dataset"], variants=variants, finetune=finetune, baseline=baseline,
                 resources={**RESOURCE_DEFAULTS, **res}, acceptance=tuple(st.get("acceptance", ACCEPTANCE_CHECKS)),
                 claims=resolve_claims(name, st, info, variants, problems, list(declared)),
                 claims_digest=claims_digest(list(declared)))


def _study_dataset(name: str, st: dict, datasets: dict, problems: list[str]) -> dict | None:
    """The study's dataset, if the name is free, the dataset declared and of a kind its task takes."""
    if name in RESERVED_STUDY_NAMES:
        problems.append(f"config error: studies.{name}: reserved name, results/{name}/ holds other outputs "
                        f"(allowed: any name but {', '.join(RESERVED_STUDY_NAMES)})")
        return None
    if st["dataset"] not in datasets:
        problems.append(f"config error: studies.{name}.dataset: unknown dataset {st['dataset']!r}"
                        f"{did_you_mean(st['dataset'], datasets)} (allowed: {', '.join(sorted(datasets))})")
        return None
    ds, info = datasets[st["dataset"]], task_info(st["task"])
    if ds["kind"] not in info.dataset_kinds:
        fitting = sorted(n for n, d in datasets.items() if d["kind"] in info.dataset_kinds)
        problems.append(f"config error: studies.{name}.dataset: {st['dataset']!r} is a {ds['kind']} dataset, "
                        f"task {st['task']} needs one of kind {', '.join(info.dataset_kinds)} "
                        f"(allowed: {', '.join(fitting) or 'none declared'})")
        return None
    if any(req not in ds for req in dataset_kind(ds["kind"]).required):
        return None  # check_dataset said which key is missing; no model is built without it
    return ds


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
                "recipe": Recipe.of({**RECIPE_DEFAULTS, **info.finetune_recipe, **(ft.get("recipe") or {})})}
    return None


def load_plan(*paths: str | Path, default: str | Path | None = None) -> Plan:
    """Load and expand config files, merged as `--configfile a b` merges them, and laid over
    `default` when they are an overlay (config.merge_cli_config); relative dataset paths resolve
    against the working directory, as they do under Snakemake."""
    return build_plan(load_configs(paths, default))


def timm_variants(default: str | Path, *paths: str | Path) -> list:
    """The timm backbones that `default` and every config of `paths` (laid over it where an overlay)
    plan, each config on its own (`make timm-table` counts their shapes into models/timm_table.json)."""
    return [v.model for path in (default, *paths) for study in load_plan(path, default=default).studies.values()
            for v in study.variants.values() if v.model.arch == "timm"]
