"""Load and validate a study configuration, and expand each study's grid into variants.

A *study* is a task, a dataset, a base recipe and a grid over
depth x heads x head-scaling protocol x MLP width x seeds. Each point of the grid is a *variant*
with a readable id derived from its architecture (``L4-H16-D64-hd4-mlp256-s0``). Two protocols
that give the same model (12 heads of 64 at width 768 is both ``fixed_width`` and
``fixed_head_dim``) give one variant, trained once, that belongs to both protocols' curves.

Everything here is light (no torch import): Snakemake imports it to build the DAG.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# the tokenizers' facts (numpy-only modules: still no torch import here)
from .data.glue import TASKS as GLUE_TASKS
from .grid import expand_image_grid, expand_nearest_grid, grid_key, image_variant, nearest_variant
from .tasks import CATALOG, FINETUNE_SUFFIX, task_info

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


ACCEPTANCE_CHECKS = ("full_rank_gap", "short_sequences", "perfect_angle")


@dataclass(frozen=True)
class Varies:
    """Met where `axis` takes two values or more among points equal on every axis of `within`
    (a curve along `axis`, or two lines told apart by it)."""

    axis: str
    within: tuple[str, ...] = ()

    def met(self, points: list[dict], baseline: dict) -> bool:
        seen: dict[tuple, set] = {}
        for p in points:
            seen.setdefault(tuple(p.get(k) for k in self.within), set()).add(p.get(self.axis))
        return any(len(values) > 1 for values in seen.values())


@dataclass(frozen=True)
class Has:
    """Met where some point has every one of these values."""

    values: tuple[tuple[str, Any], ...]

    def met(self, points: list[dict], baseline: dict) -> bool:
        return any(all(p.get(k) == v for k, v in self.values) for p in points)


@dataclass(frozen=True)
class BelowBaseline:
    """Met where some point has a smaller `axis` than the baseline: the deepest point matching
    the study's baseline settings (all points when none is set or none matches)."""

    axis: str = "depth"

    def met(self, points: list[dict], baseline: dict) -> bool:
        base = [p for p in points if all(p.get(k) == v for k, v in (baseline or {}).items())] or points
        return bool(base) and any(p[self.axis] < max(b[self.axis] for b in base) for p in points)


# What a figure or table needs from its study's grid to show something: every requirement met,
# else it is neither made nor listed as an output. Names not here need nothing.
P1_CURVE = ("protocol", "mlp_ratio", "depth")  # a vs-heads line: one depth in one panel
P2_LINE = ("depth", "modules", "dim", "tokens", "posn")  # a vs-rank line
RANK_VARIES = Varies("head_dim", P2_LINE)


def _p2_lines_by(axis: str) -> tuple:
    return RANK_VARIES, Varies(axis, tuple(a for a in P2_LINE if a != axis))


REQUIRES: dict[str, tuple] = {
    **{name: (Varies("heads", P1_CURVE),)
       for name in ("kappa_vs_heads", "accuracy_vs_heads", "loss_vs_heads", "glue_vs_heads")},
    **{name: (Varies("mlp_hidden", ("protocol", "depth", "heads")),)
       for name in ("accuracy_vs_mlp", "loss_vs_mlp", "glue_vs_mlp")},
    "mse_vs_rank": (RANK_VARIES,),
    "kappa_vs_rank": (RANK_VARIES,),
    "mse_vs_rank_by_tokens": _p2_lines_by("tokens"),
    "mse_vs_rank_by_dim": _p2_lines_by("dim"),
    "mse_vs_rank_by_posn": _p2_lines_by("posn"),
    "perfect_angle": (Has((("depth", 1), ("heads", 1))),),
    "lean_vs_baseline": (BelowBaseline("depth"),),
}
POINT_AXES = ("protocol", "depth", "heads", "width", "head_dim", "mlp_hidden", "modules", "dim", "tokens", "posn")


def grid_points(rows: Iterable[dict]) -> list[dict]:
    """A study's points from its variants' models or its summary rows: one per (architecture,
    protocol), seeds merged; `protocols` a list or a ';'-joined string."""
    points = {}
    for row in rows:
        protocols = row.get("protocols")
        protocols = ([p for p in protocols.split(";") if p] if isinstance(protocols, str) else
                     list(protocols) if isinstance(protocols, (list, tuple)) else [])  # NaN: read from a CSV
        for protocol in protocols or [None]:
            p = {k: row[k] for k in POINT_AXES if k in row and k != "protocol"}
            p["protocol"] = protocol
            if "width" in p and "mlp_hidden" in p:
                p["mlp_ratio"] = round(p["mlp_hidden"] / p["width"], 6)
            points[tuple(sorted(p.items(), key=lambda kv: kv[0]))] = p
    return list(points.values())


def study_outputs(task: str, points: list[dict],
                  baseline: dict | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(figure names, table names) of a study: its task's candidates (the catalogue's figures, tables)
    whose REQUIRES the grid's points meet. The Snakefile's outputs, its targets and the figures
    and tables commands all take their names from here."""
    def shown(names):
        return tuple(n for n in names if all(r.met(points, baseline or {}) for r in REQUIRES.get(n, ())))

    info = task_info(task)
    return shown(info.figures), shown(info.tables)


# Across every study (results/tables/all_studies-{name}.*, the overview rule).
OVERVIEW_TABLES = ("kappa_rank_error", "heads_effect", "kappa_error_correlation", "headline")
THEORY_TABLES = ("gaussian_conditioning", "paper_comparison")

DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "digits": {"test_fraction": 0.2, "split_seed": 0, "img_size": 8, "in_chans": 1, "num_classes": 10},
    "hub": {"subset": None, "train_split": "train", "eval_split": "validation",
            "image_key": "image", "label_key": "label", "in_chans": 3, "img_size": 224,
            "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "decode": "pil"},
    "imagefolder": {"train_split": "train", "eval_split": "validation",
                    "image_key": "image", "label_key": "label", "in_chans": 3, "img_size": 224,
                    "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "decode": "pil"},
}
DATASET_DEFAULTS["nearest_point"] = {"streams": 7, "eval_samples": 4096, "eval_seed": 12345}
# LRA ListOps as published: depth 10, up to 10 arguments, 500-2000 tokens, 96k/2k/2k examples.
DATASET_DEFAULTS["listops"] = {"seed": 0, "n_train": 96000, "n_val": 2000, "n_test": 2000, "max_depth": 10,
                               "max_args": 10, "min_length": 500, "max_length": 2000}
DATASET_DEFAULTS["text"] = {"source": "hub", "subset": None, "text_key": "text", "train_split": "train",
                            "eval_split": "validation", "train_file": "train.txt", "eval_file": "validation.txt",
                            "stories": 4000, "seed": 0, "max_train_tokens": None, "eval_tokens": 262144}
# GLUE as in P1's table: the eight tasks of the GLUE average (WNLI left out, as cramming does).
DATASET_DEFAULTS["glue"] = {"source": "hub", "name": "nyu-mll/glue",
                            "tasks": ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"],
                            "max_length": 128, "max_train_examples": None}
DATASET_REQUIRED = {"hub": ("name", "num_classes"), "imagefolder": ("path", "num_classes")}
REQUIRED_HINTS = {"name": "a hub dataset name, e.g. uoft-cs/cifar10", "path": "an existing local folder",
                  "num_classes": "the number of classes, an integer >= 1"}
TEXT_SOURCE_REQUIRED = {"hub": ("name",), "files": ("path",), "generated": ()}
GLUE_NUM_LABELS = {task: labels for task, (_, labels, _, _) in GLUE_TASKS.items()}


RECIPE_DEFAULTS = {
    "epochs": 30, "batch_size": 64, "lr": 1e-3, "min_lr": 0.0, "weight_decay": 0.05,
    "betas": [0.9, 0.999], "warmup_frac": 0.05, "grad_clip": None, "label_smoothing": 0.0,
    "mixup": 0.0, "cutmix": 0.0, "augment": False, "eval_every": 1, "checkpoint_every": 500,
    "eval_batch_size": 256, "num_workers": 0, "max_steps": None, "schedule": "cosine",
    "steps_per_epoch": None, "init_seed": None, "compile": False, "cuda_graph": False, "sync_every": None,
}
# Fine-tuning on each GLUE task (cramming: 5 epochs, batch 32, lr 4e-5 [INF]).
FINETUNE_RECIPE_DEFAULTS = {"epochs": 5, "batch_size": 32, "lr": 4e-5, "weight_decay": 0.01, "warmup_frac": 0.1,
                            "betas": [0.9, 0.98], "steps_per_epoch": None, "schedule": "cosine"}
# jacobian_*: kappa of the attention block's Jacobian on the first few probe inputs, exact up to
# jacobian_exact_max rows (N * D), else after lanczos_steps of matrix-free Lanczos (jacobian.py)
CONDITIONING_DEFAULTS = {"samples": 256, "steps": [], "jacobian_samples": 4, "jacobian_exact_max": 1200,
                         "lanczos_steps": 64}
RESOURCE_DEFAULTS = {"gpu": 0, "jobs_per_gpu": 1, "gpu_model": "", "runtime": 30, "mem_mb": 4000, "threads": 1}
THEORY_DEFAULTS = {"draws": 20, "seed": 0, "tokens": [197], "head_dim": [64], "width": [768],
                   "heads": [1, 2, 4, 8, 12, 16, 24, 32]}


class ConfigError(ValueError):
    """A configuration problem; str() is one line per problem, each naming the key."""

    def __init__(self, problems: Iterable[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


# ----------------------------------------------------------------------------- schema validation

def _schema() -> dict:
    """The config's JSON Schema, with the task names filled in from the task catalogue."""
    with open(SCHEMA_PATH) as fh:
        schema = yaml.safe_load(fh)
    schema["$defs"]["study"]["properties"]["task"]["enum"] = list(CATALOG)
    return schema


def _key_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _allowed(schema: dict, root: dict) -> str:
    """A short description of what a schema node allows, for error messages."""
    if "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        return _allowed(node, root)
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    bits = []
    if "minimum" in schema:
        bits.append(f">= {schema['minimum']}")
    if "exclusiveMinimum" in schema:
        bits.append(f"> {schema['exclusiveMinimum']}")
    if "maximum" in schema:
        bits.append(f"<= {schema['maximum']}")
    if "exclusiveMaximum" in schema:
        bits.append(f"< {schema['exclusiveMaximum']}")
    if "pattern" in schema:
        bits.append(f"matching {schema['pattern']}")
    if kind == "array":
        item = _allowed(schema.get("items", {}), root)
        return f"a non-empty list of {item}" if schema.get("minItems") else f"a list of {item}"
    if kind == "object" and "properties" in schema:
        return "a mapping with keys " + ", ".join(schema["properties"])
    if "oneOf" in schema:
        return " or ".join(_allowed(s, root) for s in schema["oneOf"])
    name = " or ".join("a number" if k == "number" else f"{'an' if k == 'integer' else 'a'} {k}"
                       for k in kinds if k)
    return " ".join([name or "a value"] + bits)


def _format_error(err, root: dict) -> str:
    where = _key_path(err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        target = f"{where}.{extra[0]}" if where != "(top level)" else extra[0]
        allowed_txt = ", ".join(allowed) if allowed else "(any name)"
        return f"{target}: unknown key (allowed: {allowed_txt})"
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        required = err.schema.get("required", [])
        optional = sorted(set(err.schema.get("properties", {})) - set(required))
        return (f"{where}: missing required key '{missing}' (allowed: a mapping with keys "
                f"{', '.join(required)} and optionally {', '.join(optional)})")
    if err.validator in ("minItems", "minProperties"):
        return f"{where}: must not be empty (allowed: at least one entry)"
    if err.validator == "uniqueItems":
        return f"{where}: {json.dumps(err.instance)} repeats a value (allowed: distinct values)"
    if err.validator == "propertyNames" or "propertyNames" in err.schema_path:
        return f"{where}: bad name {err.instance!r} (allowed: letters, digits and _, starting with a letter)"
    if err.validator == "oneOf" and isinstance(err.instance, (list, dict)):
        # Report the most specific sub-error: what the user most likely meant.
        # (the branch whose type fits the value, and the deepest error within it).
        fitting = [e for e in err.context if not (e.validator == "type" and not e.relative_path)]
        best = max(fitting, key=lambda e: len(list(e.absolute_path)), default=None)
        if best is not None:
            return _format_error(best, root)
    return f"{where}: {json.dumps(err.instance)} is not allowed (allowed: {_allowed(err.schema, root)})"


def validate_schema(config: dict) -> None:
    import jsonschema

    schema = _schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = list(dict.fromkeys(f"config error: {_format_error(e, schema)}" for e in errors))
        raise ConfigError(lines)


# ----------------------------------------------------------------------------- variants

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
    description: str = ""
    acceptance: tuple[str, ...] = ACCEPTANCE_CHECKS
    finetune: dict | None = None  # glue: {dataset, tasks, recipe}

    def outputs(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(figure names, table names) with something to show on this study's grid."""
        rows = [{**v.model, "protocols": v.protocols} for v in self.variants.values()]
        return study_outputs(self.task, grid_points(rows), self.baseline)

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

    def variant(self, study: str, variant: str) -> Variant:
        return self.studies[study].variants[variant]


def _deep_merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _matches(where: dict, point: dict) -> bool:
    return all(point.get(k) == v for k, v in where.items())


def _check_dataset(name: str, spec: dict, problems: list[str], base_dir: Path) -> dict:
    kind = spec["kind"]
    out = {**DATASET_DEFAULTS[kind], **spec}
    for req in DATASET_REQUIRED.get(kind, ()):
        if req not in spec:
            problems.append(f"config error: datasets.{name}.{req}: required for kind {kind} "
                            f"(allowed: {REQUIRED_HINTS.get(req, 'a value')})")
    if kind == "text":
        for req in TEXT_SOURCE_REQUIRED[out["source"]]:
            if req not in spec:
                problems.append(f"config error: datasets.{name}.{req}: required for a text dataset from "
                                f"{out['source']}")
        if out["source"] == "files" and "path" in spec:
            root = Path(spec["path"])
            root = root if root.is_absolute() else base_dir / root
            if not root.is_dir():
                problems.append(f"config error: datasets.{name}.path: {spec['path']!r} does not exist "
                                f"(allowed: a folder holding train_file and eval_file)")
            for key in ("train_file", "eval_file") if root.is_dir() else ():
                if not (root / out[key]).is_file():
                    problems.append(f"config error: datasets.{name}.{key}: {str(root / out[key])!r} does not exist "
                                    f"(allowed: a text file, one document per line)")
            out["path"] = str(root)
    if kind == "glue":
        if out["source"] == "generated":
            problems.append(f"config error: datasets.{name}.source: 'generated' is not allowed for glue "
                            f"(allowed: hub, files)")
        elif out["source"] == "files":
            root = Path(spec.get("path", ""))
            root = root if root.is_absolute() else base_dir / root
            if "path" not in spec or not root.is_dir():
                problems.append(f"config error: datasets.{name}.path: {spec.get('path')!r} is not a directory "
                                f"(allowed: a folder with <task>/train.tsv and <task>/<eval split>.tsv)")
            else:
                out["path"] = str(root)
    if kind == "listops":
        if out["min_length"] > out["max_length"]:
            problems.append(f"config error: datasets.{name}.min_length: {out['min_length']} is above max_length "
                            f"{out['max_length']} (allowed: at most max_length)")
    if kind == "imagefolder" and "path" in spec:
        root = Path(spec["path"])
        root = root if root.is_absolute() else base_dir / root
        if not root.is_dir():
            problems.append(f"config error: datasets.{name}.path: {spec['path']!r} does not exist "
                            f"(allowed: an existing ImageFolder directory with one sub-folder per split)")
        else:
            out["path"] = str(root)
    return out


def build_plan(config: dict, base_dir: str | Path = ".") -> Plan:
    """Validate `config` (schema, then semantics) and expand it. Raises ConfigError."""
    validate_schema(config)
    problems: list[str] = []
    base_dir = Path(base_dir)

    datasets = {n: _check_dataset(n, s, problems, base_dir) for n, s in (config.get("datasets") or {}).items()}
    for implicit in ("digits", "nearest_point"):  # need no settings: always available by kind name
        datasets.setdefault(implicit, {"kind": implicit, **DATASET_DEFAULTS[implicit]})

    studies: dict[str, Study] = {}
    for name, st in config["studies"].items():
        study = _build_study(name, st, datasets, problems)
        if study is not None:
            studies[name] = study

    theory = {**THEORY_DEFAULTS, **(config.get("theory") or {})}
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))
    return Plan(datasets=datasets, studies=studies, theory=theory)


def _model_base(name: str, st: dict, ds: dict, problems: list[str]) -> dict:
    """The model settings a study's variants share: its `model:` block over its task's base."""
    task, given = st["task"], st.get("model") or {}
    allowed = task_info(task).model_keys
    for key in given:
        if key not in allowed:
            problems.append(f"config error: studies.{name}.model.{key}: not used by task {task} "
                            f"(allowed: {', '.join(allowed)})")
    return task_info(task).model_base(given, ds, lambda text: problems.append(f"config error: studies.{name}.{text}"))


def study_model_base(config: dict, study: str, base_dir: str | Path = ".") -> tuple[dict, dict]:
    """(the study's config block, the model settings its variants share): what `leaner match`
    builds candidate models from. Raises ConfigError."""
    validate_schema(config)
    if study not in config["studies"]:
        raise ConfigError([f"config error: studies.{study}: no such study (allowed: "
                           f"{', '.join(config['studies'])})"])
    st, problems = config["studies"][study], []
    ds_name = st["dataset"]
    spec = (config.get("datasets") or {}).get(ds_name) or {"kind": ds_name}
    if spec["kind"] not in DATASET_DEFAULTS:
        raise ConfigError([f"config error: studies.{study}.dataset: unknown dataset {ds_name!r}"])
    model_base = _model_base(study, st, _check_dataset(ds_name, spec, problems, Path(base_dir)), problems)
    if problems:
        raise ConfigError(problems)
    return st, model_base


RESERVED_STUDY_NAMES = ("data", "figures", "tables", "theory", "overview")  # folders of results/ itself


def _build_study(name: str, st: dict, datasets: dict, problems: list[str]) -> Study | None:
    task = st["task"]
    if name in RESERVED_STUDY_NAMES:
        problems.append(f"config error: studies.{name}: reserved name, results/{name}/ holds other outputs "
                        f"(allowed: any name but {', '.join(RESERVED_STUDY_NAMES)})")
        return None
    if st["dataset"] not in datasets:
        problems.append(f"config error: studies.{name}.dataset: unknown dataset {st['dataset']!r} "
                        f"(allowed: {', '.join(sorted(datasets))})")
        return None
    ds, info = datasets[st["dataset"]], task_info(task)
    if ds["kind"] not in info.dataset_kinds:
        fitting = sorted(n for n, d in datasets.items() if d["kind"] in info.dataset_kinds)
        problems.append(f"config error: studies.{name}.dataset: {st['dataset']!r} is a {ds['kind']} dataset, "
                        f"task {task} needs one of kind {', '.join(info.dataset_kinds)} "
                        f"(allowed: {', '.join(fitting) or 'none declared'})")
        return None
    model_base = _model_base(name, st, ds, problems)
    recipe_base = {**RECIPE_DEFAULTS, **info.recipe, **(st.get("recipe") or {})}
    conditioning = {**CONDITIONING_DEFAULTS, **(st.get("conditioning") or {})}

    baseline = dict(st.get("baseline") or {})
    if ("grid" in st) == ("lean" in st):
        problems.append(f"config error: studies.{name}: give grid or lean, one of them (allowed: grid, the axes to "
                        f"sweep; lean, a baseline and a parameter budget)")
        return None
    if "lean" in st:
        if info.grid != "arch":
            arch_tasks = [n for n, i in CATALOG.items() if i.grid == "arch"]
            problems.append(f"config error: studies.{name}.lean: not for task {task} (allowed: "
                            f"{', '.join(arch_tasks)})")
            return None
        if ("budget" in st["lean"]) == ("reduction" in st["lean"]):
            problems.append(f"config error: studies.{name}.lean: give budget or reduction, one of them (allowed: "
                            f"budget, a parameter count; reduction, a fraction in (0, 1))")
            return None
        from .match import baseline_point, lean_grids  # builds models on the meta device: imports torch

        try:
            st = {**st, "grid": lean_grids(model_base, st["lean"])}
        except ValueError as exc:
            problems.append(f"config error: studies.{name}.lean: {exc}")
            return None
        if len(st["grid"]) == 1:
            problems.append(f"config error: studies.{name}.lean: no configuration of fewer layers and more heads "
                            f"fits the budget (allowed: a larger budget or reduction; `leaner match` lists them)")
        base = baseline_point(st["lean"]["baseline"])
        baseline = baseline or {k: base[k] for k in ("depth", "heads", "width", "mlp_hidden")}
    grids = st["grid"] if isinstance(st["grid"], list) else [st["grid"]]
    points: list[dict] = []
    for i, g in enumerate(grids):
        key = grid_key(name, i if isinstance(st["grid"], list) else None)
        unused = [k for k in g if k not in info.grid_keys]
        for k in unused:
            problems.append(f"config error: {key}.{k}: not used by task {task} "
                            f"(allowed: {', '.join(info.grid_keys)})")
        if unused:
            continue
        if info.grid == "nearest":
            points += expand_nearest_grid(key, g, problems, model_base)
        else:
            points += expand_image_grid(key, g, problems)

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
        recipe = dict(recipe_base)
        for ov in overrides:
            if _matches(ov["where"], p):
                recipe = {**recipe, **ov["recipe"]}
        variants[vid] = Variant(study=name, id=vid, task=task, dataset=st["dataset"], seed=p["seed"],
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
    variants = {vid: Variant(**{**v.__dict__, "protocols": tuple(protocols[vid])}) for vid, v in variants.items()}
    if not variants and not any(p.startswith(f"config error: studies.{name}.") for p in problems):
        problems.append(f"config error: studies.{name}.grid: expands to no variants")
    finetune = None
    if info.finetune_trainer:
        ft = st.get("finetune")
        if not ft:
            problems.append(f"config error: studies.{name}.finetune: required by task glue "
                            f"(allowed: a mapping with keys dataset, recipe)")
        elif ft["dataset"] not in datasets or datasets[ft["dataset"]]["kind"] != "glue":
            glue_sets = sorted(n for n, d in datasets.items() if d["kind"] == "glue")
            problems.append(f"config error: studies.{name}.finetune.dataset: {ft['dataset']!r} is not a glue dataset "
                            f"(allowed: {', '.join(glue_sets) or 'none declared; add one of kind glue'})")
        elif datasets[ft["dataset"]]["max_length"] > model_base["max_len"]:
            max_length = datasets[ft["dataset"]]["max_length"]
            problems.append(f"config error: datasets.{ft['dataset']}.max_length: {max_length} "
                            f"is longer than study {name}'s context {model_base['max_len']} (allowed: at most the "
                            f"pretraining context, model.context)")
        else:
            finetune = {"dataset": ft["dataset"], "tasks": list(datasets[ft["dataset"]]["tasks"]),
                        "recipe": {**RECIPE_DEFAULTS, **FINETUNE_RECIPE_DEFAULTS, **(ft.get("recipe") or {})}}
    elif st.get("finetune"):
        problems.append(f"config error: studies.{name}.finetune: only used by task glue "
                        f"(allowed: remove it, or task: glue)")
    res = st.get("resources") or {}
    if res.get("jobs_per_gpu", 1) > 1 and res.get("gpu", 0) != 1:
        problems.append(f"config error: studies.{name}.resources.jobs_per_gpu: {res['jobs_per_gpu']} jobs share one "
                        f"GPU, so gpu must be 1, got {res.get('gpu', 0)} (allowed: gpu: 1 with jobs_per_gpu > 1, "
                        f"or jobs_per_gpu: 1)")
    return Study(name=name, task=task, dataset=st["dataset"], variants=variants, finetune=finetune,
                 baseline=baseline,
                 resources={**RESOURCE_DEFAULTS, **(st.get("resources") or {})},
                 description=st.get("description", ""),
                 acceptance=tuple(st.get("acceptance", ACCEPTANCE_CHECKS)))


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError([f"config error: {path}: file not found"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise ConfigError([f"config error: {path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"config error: {path}: must be a mapping with a 'studies' key"])
    return data


def merge_cli_config(config: dict, default: dict) -> None:
    """Put `default` under `config` in place (values given on the command line win)."""
    merged = _deep_merge(default, config)
    config.clear()
    config.update(merged)


def load_plan(path: str | Path) -> Plan:
    """Load and expand a config file; relative dataset paths resolve against the working
    directory, as they do under Snakemake."""
    return build_plan(load_yaml(path))
